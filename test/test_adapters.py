"""Message adapters on real ROS 2 message objects (rosbags typestores), good and malformed."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters import GENERIC, AdaptResult, adapt, adapter_for, message_type, render
from emem_ros.ros.adapters.battery import adapt_battery
from emem_ros.ros.intake import SUBJECT_KEY, IntakePolicy
from emem_ros.ros.params import LayerSpec

RECEIVED = 1_700_000_100.0
STAMP = 1_700_000_000.25
T = get_typestore(Stores.ROS2_HUMBLE).types


def _vision_types():
    from emem_ros.replay.typestore import load_typestore

    return load_typestore("humble").types


V = _vision_types()


def layer(name: str, msg_type: str, internal: bool = False) -> LayerSpec:
    return LayerSpec(name=name, topic=f"/{name}", msg_type=msg_type, is_internal_state=internal)


def time(t: float):
    sec = int(t)
    return T["builtin_interfaces/msg/Time"](sec=sec, nanosec=int(round((t - sec) * 1e9)))


def header(t: float = STAMP, frame: str = ""):
    return T["std_msgs/msg/Header"](stamp=time(t), frame_id=frame)


def only(result: AdaptResult) -> ObservationDraft:
    assert result.skipped_reason is None, result.skipped_reason
    assert len(result.drafts) == 1
    return result.drafts[0]


# ---------------------------------------------------------------------- std_msgs/String
SCENE = layer("scene", "std_msgs/msg/String")


def test_string_becomes_one_perception_draft_at_receive_time():
    draft = only(adapt(T["std_msgs/msg/String"](data="  a kitchen with a red mug  "), SCENE, RECEIVED))
    assert draft == ObservationDraft(text="a kitchen with a red mug", stamp=RECEIVED, layer="scene",
                                     source_type="perception")


@pytest.mark.parametrize("data", ["", "   ", "\n\t "])
def test_blank_string_is_skipped_with_a_reason(data):
    result = adapt(T["std_msgs/msg/String"](data=data), SCENE, RECEIVED)
    assert result.drafts == [] and result.skipped and "empty" in result.skipped_reason


def test_huge_string_is_capped_not_rejected():
    huge = "mug " * 500_000  # 2 MB
    draft = only(adapt(T["std_msgs/msg/String"](data=huge), SCENE, RECEIVED, max_text_length=1000))
    assert len(draft.text) == 1000 and draft.text.endswith("…")
    assert draft.metadata["text_length"] == len(huge.strip())


def test_default_cap_is_the_memory_limit():
    draft = only(adapt(T["std_msgs/msg/String"](data="x" * 10_000), SCENE, RECEIVED))
    assert len(draft.text) == 4096


def test_short_type_name_is_accepted():
    draft = only(adapt(T["std_msgs/msg/String"](data="hi"), layer("scene", "std_msgs/String"), RECEIVED))
    assert draft.text == "hi"
    assert adapter_for("std_msgs/String")[0] == "std_msgs/msg/String"


# ---------------------------------------------------------------------- numbers
@pytest.mark.parametrize("msg_type, data, text, value", [
    ("std_msgs/msg/Float32", np.float32(0.73), "cpu_load: 0.73", pytest.approx(0.73, abs=1e-6)),
    ("std_msgs/msg/Float64", 12.0, "cpu_load: 12", 12.0),
    ("std_msgs/msg/Int8", -3, "cpu_load: -3", -3.0),
    ("std_msgs/msg/UInt8", 200, "cpu_load: 200", 200.0),
    ("std_msgs/msg/Int64", 9_007_199_254_740_993, "cpu_load: 9007199254740993", 9.007199254740992e15),
    ("std_msgs/msg/UInt64", np.uint64(18_446_744_073_709_551_615), "cpu_load: 18446744073709551615",
     pytest.approx(1.8446744073709552e19)),
    ("std_msgs/msg/Bool", True, "cpu_load: true", 1.0),
    ("std_msgs/msg/Bool", False, "cpu_load: false", 0.0),
])
def test_numbers_are_named_after_their_layer(msg_type, data, text, value):
    draft = only(adapt(T[msg_type](data=data), layer("cpu_load", msg_type, internal=True), RECEIVED))
    assert (draft.text, draft.value) == (text, value)
    assert draft.source_type == "interoception"


@pytest.mark.parametrize("data", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_skipped(data):
    result = adapt(T["std_msgs/msg/Float64"](data=data), layer("cpu_load", "std_msgs/msg/Float64"), RECEIVED)
    assert result.drafts == [] and "not a finite number" in result.skipped_reason


def test_a_string_where_a_number_belongs_is_malformed():
    fake = SimpleNamespace(data="0.5")  # no type of its own: the layer's adapter reads it
    result = adapt(fake, layer("cpu_load", "std_msgs/msg/Float32"), RECEIVED)
    assert result.drafts == [] and "finite number" in result.skipped_reason


# ---------------------------------------------------------------------- BatteryState
BATTERY = layer("battery", "sensor_msgs/msg/BatteryState", internal=True)


def battery(**fields):
    values = dict(
        header=header(STAMP, "base_link"), voltage=11.9, temperature=math.nan, current=-1.2, charge=math.nan,
        capacity=math.nan, design_capacity=math.nan, percentage=0.54, power_supply_status=2,
        power_supply_health=1, power_supply_technology=2, present=True,
        cell_voltage=np.array([], dtype=np.float32), cell_temperature=np.array([], dtype=np.float32),
        location="", serial_number="",
    )
    values.update(fields)
    return T["sensor_msgs/msg/BatteryState"](**values)


def test_battery_text_value_and_stamp():
    draft = only(adapt(battery(), BATTERY, RECEIVED))
    assert draft.text == "battery 54% (11.9 V, discharging)"
    assert draft.value == pytest.approx(0.54)
    assert draft.stamp == pytest.approx(STAMP)
    assert draft.source_type == "interoception"
    assert draft.metadata["status"] == "discharging" and draft.metadata["current"] == pytest.approx(-1.2)
    assert "temperature" not in draft.metadata  # NaN fields are left out, not stored as NaN


@pytest.mark.parametrize("status, word", [(1, "charging"), (3, "not charging"), (4, "full")])
def test_battery_status_words(status, word):
    assert only(adapt(battery(power_supply_status=status), BATTERY, RECEIVED)).text.endswith(f"{word})")


def test_battery_health_problems_are_said():
    draft = only(adapt(battery(power_supply_health=2, voltage=math.nan, power_supply_status=0), BATTERY, RECEIVED))
    assert draft.text == "battery 54% (overheat)"


def test_battery_nan_percentage_falls_back_to_charge_over_capacity():
    draft = only(adapt(battery(percentage=math.nan, charge=2.5, capacity=5.0), BATTERY, RECEIVED))
    assert draft.value == pytest.approx(0.5)
    assert draft.text.startswith("battery 50%")
    assert draft.metadata["fraction_source"] == "charge/capacity"


def test_battery_nan_percentage_uses_design_capacity_when_capacity_is_unknown():
    draft = only(adapt(battery(percentage=math.nan, charge=1.0, design_capacity=4.0), BATTERY, RECEIVED))
    assert draft.value == pytest.approx(0.25)


def test_battery_without_any_charge_figure_is_skipped():
    result = adapt(battery(percentage=math.nan), BATTERY, RECEIVED)
    assert result.drafts == [] and "percentage" in result.skipped_reason


def test_battery_percentage_on_a_0_to_100_scale_is_understood():
    assert only(adapt(battery(percentage=87.0), BATTERY, RECEIVED)).value == pytest.approx(0.87)


def test_battery_zero_stamp_uses_receive_time():
    draft = only(adapt(battery(header=header(0.0)), BATTERY, RECEIVED))
    assert draft.stamp == RECEIVED


def test_battery_on_a_perception_layer_is_perception():
    draft = only(adapt(battery(), layer("battery", "sensor_msgs/msg/BatteryState"), RECEIVED))
    assert draft.source_type == "perception"


# ---------------------------------------------------------------------- Temperature
CPU_TEMP = layer("cpu_temp", "sensor_msgs/msg/Temperature", internal=True)


def temperature(celsius: float, t: float = STAMP):
    return T["sensor_msgs/msg/Temperature"](header=header(t, "cpu"), temperature=celsius, variance=0.0)


def test_temperature():
    draft = only(adapt(temperature(41.23), CPU_TEMP, RECEIVED))
    assert (draft.text, draft.value, draft.stamp) == ("temperature 41.2 °C", 41.23, pytest.approx(STAMP))
    assert draft.metadata["sensor_frame"] == "cpu"


@pytest.mark.parametrize("celsius", [math.nan, math.inf, -300.0])
def test_impossible_temperatures_are_skipped(celsius):
    assert adapt(temperature(celsius), CPU_TEMP, RECEIVED).drafts == []


def test_temperature_without_header_uses_receive_time():
    draft = only(adapt(SimpleNamespace(temperature=30.0, variance=0.0), CPU_TEMP, RECEIVED))
    assert draft.stamp == RECEIVED


# ---------------------------------------------------------------------- vision_msgs
DETECTIONS = layer("detections", "vision_msgs/msg/Detection2DArray")
DETECTIONS_3D = layer("detections_3d", "vision_msgs/msg/Detection3DArray")


def pose(position=(0.0, 0.0, 0.0)):
    return T["geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](x=position[0], y=position[1],
                                                                             z=position[2]),
                                       orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))


def hypothesis(class_id: str, score: float, position=(0.0, 0.0, 0.0)):
    return V["vision_msgs/msg/ObjectHypothesisWithPose"](
        hypothesis=V["vision_msgs/msg/ObjectHypothesis"](class_id=class_id, score=score),
        pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose(position), covariance=np.zeros(36)))


def detection2d(results, t: float = 0.0, center=(320.0, 240.0), size=(40.0, 60.0), track: str = ""):
    bbox = V["vision_msgs/msg/BoundingBox2D"](
        center=V["vision_msgs/msg/Pose2D"](position=V["vision_msgs/msg/Point2D"](x=center[0], y=center[1]),
                                           theta=0.0),
        size_x=size[0], size_y=size[1])
    return V["vision_msgs/msg/Detection2D"](header=header(t, "camera"), results=list(results), bbox=bbox, id=track)


def array2d(detections, t: float = STAMP):
    return V["vision_msgs/msg/Detection2DArray"](header=header(t, "camera"), detections=list(detections))


def detection3d(results, center=(0.0, 0.0, 0.0), size=(0.0, 0.0, 0.0), frame: str = ""):
    values = dict(header=header(0.0, frame), results=list(results),
                  bbox=V["vision_msgs/msg/BoundingBox3D"](
                      center=pose(center), size=T["geometry_msgs/msg/Vector3"](x=size[0], y=size[1], z=size[2])),
                  id="")
    if "source_cloud" in V["vision_msgs/msg/Detection3D"].__dataclass_fields__:  # older vision_msgs
        values["source_cloud"] = T["sensor_msgs/msg/PointCloud2"](
            header=header(0.0), height=0, width=0, fields=[], is_bigendian=False, point_step=0, row_step=0,
            data=np.zeros(0, dtype=np.uint8), is_dense=True)
    return V["vision_msgs/msg/Detection3D"](**values)


def array3d(detections, frame: str = "map"):
    return V["vision_msgs/msg/Detection3DArray"](header=header(STAMP, frame), detections=list(detections))


def test_one_draft_per_detection_with_the_best_hypothesis():
    msg = array2d([
        detection2d([hypothesis("cup", 0.41), hypothesis("red mug", 0.92), hypothesis("bowl", 0.10)],
                    track="7"),
        detection2d([hypothesis("chair", 0.8)], center=(10.0, 20.0), size=(5.0, 6.0)),
    ])
    result = adapt(msg, DETECTIONS, RECEIVED)
    assert result.skipped_reason is None and result.adapter == "vision_msgs/msg/Detection2DArray"
    mug, chair = result.drafts
    assert (mug.text, mug.confidence, mug.stamp, mug.position) == ("red mug", 0.92, pytest.approx(STAMP), None)
    assert mug.metadata["class_id"] == "red mug" and mug.metadata[SUBJECT_KEY] == "red mug"
    assert mug.metadata["hypotheses"] == [["cup", 0.41], ["bowl", 0.10]]
    assert mug.metadata["bbox"] == {"center": [320.0, 240.0], "size": [40.0, 60.0]}
    assert mug.metadata["track_id"] == "7"
    assert (chair.text, chair.metadata["bbox"]["center"]) == ("chair", [10.0, 20.0])
    assert "hypotheses" not in chair.metadata


def test_detection_header_stamp_wins_over_the_array_stamp():
    msg = array2d([detection2d([hypothesis("door", 0.9)], t=STAMP - 0.1)])
    assert only(adapt(msg, DETECTIONS, RECEIVED)).stamp == pytest.approx(STAMP - 0.1)


def test_detection_without_results_is_left_out_and_noted():
    msg = array2d([detection2d([]), detection2d([hypothesis("sofa", 0.7)])])
    result = adapt(msg, DETECTIONS, RECEIVED)
    assert [d.text for d in result.drafts] == ["sofa"]
    assert result.partial and "detection 0" in result.partial[0]


def test_nan_scores_and_blank_classes_are_not_hypotheses():
    msg = array2d([detection2d([hypothesis("ghost", math.nan), hypothesis("  ", 0.9), hypothesis("tv", 0.3)])])
    assert only(adapt(msg, DETECTIONS, RECEIVED)).text == "tv"


def test_scores_outside_0_1_are_clamped_into_confidence():
    draft = only(adapt(array2d([detection2d([hypothesis("tv", 87.0)])]), DETECTIONS, RECEIVED))
    assert draft.confidence == 1.0 and draft.metadata["score"] == 87.0


def test_no_detections_skips_the_message():
    result = adapt(array2d([]), DETECTIONS, RECEIVED)
    assert result.drafts == [] and result.skipped_reason == "no detections"


def test_only_unusable_detections_skip_the_message():
    result = adapt(array2d([detection2d([]), detection2d([hypothesis("x", math.nan)])]), DETECTIONS, RECEIVED)
    assert result.drafts == [] and "none of the 2 detections" in result.skipped_reason


def test_3d_detection_position_from_the_hypothesis_pose():
    msg = array3d([detection3d([hypothesis("red mug", 0.9, (1.5, -2.0, 0.8))], center=(9.0, 9.0, 9.0),
                               size=(0.1, 0.1, 0.1))])
    draft = only(adapt(msg, DETECTIONS_3D, RECEIVED))
    assert draft.position == (1.5, -2.0, 0.8)
    assert draft.frame_id == "map"
    assert draft.metadata["position_source"] == "hypothesis pose"
    assert draft.metadata["bbox"] == {"center": [9.0, 9.0, 9.0], "size": [0.1, 0.1, 0.1]}


def test_3d_detection_falls_back_to_the_box_centre():
    msg = array3d([detection3d([hypothesis("chair", 0.8)], center=(3.0, 4.0, 0.5), size=(0.5, 0.5, 1.0),
                               frame="camera_link")])
    draft = only(adapt(msg, DETECTIONS_3D, RECEIVED))
    assert draft.position == (3.0, 4.0, 0.5)
    assert draft.frame_id == "camera_link"  # the detection's own header frame wins
    assert draft.metadata["position_source"] == "bbox center"


def test_3d_detection_with_nan_position_keeps_the_draft_without_position():
    nan = (math.nan, math.nan, math.nan)
    msg = array3d([detection3d([hypothesis("door", 0.7, nan)], center=nan, size=(1.0, 1.0, 2.0))])
    draft = only(adapt(msg, DETECTIONS_3D, RECEIVED))
    assert draft.position is None and draft.frame_id is None
    assert "not finite" in draft.metadata["position_source"]
    assert "bbox" not in draft.metadata


def test_3d_detection_with_unset_pose_and_box_has_no_position_not_the_origin():
    draft = only(adapt(array3d([detection3d([hypothesis("lamp", 0.6)])]), DETECTIONS_3D, RECEIVED))
    assert draft.position is None
    assert "unset" in draft.metadata["position_source"]


def test_30hz_detections_through_a_sampled_policy():
    policy = IntakePolicy("sampled", min_period=1.0)
    kept = []
    for k in range(150):  # 5 s at 30 Hz, a mug and a chair in every frame
        t = STAMP + k / 30.0
        msg = array2d([detection2d([hypothesis("red mug", 0.9)]), detection2d([hypothesis("chair", 0.8)])], t=t)
        kept += [d.text for d in adapt(msg, DETECTIONS, RECEIVED).drafts if policy.accept(d)]
    assert kept.count("red mug") == 5 and kept.count("chair") == 5


# ---------------------------------------------------------------------- DiagnosticArray
DIAGNOSTICS = layer("diagnostics", "diagnostic_msgs/msg/DiagnosticArray", internal=True)


def status(level: int, name: str, message: str, **values):
    return T["diagnostic_msgs/msg/DiagnosticStatus"](
        level=level, name=name, message=message, hardware_id="hw0",
        values=[T["diagnostic_msgs/msg/KeyValue"](key=k, value=str(v)) for k, v in values.items()])


def diagnostics(*statuses):
    return T["diagnostic_msgs/msg/DiagnosticArray"](header=header(), status=list(statuses))


def test_one_interoceptive_draft_per_status():
    msg = diagnostics(status(0, "battery_monitor", "ok"),
                      status(1, "motor_left", "temperature high", temp="71.2", current="3.1", mode="auto",
                             firmware="2.3.1", serial="XYZ"),
                      status(2, "lidar", "no data"), status(3, "camera", "stale"))
    result = adapt(msg, DIAGNOSTICS, RECEIVED)
    texts = [d.text for d in result.drafts]
    assert texts[0] == "OK battery_monitor: ok"
    assert texts[1] == "WARN motor_left: temperature high (temp=71.2, current=3.1, mode=auto, firmware=2.3.1)"
    assert texts[2:] == ["ERROR lidar: no data", "STALE camera: stale"]
    motor = result.drafts[1]
    assert motor.value == 1.0 and motor.source_type == "interoception"
    assert motor.metadata[SUBJECT_KEY] == "motor_left" and motor.metadata["values"]["serial"] == "XYZ"
    assert motor.metadata["hardware_id"] == "hw0"


def test_rclpy_style_byte_level_is_read():
    kv = SimpleNamespace(key="rpm", value="1200")
    msg = SimpleNamespace(header=header(), status=[SimpleNamespace(level=b"\x02", name="wheel", message="stuck",
                                                                   hardware_id="", values=[kv])])
    assert only(adapt(msg, DIAGNOSTICS, RECEIVED)).text == "ERROR wheel: stuck (rpm=1200)"


def test_empty_diagnostics_are_skipped():
    assert adapt(diagnostics(), DIAGNOSTICS, RECEIVED).skipped_reason == "diagnostic array has no status"
    result = adapt(diagnostics(status(0, "", "")), DIAGNOSTICS, RECEIVED)
    assert result.drafts == [] and "neither name nor message" in result.partial[0]


# ---------------------------------------------------------------------- generic fallback
def test_unknown_type_is_rendered_compactly():
    twist = T["geometry_msgs/msg/Twist"](linear=T["geometry_msgs/msg/Vector3"](x=0.5, y=0.0, z=0.0),
                                         angular=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=-0.25))
    result = adapt(twist, layer("cmd", "geometry_msgs/msg/Twist"), RECEIVED)
    draft = only(result)
    assert result.adapter == GENERIC
    assert draft.text == "linear={x=0.5 y=0 z=0} angular={x=0 y=0 z=-0.25}"
    assert draft.metadata["msg_type"] == "geometry_msgs/msg/Twist"
    assert draft.stamp == RECEIVED


def test_generic_skips_big_arrays_and_bytes():
    cloud = T["sensor_msgs/msg/PointCloud2"](
        header=header(STAMP, "lidar"), height=1, width=100_000,
        fields=[T["sensor_msgs/msg/PointField"](name="x", offset=0, datatype=7, count=1)],
        is_bigendian=False, point_step=16, row_step=1_600_000, data=np.zeros(1_600_000, dtype=np.uint8),
        is_dense=True)
    draft = only(adapt(cloud, layer("cloud", "sensor_msgs/msg/PointCloud2"), RECEIVED))
    assert "data=<1600000 bytes>" in draft.text
    assert "fields=[{name=x offset=0 datatype=7 count=1}]" in draft.text
    assert draft.stamp == pytest.approx(STAMP) and draft.metadata["frame_id"] == "lidar"
    assert len(draft.text) < 300


def test_generic_renders_small_arrays_and_elides_covariances():
    odom_cov = T["geometry_msgs/msg/PoseWithCovariance"](pose=pose((1.0, 2.0, 0.0)), covariance=np.zeros(36))
    text = render(odom_cov)
    assert "covariance=<36 items>" in text and "position={x=1 y=2 z=0}" in text
    assert render(T["std_msgs/msg/Float64MultiArray"](
        layout=T["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0),
        data=np.array([1.0, 2.5]))).endswith("data=[1, 2.5]")


def test_generic_output_is_capped():
    long = T["diagnostic_msgs/msg/KeyValue"](key="k" * 5000, value="v" * 5000)
    assert len(render(long)) <= 512


def test_empty_message_is_an_event():
    draft = only(adapt(T["std_msgs/msg/Empty"](), layer("bumper", "std_msgs/msg/Empty"), RECEIVED))
    assert draft.text == "bumper event"


# ---------------------------------------------------------------------- robustness
def test_wrong_message_type_on_a_layer_is_skipped_by_name():
    result = adapt(T["std_msgs/msg/String"](data="hi"), BATTERY, RECEIVED)
    assert result.drafts == []
    assert "std_msgs/msg/String" in result.skipped_reason and "sensor_msgs/msg/BatteryState" in result.skipped_reason


def test_an_adapter_handed_the_wrong_message_raises_but_adapt_does_not():
    with pytest.raises(AttributeError):
        adapt_battery(T["std_msgs/msg/String"](data="hi"), BATTERY, RECEIVED)
    result = adapt(SimpleNamespace(data="hi"), BATTERY, RECEIVED)  # a message without a type of its own
    assert result.drafts == [] and result.skipped_reason.startswith("malformed message")


@pytest.mark.parametrize("junk", [None, 42, "text", object(), SimpleNamespace(), SimpleNamespace(data=None),
                                  SimpleNamespace(header=None, detections=None, status=5)])
@pytest.mark.parametrize("msg_type", [
    "std_msgs/msg/String", "std_msgs/msg/Float32", "std_msgs/msg/Bool", "sensor_msgs/msg/BatteryState",
    "sensor_msgs/msg/Temperature", "vision_msgs/msg/Detection2DArray", "vision_msgs/msg/Detection3DArray",
    "diagnostic_msgs/msg/DiagnosticArray", "geometry_msgs/msg/Twist",
])
def test_adapt_never_raises_on_junk(junk, msg_type):
    result = adapt(junk, layer("x", msg_type), RECEIVED)
    assert isinstance(result, AdaptResult)
    assert result.drafts == [] and result.skipped_reason


def test_non_finite_receive_time_is_refused():
    result = adapt(T["std_msgs/msg/String"](data="hi"), SCENE, math.nan)
    assert result.drafts == [] and "receive time" in result.skipped_reason


def test_missing_header_on_a_vision_array_is_malformed_not_fatal():
    msg = SimpleNamespace(detections=[detection2d([hypothesis("mug", 0.9)])])
    draft = only(adapt(msg, DETECTIONS, RECEIVED))  # the detection's own header has a zero stamp
    assert draft.stamp == RECEIVED


class _RclpyString:
    """Shaped like a generated rclpy message: module pkg.msg._name, get_fields_and_field_types."""

    __module__ = "std_msgs.msg._string"
    __slots__ = ("_data",)

    def __init__(self, data: str) -> None:
        self._data = data

    @classmethod
    def get_fields_and_field_types(cls) -> dict:
        return {"data": "string"}

    @property
    def data(self) -> str:
        return self._data


_RclpyString.__name__ = "String"


def test_rclpy_shaped_messages_are_recognised():
    msg = _RclpyString("on the table")
    assert message_type(msg) == "std_msgs/msg/String"
    assert only(adapt(msg, SCENE, RECEIVED)).text == "on the table"
    assert adapt(msg, BATTERY, RECEIVED).skipped_reason.startswith("got a std_msgs/msg/String message")
    assert render(msg) == 'data="on the table"'
