"""The memory lifecycle node with real rclpy (ROS 2 Humble and Jazzy): intake, services, lifecycle cycles.

Each test runs a MemoryNode in-process on a MultiThreadedExecutor (its own
thread and rclpy context), drives it through the lifecycle services exactly
as launch does (``<node>/change_state``), publishes with a probe node and asks
questions through the node's services. The store is a temporary file and the
embedder the deterministic ``hashing`` backend (no model download).

Needs ROS 2 and the built package (`colcon build && source install/setup.bash`);
skips otherwise. The Detection2DArray part also needs vision_msgs.
"""

from __future__ import annotations

import importlib.util
import math
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Optional

import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("rclpy.lifecycle")
pytest.importorskip("emem_ros.srv", reason="build and source emem_ros (colcon build) to get its interfaces")

from lifecycle_msgs.msg import State, Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState, GetState  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.context import Context  # noqa: E402
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from emem_ros import srv as emem_srv  # noqa: E402
from emem_ros.ros.node import MemoryNode  # noqa: E402
from emem_ros.ros.services import SERVICES  # noqa: E402

HAVE_VISION = importlib.util.find_spec("vision_msgs") is not None
ROBOT = (2.0, 3.0)
CAPTION = "a person waving in the hallway"
WAIT = 20.0
"""Seconds to wait for discovery and delivery on a loaded CI machine."""


def parameters(db: Path, *, vision: bool, **extra: Any) -> list[Parameter]:
    values: dict[str, Any] = {
        "db_path": str(db), "embedding.backend": "hashing", "flush_interval": 0.2, "index_save_interval": 0.0,
        "consolidation_period": 0.0, "archive_period": 0.0, "marker_period": 0.5,
        "odom_topic": "odom", "odom_max_extrapolation": 2.0,
        "layer_names": ["scene", "detections"] if vision else ["scene"],
        "layers.scene.topic": "scene", "layers.scene.msg_type": "std_msgs/msg/String",
    }
    if vision:
        values.update({"layers.detections.topic": "detections",
                       "layers.detections.msg_type": "vision_msgs/msg/Detection2DArray"})
    values.update(extra)
    return [Parameter(name, value=value) for name, value in values.items()]


class Harness:
    """One MemoryNode spinning in its own context and executor thread, plus a probe node to talk to it."""

    def __init__(self, tmp_path: Path, **extra: Any) -> None:
        self.namespace = f"/emem_test_{uuid.uuid4().hex[:8]}"
        self.db = tmp_path / "memory.db"
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = MemoryNode("memory", namespace=self.namespace, context=self.context,
                               parameter_overrides=parameters(self.db, vision=HAVE_VISION, **extra))
        self.executor = MultiThreadedExecutor(num_threads=4, context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()
        self.probe = rclpy.create_node(f"probe_{uuid.uuid4().hex[:6]}", namespace=self.namespace,
                                       context=self.context)
        self.probe_executor = SingleThreadedExecutor(context=self.context)
        self.probe_executor.add_node(self.probe)
        self.clients: dict[str, Any] = {}
        self.publishers: dict[str, Any] = {}

    @property
    def base(self) -> str:
        return f"{self.namespace}/memory"

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self.thread.join(timeout=10.0)
        self.node.release()
        self.node.destroy_node()
        self.probe.destroy_node()
        rclpy.shutdown(context=self.context)

    # -- services
    def call(self, srv_type: Any, name: str, request: Any, timeout: float = WAIT) -> Any:
        client = self.clients.get(name)
        if client is None:
            client = self.clients[name] = self.probe.create_client(srv_type, name)
        assert client.wait_for_service(timeout_sec=timeout), f"{name} is not offered"
        future = client.call_async(request)
        self.probe_executor.spin_until_future_complete(future, timeout_sec=timeout)
        assert future.done(), f"{name} did not answer within {timeout} s"
        return future.result()

    def change(self, transition: int) -> bool:
        request = ChangeState.Request()
        request.transition.id = transition
        return self.call(ChangeState, f"{self.base}/change_state", request).success

    def state(self) -> int:
        return self.call(GetState, f"{self.base}/get_state", GetState.Request()).current_state.id

    def bring_up(self) -> None:
        assert self.change(Transition.TRANSITION_CONFIGURE), self.node.last_error
        assert self.change(Transition.TRANSITION_ACTIVATE), self.node.last_error
        assert self.state() == State.PRIMARY_STATE_ACTIVE

    def ask(self, service: str, **fields: Any) -> Any:
        srv_type = getattr(emem_srv, next(s.srv_name for s in SERVICES if s.name == service))
        request = srv_type.Request()
        for key, value in fields.items():
            setattr(request, key, value)
        return self.call(srv_type, f"{self.base}/{service}", request)

    # -- topics
    def publish(self, msg_type: Any, topic: str, msg: Any) -> None:
        publisher = self.publishers.get(topic)
        if publisher is None:
            publisher = self.publishers[topic] = self.probe.create_publisher(msg_type, topic, 10)
        publisher.publish(msg)

    def odometry(self, x: float, y: float) -> None:
        msg = Odometry()
        msg.header.stamp = self.probe.get_clock().now().to_msg()
        msg.header.frame_id = "odom"
        msg.pose.pose.position.x, msg.pose.pose.position.y = x, y
        msg.pose.pose.orientation.w = 1.0
        self.publish(Odometry, "odom", msg)

    def until(self, predicate, what: str, publish=None, timeout: float = WAIT) -> Any:
        """Publish (if given) and ask until the answer satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if publish is not None:
                publish()
            last = predicate()
            if last:
                return last
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}; node says: {self.node.last_error or 'no error'}")


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path)
    yield h
    h.close()


def detection_array(stamp, label: str):
    from vision_msgs.msg import Detection2D, Detection2DArray, ObjectHypothesisWithPose

    hypothesis = ObjectHypothesisWithPose()
    hypothesis.hypothesis.class_id = label
    hypothesis.hypothesis.score = 0.9
    detection = Detection2D()
    detection.header.stamp = stamp
    detection.header.frame_id = "camera"
    detection.results = [hypothesis]
    array = Detection2DArray()
    array.header = detection.header
    array.detections = [detection]
    return array


def found_at(hit_or_point: Any, expected=ROBOT, tol: float = 0.05) -> bool:
    return math.hypot(hit_or_point.x - expected[0], hit_or_point.y - expected[1]) <= tol


def publish_world(h: Harness) -> None:
    h.odometry(*ROBOT)
    h.publish(String, "scene", String(data=CAPTION))
    if HAVE_VISION:
        array = detection_array(h.probe.get_clock().now().to_msg(), "red mug")
        h.publish(type(array), "detections", array)
    h.odometry(*ROBOT)


def caption_hit(h: Harness) -> Optional[Any]:
    answer = h.ask("semantic_search", query=CAPTION, near_x=math.nan, near_y=math.nan)
    hits = [hit for hit in answer.hits if hit.text == CAPTION and hit.has_position]
    return hits[0] if answer.success and hits else None


# ---------------------------------------------------------------------- tests
def test_published_messages_end_up_in_memory_at_the_robot_position(harness):
    harness.bring_up()
    hit = harness.until(lambda: caption_hit(harness), "the caption in memory", publish=lambda: publish_world(harness))
    assert found_at(hit.position) and hit.layer == "scene" and hit.source_type == "perception"
    assert hit.frame_id and hit.stamp.sec > 0


def test_detections_end_up_in_memory_at_the_robot_position(harness):
    pytest.importorskip("vision_msgs.msg")
    harness.bring_up()

    def located():
        answer = harness.ask("locate", concept="red mug")
        return answer if answer.success and answer.found else None

    answer = harness.until(located, "the red mug located", publish=lambda: publish_world(harness))
    assert found_at(answer.location.point) and answer.hits[0].text == "red mug"
    assert answer.hits[0].layer == "detections"


def test_every_service_answers(harness):
    harness.bring_up()
    harness.until(lambda: caption_hit(harness), "the caption in memory", publish=lambda: publish_world(harness))
    nan = math.nan
    requests = {
        "semantic_search": {"query": "person waving", "near_x": nan, "near_y": nan},
        "spatial_query": {"x": ROBOT[0], "y": ROBOT[1], "radius": 1.0},
        "temporal_query": {"last_n_minutes": 10.0},
        "episode_summary": {},
        "get_current_context": {},
        "search_gists": {"query": "hallway"},
        "entity_query": {"name": "mug"},
        "locate": {"concept": "person waving"},
        "recall": {"query": "person waving"},
        "body_status": {},
        "store_specific_memory": {"text": "the charger is behind the sofa", "x": 1.0, "y": 1.0,
                                  "position_is": "robot", "view_range": 2.5},
        "start_episode": {"name": "fetch the mug"},
        "end_episode": {"result": "done", "success": 1},
        "record_experience": {"goal": "grasp the mug", "success": 1},
        "find_experiences": {"query": "grasp"},
        "memory_stats": {},
        "call_tool": {"tool": "semantic_search", "arguments_json": '{"query": "person waving"}'},
        "list_tools": {},
        "forget": {"match": "waving", "dry_run": True},  # a dry run: the caption stays for the checks below
    }
    assert set(requests) == {s.name for s in SERVICES}
    for spec in SERVICES:  # in table order: start_episode comes before end_episode
        answer = harness.ask(spec.name, **requests[spec.name])
        assert answer.success, f"{spec.name}: {answer.message}"
        assert answer.text, f"{spec.name} gave no text"
        if spec.name == "store_specific_memory":  # what the position is travels through the real service
            stored = harness.node.runtime.memory.get_observation(answer.id)
            assert stored.metadata == {"position_source": "odometry", "view_range": 2.5}
    spatial = harness.ask("spatial_query", x=ROBOT[0], y=ROBOT[1], radius=1.0)
    assert CAPTION in {hit.text for hit in spatial.hits}
    # The live pose is the odometry of the last odom_max_extrapolation seconds: on a loaded machine the
    # loop above outlasts it (the context then falls back to the newest stored position, (1, 1) above).
    def context_here():
        context = harness.ask("get_current_context")
        return context if context.has_position and found_at(context.position.point) else None

    harness.until(context_here, "the current context at the odometry pose", publish=lambda: harness.odometry(*ROBOT))
    bad = harness.ask("semantic_search", query="")
    assert not bad.success and "query" in bad.message


def test_lifecycle_cycles_keep_the_data(harness):
    harness.bring_up()
    harness.until(lambda: caption_hit(harness), "the caption in memory", publish=lambda: publish_world(harness))
    assert harness.change(Transition.TRANSITION_DEACTIVATE)
    assert harness.state() == State.PRIMARY_STATE_INACTIVE
    assert harness.change(Transition.TRANSITION_ACTIVATE)
    assert found_at(harness.until(lambda: caption_hit(harness), "the caption after re-activation").position)
    assert harness.change(Transition.TRANSITION_DEACTIVATE)
    assert harness.change(Transition.TRANSITION_CLEANUP)
    assert harness.state() == State.PRIMARY_STATE_UNCONFIGURED and not harness.node.runtime.configured
    harness.bring_up()
    assert found_at(harness.until(lambda: caption_hit(harness), "the caption after cleanup + configure").position)


def test_bad_msg_type_fails_configure_cleanly(tmp_path):
    h = Harness(tmp_path, **{"layers.scene.msg_type": "std_msgs/msg/NoSuchType"})
    try:
        assert not h.change(Transition.TRANSITION_CONFIGURE)
        assert h.state() == State.PRIMARY_STATE_UNCONFIGURED
        assert "NoSuchType" in h.node.last_error and "layers.scene.msg_type" in h.node.last_error
        assert not h.db.exists() and not h.node.runtime.configured
        assert not h.change(Transition.TRANSITION_ACTIVATE)  # not a valid transition from unconfigured
    finally:
        h.close()


def test_memory_clock_is_the_ros_clock_with_sim_time(tmp_path):
    from rosgraph_msgs.msg import Clock

    h = Harness(tmp_path, use_sim_time=True)
    try:
        sim = 1000.5
        clock_msg = Clock()
        clock_msg.clock.sec, clock_msg.clock.nanosec = 1000, 500_000_000

        def node_on_sim_time():
            h.publish(Clock, "/clock", clock_msg)
            return abs(h.node.get_clock().now().nanoseconds * 1e-9 - sim) < 1e-6

        h.until(node_on_sim_time, "the node clock to follow /clock")
        h.bring_up()
        stored = h.ask("store_specific_memory", text="noted in simulation", x=math.nan, y=math.nan)
        assert stored.success
        assert h.node.runtime.memory.get_observation(stored.id).stamp == pytest.approx(sim)
        recent = h.ask("temporal_query", last_n_minutes=1.0)  # "the last minute" of simulated time
        assert "noted in simulation" in {hit.text for hit in recent.hits}
    finally:
        h.close()
