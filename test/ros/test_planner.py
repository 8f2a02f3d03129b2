"""`ros2 run emem_ros example_planner` finds the launched memory on the real graph and answers through it.

The memory is started with `ros2 launch emem_ros memory.launch.py` (hashing
embedder, a temporary file, its own namespace and ROS domain), fed a note and
captions at an odometry pose by a probe node, and the planner is run as a user
would (`ros2 run`) against the local fake Ollama server, scripted to call
`locate` with whatever name the planner offered for it and then to answer
with the tool's first line. The test checks what each side saw: the tools the
planner offered (discovered, not wired), the tool result the model got back
(the node's own answer, at the stored place), and the answer printed.

Needs ROS 2 and the package built and sourced; skips otherwise.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import yaml

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("emem_ros.srv", reason="build and source emem_ros (colcon build) to get its interfaces")

from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.context import Context  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from emem_ros import srv as emem_srv  # noqa: E402
from emem_ros.agent.planner import node_key  # noqa: E402
from test.support.fake_ollama import FakeOllama, tool_then_answer  # noqa: E402

MUG = (3.2, 1.5)
NOTE = "the red mug is on the kitchen table"
CAPTION = "a red mug next to the kettle"
WAIT = 120.0
"""Seconds for the node to come up and answer on a loaded 2-core machine."""
PREFIX = "Planner answer: "


def _ros2() -> str:
    ros2 = shutil.which("ros2")
    if ros2 is None:
        pytest.skip("the ros2 CLI is not on PATH (source ROS 2 and the built workspace)")
    try:
        from ament_index_python.packages import get_package_prefix

        get_package_prefix("emem_ros")
    except Exception:
        pytest.skip("emem_ros is not installed in a sourced workspace (colcon build && source install/setup.bash)")
    return ros2


def child_env(domain: int) -> dict[str, str]:
    """The test's environment on its own ROS domain, with this interpreter first on PATH.

    The node and the planner are `#!/usr/bin/env python3` scripts: they run
    under the Python running this test, which has the core's pip dependencies.
    """
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(domain)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def located_at(text: str) -> Optional[tuple[float, float]]:
    match = re.search(r"at \((-?[\d.]+), (-?[\d.]+)", text)
    return (float(match.group(1)), float(match.group(2))) if match else None


class Graph:
    """The launched memory node (a process group) and a probe node on the same domain."""

    def __init__(self, tmp_path: Path) -> None:
        self.ros2 = _ros2()
        self.domain = random.randint(100, 199)
        self.namespace = f"/planner_test_{uuid.uuid4().hex[:8]}"
        self.base = f"{self.namespace}/memory"
        params = tmp_path / "params.yaml"
        params.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
            "db_path": str(tmp_path / "memory.db"),
            "embedding": {"backend": "hashing", "model": ""},
            "odom_topic": "odom", "odom_max_extrapolation": 5.0,
            "consolidation_period": 0.0, "archive_period": 0.0,
            "layer_names": ["scene"],
            "layers": {"scene": {"topic": "scene", "msg_type": "std_msgs/msg/String"}},
        }}}))
        self.log = tmp_path / "launch.log"
        self.launch = subprocess.Popen(
            [self.ros2, "launch", "emem_ros", "memory.launch.py", f"params_file:={params}",
             f"namespace:={self.namespace}"],
            env=child_env(self.domain), stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        self.context = Context()
        rclpy.init(context=self.context, domain_id=self.domain)
        self.probe = rclpy.create_node(f"probe_{uuid.uuid4().hex[:6]}", namespace=self.namespace,
                                       context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.probe)
        self.odom = self.probe.create_publisher(Odometry, "odom", 10)
        self.scene = self.probe.create_publisher(String, "scene", 10)
        self.clients: dict[str, Any] = {}

    def close(self) -> str:
        if self.launch.poll() is None:
            os.killpg(self.launch.pid, signal.SIGINT)
            try:
                self.launch.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.launch.pid, signal.SIGKILL)
                self.launch.wait(timeout=10)
        self.probe.destroy_node()
        rclpy.shutdown(context=self.context)
        return self.log.read_text(errors="replace")

    def ask(self, service: str, srv_name: str, timeout: float = 30.0, **fields: Any) -> Any:
        srv_type = getattr(emem_srv, srv_name)
        client = self.clients.get(service)
        if client is None:
            client = self.clients[service] = self.probe.create_client(srv_type, f"{self.base}/{service}")
        assert client.wait_for_service(timeout_sec=timeout), \
            f"{self.base}/{service} is not offered; launch log:\n{self.log.read_text(errors='replace')}"
        request = srv_type.Request()
        for key, value in fields.items():
            setattr(request, key, value)
        future = client.call_async(request)
        self.executor.spin_until_future_complete(future, timeout_sec=timeout)
        assert future.done(), f"{service} did not answer within {timeout} s"
        return future.result()

    def publish_world(self) -> None:
        odom = Odometry()
        odom.header.stamp = self.probe.get_clock().now().to_msg()
        odom.header.frame_id = "odom"
        odom.pose.pose.position.x, odom.pose.pose.position.y = MUG
        odom.pose.pose.orientation.w = 1.0
        self.odom.publish(odom)
        self.scene.publish(String(data=CAPTION))

    def until(self, found: Callable[[], Any], what: str, seconds: float = WAIT) -> Any:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.publish_world()
            value = found()
            if value:
                return value
            self.executor.spin_once(timeout_sec=0.2)
        pytest.fail(f"{what} within {seconds} s; launch log:\n{self.log.read_text(errors='replace')}")


@pytest.fixture
def graph(tmp_path):
    graph = Graph(tmp_path)
    yield graph
    graph.close()


def test_example_planner_discovers_the_memory_and_answers_through_call_tool(graph):
    stored = graph.ask("store_specific_memory", "StoreSpecificMemory", timeout=WAIT, text=NOTE, x=MUG[0], y=MUG[1])
    assert stored.success, stored.message

    def caption_stored() -> bool:
        answer = graph.ask("semantic_search", "SemanticSearch", query=CAPTION, near_x=float("nan"),
                           near_y=float("nan"))
        return answer.success and CAPTION in {hit.text for hit in answer.hits}

    graph.until(caption_stored, "the published caption was not queryable")

    own_locate = f"{node_key(graph.base)}__locate"

    def pick_locate(offered: list[str]) -> str:
        # Alone on its domain the memory's tools keep their names; should another memory share the
        # domain, the planner prefixes them by node, and ours is still the one asked.
        return own_locate if own_locate in offered else "locate"

    with FakeOllama(chat_responder=tool_then_answer(pick_locate, {"concept": "red mug"}, PREFIX)) as server:
        run = subprocess.run(
            [graph.ros2, "run", "emem_ros", "example_planner", "where is the red mug?",
             "--host", server.host, "--model", "fake-chat", "--wait", "60"],
            env=child_env(graph.domain), capture_output=True, text=True, timeout=240)
        chats = [r.body for r in server.chat_requests]
    assert run.returncode == 0, f"planner failed ({run.returncode}):\n{run.stderr}\n{run.stdout}"

    # Discovery: the first chat offered the node's own tool definitions, found on the graph.
    listed = graph.ask("list_tools", "ListTools")
    own = listed.text.splitlines()
    offered = [t["function"]["name"] for t in chats[0]["tools"]]
    assert "locate" in own and "call_tool" not in own
    assert offered == own or {f"{node_key(graph.base)}__{name}" for name in own} <= set(offered), offered

    # The tool call reached the node: the result the model got is the node's answer, at the stored place.
    assert len(chats) == 2, chats
    tool_results = [m["content"] for m in chats[1]["messages"] if m.get("role") == "tool"]
    assert len(tool_results) == 1 and "red mug" in tool_results[0], tool_results
    where = located_at(tool_results[0])
    assert where is not None and abs(where[0] - MUG[0]) <= 0.3 and abs(where[1] - MUG[1]) <= 0.3, tool_results[0]
    assert f"called {pick_locate(offered)}(" in run.stderr

    # The answer printed is the model's final message, built from that result.
    assert run.stdout.strip() == PREFIX + tool_results[0].splitlines()[0]


def test_example_planner_without_a_memory_on_the_graph_says_so(tmp_path):
    ros2 = _ros2()
    with FakeOllama(chat_responder=tool_then_answer(lambda offered: "locate", {"concept": "red mug"})) as server:
        run = subprocess.run(
            [ros2, "run", "emem_ros", "example_planner", "where is the red mug?", "--host", server.host,
             "--model", "fake-chat", "--wait", "3"],
            env=child_env(random.randint(200, 230)), capture_output=True, text=True, timeout=120)
        asked = len(server.chat_requests)
    assert run.returncode == 2 and "no memory node on the graph" in run.stderr, (run.returncode, run.stderr)
    answer = [line for line in run.stdout.splitlines() if line.strip() and not line.startswith("[ros2run]")]
    assert answer == [] and asked == 0  # no answer printed, nothing asked of the model
