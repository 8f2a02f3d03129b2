"""A camera layer at ingest: parameters, CameraInfo, and the ray each stored 2-D detection carries."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("rosbags.typesys")

from emem_ros.geometry.rays import Ray
from emem_ros.ros.camera import intrinsics_from_camera_info
from emem_ros.ros.params import ParamError, parse_params
from emem_ros.ros.pipeline import IngestPipeline
from test.support import ros_messages as messages
from test.support.ros_messages import InterfaceFactory

MAKE = InterfaceFactory()
T0 = 1_741_000_000.0


def flat(db: Path, **overrides):
    values = {
        "db_path": str(db), "embedding.backend": "hashing", "layer_names": ["detections", "scene", "battery"],
        "layers.detections.topic": "/detections", "layers.detections.msg_type": "vision_msgs/msg/Detection2DArray",
        "layers.detections.camera_info_topic": "/camera/camera_info",
        "layers.detections.camera.x": 0.2, "layers.detections.camera.z": 0.9,
        "layers.detections.view_range": 5.0,
        "layers.scene.topic": "/scene", "layers.scene.msg_type": "std_msgs/msg/String",
        "layers.battery.topic": "/battery", "layers.battery.msg_type": "sensor_msgs/msg/BatteryState",
        "layers.battery.is_internal_state": True,
    }
    values.update(overrides)
    return values


def stored(memory, layer="detections"):
    memory.flush()
    rows = memory.store.reader().execute(
        "SELECT x, y, metadata FROM observations WHERE layer = ? ORDER BY id", (layer,)).fetchall()
    return [(x, y, json.loads(meta) if meta else {}) for x, y, meta in rows]


# ---------------------------------------------------------------------- parameters
def test_camera_parameters_are_read_for_a_detection_layer(tmp_path):
    params = parse_params(flat(tmp_path / "m.db", **{"layers.detections.camera.yaw": 0.5}))
    spec = params.layer("detections")
    assert spec.camera.info_topic == "/camera/camera_info" and spec.camera.configured
    assert spec.camera.mounting.x == 0.2 and spec.camera.mounting.yaw == 0.5 and spec.view_range == 5.0
    assert not params.layer("scene").camera.configured and params.layer("scene").view_range == 6.0


@pytest.mark.parametrize("override, words", [
    ({"layers.scene.camera.fx": 400.0}, "bearings come only from vision_msgs/msg/Detection2DArray"),
    ({"layers.detections.camera_info_topic": "", "layers.detections.camera.fx": 400.0}, "go together"),
    ({"layers.detections.camera_info_topic": "", "layers.detections.camera.x": 0.3}, "no intrinsics"),
    ({"layers.detections.camera.fx": 400.0, "layers.detections.camera.image_width": 640,
      "layers.detections.camera.cx": 700.0}, "outside the 640 px wide image"),
    ({"layers.detections.camera.yaw": 10.0}, "radians"),
    ({"layers.detections.camera.pixel_noise": -1.0}, "pixel_noise must be zero or a positive number"),
    ({"layers.detections.view_range": 0.0}, "view_range must be a positive number"),
    ({"layers.detections.camera_info_topic": "/scene"}, "is both the topic of layer 'scene' and a camera_info_topic"),
    ({"layers.detections.camera_info_topic": "no spaces"}, "not a valid ROS topic name"),
])
def test_bad_camera_parameters_are_refused_in_words(tmp_path, override, words):
    with pytest.raises(ParamError, match=words):
        parse_params(flat(tmp_path / "m.db", **override))


def test_default_camera_values_on_another_layer_are_no_settings(tmp_path):
    """The node passes every declared parameter, defaults included."""
    params = parse_params(flat(tmp_path / "m.db", **{"layers.scene.camera.fx": 0.0,
                                                     "layers.scene.camera_info_topic": ""}))
    assert not params.layer("scene").camera.configured


def test_camera_info_gives_the_intrinsics_and_bad_ones_are_refused():
    got = intrinsics_from_camera_info(messages.camera_info(MAKE, T0, fx=381.0, cx=300.0, width=640))
    assert (got.fx, got.cx, got.width, got.fy, got.cy, got.height) == (381.0, 300.0, 640, 381.0, 240.0, 480)
    for bad in (messages.camera_info(MAKE, T0, fx=0.0), messages.camera_info(MAKE, T0, width=0),
                messages.camera_info(MAKE, T0, cx=900.0), MAKE("std_msgs/msg/String", data="k")):
        with pytest.raises(ValueError):
            intrinsics_from_camera_info(bad)


# ---------------------------------------------------------------------- the pipeline
def test_a_detection_is_stored_with_its_ray_from_the_interpolated_pose(tmp_path, memory):
    pipeline = IngestPipeline(memory, parse_params(flat(tmp_path / "m.db")))
    assert pipeline.on_camera_info("/camera/camera_info", messages.camera_info(MAKE, T0))
    # The robot turns from 80° to 100° while driving up; the image is taken half-way.
    pipeline.on_odometry(messages.odometry(MAKE, T0, 1.0, 1.0, yaw=math.radians(80)))
    pipeline.on_odometry(messages.odometry(MAKE, T0 + 0.2, 1.0, 1.2, yaw=math.radians(100)))
    outcome = pipeline.on_message("detections", messages.boxes(MAKE, T0 + 0.1, ("mug", 220.0, 240.0, 20.0, 20.0)),
                                  T0 + 0.15)
    assert outcome.ids
    ((x, y, meta),) = stored(memory)
    assert (x, y) == pytest.approx((1.0, 1.1))  # the observation stays at the robot's pose
    ray = Ray.from_metadata(meta["ray"])
    assert (ray.x, ray.y, ray.z) == pytest.approx((1.0, 1.3, 0.9), abs=1e-3)  # 20 cm ahead of a robot facing +y
    assert ray.azimuth == pytest.approx(math.radians(90) + math.atan2(100.0, 400.0), abs=1e-4)
    assert meta["view_range"] == 5.0 and meta["position_source"] == "odometry"
    assert pipeline.counts()["detections"].bearings == 1


def test_a_heading_across_the_back_is_interpolated_the_short_way(tmp_path, memory):
    pipeline = IngestPipeline(memory, parse_params(flat(tmp_path / "m.db")))
    pipeline.on_camera_info("/camera/camera_info", messages.camera_info(MAKE, T0))
    pipeline.on_odometry(messages.odometry(MAKE, T0, 0.0, 0.0, yaw=math.radians(170)))
    pipeline.on_odometry(messages.odometry(MAKE, T0 + 1.0, 0.0, 0.0, yaw=math.radians(-170)))
    pipeline.on_message("detections", messages.boxes(MAKE, T0 + 0.5, ("mug", 320.0, 240.0, 20.0, 20.0)), T0 + 0.6)
    ((_, _, meta),) = stored(memory)
    assert abs(abs(meta["ray"][3]) - math.pi) < 1e-4  # facing 180°, not 0°


def test_why_a_detection_has_no_ray_is_counted(tmp_path, memory):
    pipeline = IngestPipeline(memory, parse_params(flat(tmp_path / "m.db")))
    pipeline.on_odometry(messages.odometry(MAKE, T0, 0.0, 0.0))
    pipeline.on_message("detections", messages.boxes(MAKE, T0, ("mug", 320.0, 240.0, 20.0, 20.0)), T0)
    pipeline.on_camera_info("/camera/camera_info", messages.camera_info(MAKE, T0))
    pipeline.on_message("detections", messages.boxes(MAKE, T0 + 0.1, ("sofa", 40.0, 240.0, 80.0, 90.0)), T0 + 0.1)
    unset = messages.odometry(MAKE, T0 + 0.2, 0.0, 0.0)
    unset.pose.pose.orientation.w = 0.0
    pipeline.on_odometry(unset)
    pipeline.on_message("detections", messages.boxes(MAKE, T0 + 0.2, ("cup", 320.0, 240.0, 20.0, 20.0)), T0 + 0.2)
    counts = pipeline.counts()["detections"]
    assert counts.observations == 3 and counts.bearings == 0
    reasons = " | ".join(sorted(counts.without_bearing))
    assert "no camera intrinsics yet" in reasons and "cut by the image border" in reasons
    assert "no heading" in reasons
    assert all("ray" not in meta and meta["view_range"] == 5.0 for _, _, meta in stored(memory))


def test_camera_parameters_work_without_camera_info(tmp_path, memory):
    params = parse_params(flat(tmp_path / "m.db", **{"layers.detections.camera_info_topic": "",
                                                     "layers.detections.camera.fx": 400.0,
                                                     "layers.detections.camera.image_width": 640}))
    pipeline = IngestPipeline(memory, params)
    assert pipeline.camera_topics == {}
    pipeline.on_odometry(messages.odometry(MAKE, T0, 2.0, 0.0, yaw=math.pi))
    pipeline.on_message("detections", messages.boxes(MAKE, T0, ("mug", 420.0, 100.0, 20.0, 20.0)), T0)
    ((_, _, meta),) = stored(memory)
    ray = Ray.from_metadata(meta["ray"])
    assert ray.azimuth == pytest.approx(-math.pi + math.atan2(-100.0, 400.0) + 2 * math.pi, abs=1e-4)
    assert ray.elevation == 0.0  # no fy / cy from parameters: no elevation


def test_body_layers_get_no_view_range_and_other_layers_no_ray(tmp_path, memory):
    pipeline = IngestPipeline(memory, parse_params(flat(tmp_path / "m.db")))
    pipeline.on_odometry(messages.odometry(MAKE, T0, 1.0, 2.0))
    pipeline.on_message("scene", MAKE("std_msgs/msg/String", data="a kitchen"), T0)
    ((_, _, meta),) = stored(memory, "scene")
    assert meta == {"position_source": "odometry", "view_range": 6.0}
    assert pipeline.cameras.keys() == {"detections"}


def test_a_bad_camera_info_changes_nothing(tmp_path, memory):
    pipeline = IngestPipeline(memory, parse_params(flat(tmp_path / "m.db")))
    assert pipeline.on_camera_info("/camera/camera_info", messages.camera_info(MAKE, T0, fx=400.0))
    assert not pipeline.on_camera_info("/camera/camera_info", messages.camera_info(MAKE, T0, fx=-1.0))
    assert not pipeline.on_camera_info("/other", messages.camera_info(MAKE, T0, fx=200.0))
    camera = pipeline.cameras["detections"]
    assert camera.intrinsics.fx == 400.0 and camera.infos == 1 and camera.rejected_infos == 1
