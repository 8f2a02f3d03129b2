"""node.py's own logic without ROS: parameters, transitions, wiring, main(), on a stand-in rclpy.

test/support/fake_rclpy.py records what the node creates and models rclpy's
typed parameters; these tests check what node.py does with them (declare,
read, fail configure cleanly, create and destroy entities in the right
callback groups, answer services, close the memory at exit). The same node
against real rclpy is test/ros/test_node.py (ROS 2 Humble).
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time

import pytest

pytest.importorskip("rosbags.typesys")

from emem_ros.ros.params import declarations
from emem_ros.ros.services import SERVICES
from test.support import fake_rclpy
from test.support import ros_messages as messages
from test.support.fake_rclpy import Parameter, TransitionCallbackReturn
from test.support.ros_messages import InterfaceFactory

MAKE = InterfaceFactory()
START = fake_rclpy.LifecycleNode.clock_seconds[0]
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


def odometry(t: float, x: float, y: float):
    return messages.odometry(MAKE, t, x, y)


def detections(t: float, *labels: str):
    return messages.detections(MAKE, t, *labels)


@pytest.fixture
def node_module():
    with fake_rclpy.installed(MAKE) as module:
        yield module


def overrides(db, **extra) -> list[Parameter]:
    values = {
        "db_path": str(db), "embedding.backend": "hashing", "flush_interval": 0.0, "index_save_interval": 0.0,
        "consolidation_period": 30.0, "archive_period": 0.0, "marker_period": 1.0, "odom_max_extrapolation": 2.0,
        "layer_names": ["scene", "detections"],
        "layers.scene.topic": "/scene", "layers.scene.msg_type": "std_msgs/msg/String",
        "layers.detections.topic": "/detections", "layers.detections.msg_type": "vision_msgs/Detection2DArray",
        "layers.detections.reliability": "best_effort",
    }
    values.update(extra)
    return [Parameter(name, value=value) for name, value in values.items()]


@pytest.fixture
def make_node(node_module):
    made = []

    def build(db, **extra):
        node = node_module.MemoryNode(parameter_overrides=overrides(db, **extra))
        made.append(node)
        return node

    yield build
    for node in made:
        node.release()
        node.destroy_node()


def of_kind(node, kind):
    return [e for e in node.entities if e.kind == kind]


def test_parameters_are_declared_with_explicit_types(make_node, tmp_path):
    node = make_node(tmp_path / "m.db")
    assert all(node.has_parameter(name) for name, *_ in declarations())
    assert node._params["layer_names"].value == ["scene", "detections"]
    assert not node.has_parameter("layers.scene.topic")  # declared at configure, once layer_names is read
    assert node.trigger("configure") == SUCCESS
    assert node.get_parameter("layers.scene.topic").value == "/scene"
    assert node.get_parameter("layers.scene.qos_depth").value == 10  # a declared default
    assert node.runtime.memory.now() == START  # the node's clock


def test_an_unset_layer_names_is_an_empty_list(node_module, tmp_path):
    node = node_module.MemoryNode(parameter_overrides=[
        Parameter("db_path", value=str(tmp_path / "m.db")), Parameter("embedding.backend", value="hashing")])
    try:
        assert node._read_parameters()["layer_names"] == []
        assert node.trigger("configure") == SUCCESS and node.runtime.params.layers == []
    finally:
        node.release()


def test_activate_wires_layers_services_timers_and_markers(make_node, tmp_path):
    node = make_node(tmp_path / "m.db")
    assert node.trigger("configure") == SUCCESS and node.entities == []  # nothing before activate
    assert node.trigger("activate") == SUCCESS
    subs = {e.name: e for e in of_kind(node, "subscription")}
    assert set(subs) == {"/scene", "/detections", "/odom"}
    assert {id(e.callback_group) for e in subs.values()} == {id(node._intake_group)}
    assert subs["/detections"].qos.reliability is fake_rclpy.ReliabilityPolicy.BEST_EFFORT
    assert subs["/scene"].qos.reliability is fake_rclpy.ReliabilityPolicy.RELIABLE
    assert issubclass(subs["/detections"].type, MAKE.store.types["vision_msgs/msg/Detection2DArray"])
    services = of_kind(node, "service")
    assert sorted(e.name for e in services) == sorted(f"~/{s.name}" for s in SERVICES)
    assert {id(e.callback_group) for e in services} == {id(node._query_group)}
    timers = of_kind(node, "timer")
    assert sorted(e.period for e in timers) == [1.0, 30.0]  # markers, consolidation
    clocks = {e.period: e.clock for e in timers}  # markers on the wall clock; the memory's timers on ROS time
    assert clocks[1.0].clock_type is fake_rclpy.ClockType.STEADY_TIME and clocks[30.0] is None
    assert {id(e.callback_group) for e in timers} == {id(node._maintenance_group)}
    (publisher,) = of_kind(node, "publisher")
    assert publisher.name == "~/markers" and publisher.qos.durability is fake_rclpy.DurabilityPolicy.TRANSIENT_LOCAL


def test_a_fixed_frame_listens_to_tf_raw_on_its_own_node_and_drops_redundant_odometry(make_node, tmp_path):
    node = make_node(tmp_path / "m.db", fixed_frame="map")
    assert node.trigger("configure") == SUCCESS and node.trigger("activate") == SUCCESS
    listener = node._tf_listener
    assert listener.node.name == "memory_tf_listener" and listener.node.options["cli_args"][-1] == \
        "__node:=memory_tf_listener"
    tf, static, odom = of_kind(listener.node, "subscription")
    assert (tf.name, static.name, odom.name) == ("/tf", "/tf_static", "/odom") and tf.raw and static.raw
    assert static.qos.durability is fake_rclpy.DurabilityPolicy.TRANSIENT_LOCAL
    assert "/odom" not in {e.name for e in of_kind(node, "subscription")}  # not on the memory node's executor
    # /tf carries odom -> base_link: after enough superseded odometry the listener stops taking it
    t0 = 1_763_800_000.0
    for i in range(100):
        t = t0 + 0.1 * i
        msg = messages.tf_message(MAKE, messages.transform_stamped(MAKE, t, "odom", "base_link", 1.0, 0.0))
        tf.callback(bytes(MAKE.store.serialize_cdr(msg, "tf2_msgs/msg/TFMessage")))
        if listener.odometry is not None:
            odom.callback(messages.odometry(MAKE, t, 1.0, 0.0))
    assert listener.odometry is None and odom in listener.node.destroyed
    assert any("/odom unsubscribed" in message for _, message in node.logger.lines)
    assert node.trigger("deactivate") == SUCCESS and node._tf_listener is None and listener.node.node_destroyed


def test_callbacks_store_messages_and_services_answer(make_node, tmp_path):
    node = make_node(tmp_path / "m.db")
    node.trigger("configure"), node.trigger("activate")
    subs = {e.name: e for e in of_kind(node, "subscription")}
    subs["/odom"].callback(odometry(START - 1.0, 2.0, 3.0))
    subs["/odom"].callback(odometry(START + 1.0, 2.0, 3.0))
    subs["/scene"].callback(MAKE("std_msgs/msg/String", data="a person waving"))
    subs["/detections"].callback(detections(START, "red mug"))
    locate = next(e for e in of_kind(node, "service") if e.name == "~/locate")
    response = locate.callback(MAKE.request("Locate", concept="red mug"), MAKE.response("Locate"))
    MAKE.check(response)
    assert response.success and response.found
    assert (response.location.point.x, response.location.point.y) == pytest.approx((2.0, 3.0))
    search = next(e for e in of_kind(node, "service") if e.name == "~/semantic_search")
    waving = search.callback(MAKE.request("SemanticSearch", query="person waving"), MAKE.response("SemanticSearch"))
    assert waving.hits[0].text == "a person waving" and waving.hits[0].has_position
    timer = next(e for e in of_kind(node, "timer") if e.period == 1.0)
    timer.callback()
    (publisher,) = of_kind(node, "publisher")
    assert publisher.published and publisher.published[-1].markers[0].action == 3  # DELETEALL first


def test_a_camera_layer_subscribes_its_camera_info_and_stores_rays(make_node, tmp_path):
    node = make_node(tmp_path / "m.db", **{"layers.detections.camera_info_topic": "/camera/camera_info",
                                           "layers.detections.camera.x": 0.2})
    assert node.trigger("configure") == SUCCESS and node.trigger("activate") == SUCCESS
    subs = {e.name: e for e in of_kind(node, "subscription")}
    info = subs["/camera/camera_info"]
    assert issubclass(info.type, MAKE.store.types["sensor_msgs/msg/CameraInfo"])
    assert info.qos.reliability is fake_rclpy.ReliabilityPolicy.BEST_EFFORT
    assert id(info.callback_group) == id(node._intake_group)
    info.callback(messages.camera_info(MAKE, START, fx=400.0, cx=320.0, width=640))
    subs["/odom"].callback(messages.odometry(MAKE, START - 1.0, 2.0, 3.0, yaw=math.pi / 2))
    subs["/odom"].callback(messages.odometry(MAKE, START + 1.0, 2.0, 3.0, yaw=math.pi / 2))
    subs["/detections"].callback(messages.boxes(MAKE, START, ("red mug", 320.0, 240.0, 20.0, 20.0)))
    memory = node.runtime.memory
    memory.flush()
    (meta,) = [json.loads(m) for (m,) in memory.store.reader().execute("SELECT metadata FROM observations")]
    assert meta["ray"][:2] == pytest.approx([2.0, 3.2]) and meta["ray"][3] == pytest.approx(math.pi / 2, abs=1e-4)


def test_lifecycle_cycles_keep_the_data(make_node, tmp_path):
    node = make_node(tmp_path / "m.db")
    node.trigger("configure"), node.trigger("activate")
    scene = next(e for e in of_kind(node, "subscription") if e.name == "/scene")
    scene.callback(MAKE("std_msgs/msg/String", data="the kitchen light is on"))
    assert node.trigger("deactivate") == SUCCESS
    assert node.entities == [] and node.runtime.memory.pending == 0  # destroyed, flushed
    assert node.trigger("activate") == SUCCESS and len(of_kind(node, "service")) == len(SERVICES)
    assert node.trigger("deactivate") == SUCCESS and node.trigger("cleanup") == SUCCESS
    assert not node.runtime.configured
    assert node.trigger("configure") == SUCCESS and node.trigger("activate") == SUCCESS
    search = next(e for e in of_kind(node, "service") if e.name == "~/semantic_search")
    again = search.callback(MAKE.request("SemanticSearch", query="kitchen light"), MAKE.response("SemanticSearch"))
    assert again.success and again.hits[0].text == "the kitchen light is on"
    assert node.trigger("shutdown") == SUCCESS and not node.runtime.configured and node.entities == []


def test_bad_msg_type_fails_configure_cleanly(make_node, tmp_path):
    db = tmp_path / "m.db"
    node = make_node(db, **{"layers.detections.msg_type": "vision_msgs/msg/Detection2DArrray"})
    assert node.trigger("configure") == FAILURE
    assert not node.runtime.configured and not db.exists() and node.entities == []
    assert "layers.detections.msg_type" in node.last_error and "did you mean" in node.last_error
    assert node.trigger("activate") == FAILURE  # still unconfigured: nothing to activate


def test_a_params_file_type_clash_is_reported_at_configure(make_node, tmp_path):
    node = make_node(tmp_path / "m.db", flush_interval=1)  # an integer where rclpy declares a double
    assert node.trigger("configure") == FAILURE
    assert "flush_interval" in node.last_error and "1.0" in node.last_error
    assert not (tmp_path / "m.db").exists()


def test_unused_overrides_are_warned_about(make_node, tmp_path):
    node = make_node(tmp_path / "m.db", flush_intervall=2.0, **{"layers.sceen.topic": "/x"})
    assert node.trigger("configure") == SUCCESS
    warnings = [m for level, m in node.logger.lines if level == "warning"]
    assert any("flush_intervall" in m and "did you mean flush_interval" in m for m in warnings)
    assert any("layers.sceen.topic" in m and "not in layer_names" in m for m in warnings)


def test_an_exception_in_a_transition_is_logged_and_failure(make_node, tmp_path, monkeypatch):
    node = make_node(tmp_path / "m.db")
    assert node.trigger("configure") == SUCCESS

    def explode(*args, **kwargs):
        raise RuntimeError("no more file handles")

    monkeypatch.setattr(node, "create_service", explode)
    assert node.trigger("activate") == FAILURE
    assert "no more file handles" in node.last_error and "Traceback" in node.last_error
    assert node.entities == []  # the half-made activation was taken down
    monkeypatch.undo()
    assert node.trigger("activate") == SUCCESS


def _interrupt_when_spinning(times: int, signum: int = signal.SIGINT) -> threading.Thread:
    """SIGINT this process `times` times once main()'s executor spins (a terminal's Ctrl-C plus launch's)."""
    def interrupt() -> None:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            executor = fake_rclpy.MultiThreadedExecutor.last
            if executor is not None and executor.spinning.is_set():
                break
            time.sleep(0.01)
        for _ in range(times):
            os.kill(os.getpid(), signum)
            time.sleep(0.05)
    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("stop", ["sigint", "sigint twice", "sigterm", "external shutdown"])
def test_main_spins_then_flushes_and_closes_on_sigint(node_module, tmp_path, stop):
    db = tmp_path / "m.db"
    fake_rclpy.LifecycleNode.default_overrides = overrides(db)
    fake_rclpy.MultiThreadedExecutor.last = None
    before = signal.getsignal(signal.SIGINT)
    interrupter = None
    try:
        if stop == "external shutdown":
            fake_rclpy.MultiThreadedExecutor.spin_raises = fake_rclpy.ExternalShutdownException
        elif stop == "sigterm":
            interrupter = _interrupt_when_spinning(1, signal.SIGTERM)
        else:
            interrupter = _interrupt_when_spinning(2 if stop == "sigint twice" else 1)
        assert node_module.main([]) == 0
        if interrupter is not None:
            interrupter.join(35.0)  # every signal delivered while main()'s handlers decide, not pytest's
        executor = fake_rclpy.MultiThreadedExecutor.last
        (node,) = executor.nodes
        assert executor.shut_down and executor.num_threads >= 4
        assert not node.runtime.configured and node.node_destroyed and not fake_rclpy._ok()
        assert db.exists()
        assert ("info", "memory flushed and closed") in node.logger.lines
        # Stopped by a signal, the exiting process ignores further ones (launch's SIGINT after the
        # terminal's must not make it die with -2); otherwise main() puts the previous handler back.
        expected = before if stop == "external shutdown" else signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is expected
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        fake_rclpy.LifecycleNode.default_overrides = []
        fake_rclpy.MultiThreadedExecutor.spin_raises = None


def test_memory_core_warnings_reach_the_ros_log(make_node, tmp_path):
    import logging

    node = make_node(tmp_path / "m.db")
    logging.getLogger("emem_ros.some.module").warning("index rebuilt from SQLite")
    assert ("warning", "[emem_ros.some.module] index rebuilt from SQLite") in node.logger.lines
    node.destroy_node()
    logging.getLogger("emem_ros.some.module").warning("after destroy")
    assert not any("after destroy" in m for _, m in node.logger.lines)
    assert math.isfinite(node._now())
