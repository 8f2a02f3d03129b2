"""The memory node without rclpy (emem_ros/ros/runtime.py): configure, intake, timers, cycles.

Messages are rosbags classes (the adapters read rclpy and rosbags messages
alike); message types resolve from the same typestore instead of importlib.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rosbags.typesys")

from emem_ros.ros.msgtypes import MessageTypeError
from emem_ros.ros.runtime import ConfigureError, MemoryRuntime
from test.conftest import FakeClock
from test.support import ros_messages as messages
from test.support.ros_messages import InterfaceFactory
from test.support.scene import START, add_entity, add_gist

MAKE = InterfaceFactory()


class Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, message: str) -> None:
        self.lines.append(("info", message))

    def warning(self, message: str) -> None:
        self.lines.append(("warning", message))

    def error(self, message: str) -> None:
        self.lines.append(("error", message))

    def errors(self) -> list[str]:
        return [m for level, m in self.lines if level == "error"]


def resolve(name: str) -> type:
    try:
        return MAKE.store.types[name]
    except KeyError:
        raise MessageTypeError(f"cannot resolve {name}: no such type in the test typestore") from None


def flat_params(db: Path, **overrides: Any) -> dict[str, Any]:
    flat = {
        "db_path": str(db), "embedding.backend": "hashing", "flush_interval": 0.0, "index_save_interval": 0.0,
        "consolidation_period": 0.0, "archive_period": 0.0, "maintenance_interval": 0.0,
        "layer_names": ["scene", "detections", "battery"],
        "layers.scene.topic": "/scene", "layers.scene.msg_type": "std_msgs/msg/String",
        "layers.detections.topic": "/detections", "layers.detections.msg_type": "vision_msgs/msg/Detection2DArray",
        "layers.battery.topic": "/battery", "layers.battery.msg_type": "sensor_msgs/msg/BatteryState",
        "layers.battery.is_internal_state": True,
        "odom_max_extrapolation": 1.0,
    }
    flat.update(overrides)
    return flat


def odometry(t: float, x: float, y: float):
    return messages.odometry(MAKE, t, x, y)


def detections(t: float, *labels: str):
    return messages.detections(MAKE, t, *labels)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def runtime(clock):
    log = Recorder()
    rt = MemoryRuntime(clock, log=log, resolve=resolve)
    rt.test_log = log
    yield rt
    rt.cleanup()


def test_configure_opens_the_memory_on_the_node_clock(runtime, clock, tmp_path):
    params = runtime.configure(flat_params(tmp_path / "m.db"))
    assert runtime.configured and (tmp_path / "m.db").exists()
    assert [layer.name for layer in params.layers] == ["scene", "detections", "battery"]
    assert runtime.layer_types["detections"] is MAKE.store.types["vision_msgs/msg/Detection2DArray"]
    assert runtime.odometry_type is MAKE.store.types["nav_msgs/msg/Odometry"]
    clock.advance(12.5)
    assert runtime.memory.now() == clock.now  # the memory's clock is the node's clock
    with pytest.raises(ConfigureError, match="already open"):
        runtime.configure(flat_params(tmp_path / "m.db"))


def test_messages_are_stored_where_the_robot_was(runtime, clock, tmp_path):
    runtime.configure(flat_params(tmp_path / "m.db"))
    for i in range(11):  # the robot drives from (0, 0) to (10, 0) over 10 s
        runtime.on_odometry(odometry(START + i, float(i), 0.0))
    clock.now = START + 10.2
    text = MAKE("std_msgs/msg/String", data="a person waving in the hallway")
    scene = runtime.on_message("scene", text)  # no header: stamped on arrival (10.2 s -> x = 10 clamped)
    seen = runtime.on_message("detections", detections(START + 4.5, "red mug"))  # stamped: pose at 4.5 s
    assert scene.ids and seen.ids
    runtime.memory.flush()
    mug = runtime.memory.get_observation(seen.ids[0])
    assert mug.text == "red mug" and mug.position == pytest.approx((4.5, 0.0, 0.0))
    assert mug.stamp == START + 4.5 and mug.source_type == "perception"
    waving = runtime.memory.get_observation(scene.ids[0])
    assert waving.stamp == pytest.approx(START + 10.2) and waving.position == pytest.approx((10.0, 0.0, 0.0))
    counts = runtime.pipeline.counts()
    assert (counts["scene"].observations, counts["detections"].observations) == (1, 1)


def test_current_context_reports_the_live_odometry_pose(runtime, clock, tmp_path):
    runtime.configure(flat_params(tmp_path / "m.db"))
    runtime.on_message("detections", detections(START, "red mug"))  # seen with no pose yet: no position
    for i in range(4):
        runtime.on_odometry(odometry(START + i, 2.0 + i, 3.0))
    clock.now = START + 3.2
    context = runtime.memory.tools.get_current_context()
    assert context.position == pytest.approx((5.0, 3.0, 0.0)) and context.position_source == "odometry"
    clock.now = START + 60.0  # odometry went quiet: the last pose is no longer where the robot is
    assert runtime.memory.tools.get_current_context().position_source != "odometry"


def test_malformed_messages_and_unknown_layers_never_raise(runtime, tmp_path):
    assert runtime.on_message("scene", object()) is None  # not configured yet: ignored
    runtime.configure(flat_params(tmp_path / "m.db"))
    outcome = runtime.on_message("scene", MAKE("std_msgs/msg/String", data="   "))
    assert outcome.ids == () and outcome.skipped_reason
    assert runtime.on_message("nope", MAKE("std_msgs/msg/String", data="x")).skipped_reason
    assert runtime.on_odometry(object()) is False
    broken = runtime.on_message("detections", object())
    assert broken is not None and broken.ids == ()


def test_bad_msg_type_fails_before_the_store_is_opened(runtime, tmp_path):
    db = tmp_path / "m.db"
    with pytest.raises(ConfigureError) as caught:
        runtime.configure(flat_params(db, **{"layers.scene.msg_type": "std_msgs/msg/NoSuchType"}))
    message = str(caught.value)
    assert "layer 'scene'" in message and "layers.scene.msg_type" in message and "NoSuchType" in message
    assert not runtime.configured and not db.exists() and runtime.pipeline is None


@pytest.mark.parametrize("override, words", [
    ({"flush_interval": 1}, "flush_interval"),  # rclpy's strictness: an integer for a double
    ({"embedding.backend": "word2vec"}, "embedding.backend"),
    ({"layers.scene.topic": ""}, "layers.scene.topic"),
    ({"consolidation_period": 30.0, "maintenance_interval": 30.0}, "set one of them to 0"),
])
def test_invalid_parameters_fail_configure_in_words(runtime, tmp_path, override, words):
    with pytest.raises(ConfigureError, match="invalid parameters") as caught:
        runtime.configure(flat_params(tmp_path / "m.db", **override))
    assert words in str(caught.value) and not runtime.configured


def test_a_store_that_cannot_open_fails_configure(runtime, tmp_path):
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(ConfigureError, match="cannot open the memory"):
        runtime.configure(flat_params(tmp_path / "dir.db"))
    assert not runtime.configured


def test_a_failing_pipeline_closes_the_memory_it_opened(clock, tmp_path, monkeypatch):
    opened = []

    def build(params, get_time):
        from emem_ros.ros.factory import build_memory

        opened.append(build_memory(params, get_time))
        return opened[-1]

    import emem_ros.ros.runtime as runtime_module

    def broken(*args, **kwargs):
        raise RuntimeError("pipeline exploded")

    monkeypatch.setattr(runtime_module, "IngestPipeline", broken)
    rt = MemoryRuntime(clock, log=Recorder(), resolve=resolve, build=build)
    with pytest.raises(RuntimeError):
        rt.configure(flat_params(tmp_path / "m.db"))
    assert opened and opened[0].closed and not rt.configured


def test_deactivate_cleanup_configure_cycles_keep_the_data(runtime, clock, tmp_path):
    flat = flat_params(tmp_path / "m.db")
    runtime.configure(flat)
    runtime.on_odometry(odometry(START, 1.0, 2.0))
    ids = runtime.on_message("detections", detections(START, "red mug", "chair")).ids
    assert runtime.memory.pending == 2
    assert runtime.deactivate() == 2 and runtime.memory.pending == 0  # deactivate flushes
    memory = runtime.memory
    runtime.cleanup()
    assert memory.closed and not runtime.configured and runtime.timers() == []
    runtime.cleanup()  # twice is fine
    runtime.configure(flat)
    again = runtime.memory.get_observation(ids[0])
    assert again.text == "red mug" and again.position == pytest.approx((1.0, 2.0, 0.0))
    make = InterfaceFactory()
    response = runtime.answer("locate", make.request("Locate", concept="red mug"), make.response("Locate"), make)
    assert response.success and response.found
    assert (response.location.point.x, response.location.point.y) == pytest.approx((1.0, 2.0))


def test_configure_builds_the_query_catalog_before_the_first_question(runtime, clock, tmp_path):
    flat = flat_params(tmp_path / "m.db")
    runtime.configure(flat)
    runtime.on_odometry(odometry(START, 1.0, 2.0))
    runtime.on_message("detections", detections(START, "red mug", "chair"))
    runtime.deactivate()
    runtime.cleanup()
    runtime.configure(flat)  # a reboot onto yesterday's memory
    assert runtime.wait_warm(timeout=30.0)
    catalog = runtime.memory.tools.env.catalog
    assert sorted(catalog.layers) == ["detections"] and catalog.size() == 2  # built with no query asked


def test_timers_follow_the_periods(runtime, tmp_path):
    runtime.configure(flat_params(tmp_path / "m.db", flush_period=0.5, consolidation_period=30.0,
                                  archive_period=0.0, index_save_period=120.0))
    assert {(t.name, t.period) for t in runtime.timers()} == {("flush", 0.5), ("consolidation", 30.0),
                                                              ("index_save", 120.0)}


def test_flush_and_index_save_ticks(runtime, clock, tmp_path):
    runtime.configure(flat_params(tmp_path / "m.db", flush_period=1.0))
    runtime.on_message("scene", MAKE("std_msgs/msg/String", data="kitchen is tidy"))
    assert runtime.memory.pending == 1
    runtime.flush_tick()
    assert runtime.memory.pending == 0 and runtime.memory.store.counts()["observations"] == 1
    runtime.index_save_tick()
    assert runtime.test_log.errors() == []


def test_consolidation_ticks_queue_work_and_never_block(runtime, clock, tmp_path):
    runtime.configure(flat_params(tmp_path / "m.db", consolidation_period=60.0, archive_period=600.0,
                                  consolidation_window=60.0, consolidation_min_samples=2))
    for i in range(40):
        runtime.on_odometry(odometry(START + i, 2.0, 3.0))
        runtime.on_message("detections", detections(START + i, "red mug", "table"))
    clock.now = START + 400.0
    runtime.consolidation_tick()
    runtime.archive_tick()
    pending = runtime.pending_jobs()
    assert set(pending) == {"entities", "time_window", "archive"}
    for future in pending.values():
        future.result(timeout=30)
    counts = runtime.memory.store.counts()
    assert counts["gists"] >= 1 and counts["entities"] >= 1  # the work ran on the consolidation worker
    assert runtime.test_log.errors() == []


def test_timer_failures_are_logged_not_raised(runtime, tmp_path, monkeypatch):
    runtime.configure(flat_params(tmp_path / "m.db"))

    def broken():
        raise OSError("disk full")

    monkeypatch.setattr(runtime.memory, "flush", broken)
    runtime.flush_tick()
    assert any("disk full" in line for line in runtime.test_log.errors())
    monkeypatch.undo()
    memory = runtime.memory
    runtime.cleanup()
    for tick in (runtime.flush_tick, runtime.consolidation_tick, runtime.archive_tick, runtime.index_save_tick):
        tick()  # after cleanup: nothing to do, nothing raised
    assert memory.closed and runtime.marker_specs() == []


def test_marker_array_of_the_memory_comes_again_only_when_it_changed(runtime, clock, tmp_path):
    runtime.configure(flat_params(tmp_path / "m.db"))
    entity = add_entity(runtime.memory, "red mug", "object", (2.0, 3.0, 0.9), 4, START, START + 5)
    gist = add_gist(runtime.memory, "kitchen", (3.0, 3.0, 0.0), 1.0, START, START + 5)
    make = InterfaceFactory()
    sent: list = []
    assert runtime.publish_changed_markers(make, sent.append)
    array = make.check(sent[-1])
    assert array.markers[0].action == 3
    assert {(m.ns, m.id) for m in array.markers[1:]} == {("entities", entity), ("entity_labels", entity),
                                                         ("gists", gist), ("gist_labels", gist)}
    assert array.markers[1].header.stamp.sec == math.floor(clock.now)
    assert not runtime.publish_changed_markers(make, sent.append)  # the latched array still shows the memory
    other = add_gist(runtime.memory, "hallway", (6.0, 1.0, 0.0), 1.0, START + 10, START + 20)
    assert runtime.publish_changed_markers(make, sent.append)
    array = make.check(sent[-1])
    assert {(m.ns, m.id) for m in array.markers[1:] if m.ns == "gists"} == {("gists", gist), ("gists", other)}
    assert not runtime.publish_changed_markers(make, sent.append) and len(sent) == 2
    runtime.cleanup()  # a memory opened again is published again, changed or not
    runtime.configure(flat_params(tmp_path / "m.db"))
    assert runtime.publish_changed_markers(make, sent.append)
    assert len(make.check(sent[-1]).markers) == 7


def test_markers_whose_publish_failed_are_sent_again(runtime, tmp_path):
    runtime.configure(flat_params(tmp_path / "m.db"))
    add_gist(runtime.memory, "kitchen", (3.0, 3.0, 0.0), 1.0, START, START + 5)
    make = InterfaceFactory()

    def broken(array):
        raise RuntimeError("the middleware is gone")

    with pytest.raises(RuntimeError):
        runtime.publish_changed_markers(make, broken)
    sent: list = []
    assert runtime.publish_changed_markers(make, sent.append)  # unchanged, but never sent: sent now
    assert len(make.check(sent[0]).markers) == 3


def test_with_a_fixed_frame_tf_places_and_a_file_in_another_frame_is_named(runtime, clock, tmp_path):
    db = tmp_path / "m.db"
    runtime.configure(flat_params(db, frame_id="odom"))  # first the odometry frame, as before TF
    runtime.on_odometry(odometry(START, 1.0, 2.0))
    runtime.on_message("scene", MAKE("std_msgs/msg/String", data="a hallway"))
    runtime.deactivate()
    runtime.cleanup()
    params = runtime.configure(flat_params(db, fixed_frame="map"))
    assert params.memory.frame_id == "map" and runtime.tf_type is MAKE.store.types["tf2_msgs/msg/TFMessage"]
    assert [t.name for t in runtime.intake_timers()] == ["tf_wait"]
    assert runtime.wait_warm(timeout=30.0)
    warned = [m for level, m in runtime.test_log.lines if level == "warning" and "other frames" in m]
    assert len(warned) == 1 and "1 in 'odom'" in warned[0]
    tf = messages.tf_message(MAKE, messages.transform_stamped(MAKE, START, "map", "odom", 5.0, 0.0),
                             messages.transform_stamped(MAKE, START, "odom", "base_link", 1.0, 0.0))
    assert runtime.on_tf(tf, static=False) == 2
    outcome = runtime.on_message("scene", MAKE("std_msgs/msg/String", data="a kitchen"))
    assert len(outcome.ids) == 1
    runtime.memory.flush()
    assert runtime.memory.get_observation(outcome.ids[0]).position[:2] == pytest.approx((6.0, 0.0))
