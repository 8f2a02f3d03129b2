"""The EMOS side of the ROS tests: a recipe process (real Cortex + our Memory), a task client, the bag.

``Recipe`` runs test/ros/emos_recipe.py in its own process group (output in a
log file the tests read). ``EmosClient`` is the test's own rclpy node: it sends
Cortex a task as a ``VisionLanguageAction`` goal (what EMOS's UI does) and
collects the feedback and ``/cortex_output``, and it calls a component's
``execute_method`` directly (as Cortex does). ``play_part`` plays some topics
of the bundled bag until a condition holds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
BAG = HERE.parents[1] / "rosbags" / "patrol_mcap"
GROUND_TRUTH = HERE.parents[1] / "rosbags" / "ground_truth.json"
BAG_TOPICS = ("/odom", "/detections_3d", "/scene", "/battery")
STARTUP = 90.0
"""Seconds for the launcher to bring Cortex and the memory up on a loaded 2-core machine."""


class Recipe:
    def __init__(self, folder: Path, port: int, db: Path, proxy_to: str = "", tag: str = "recipe",
                 fixed_frame: str = "") -> None:
        self.log_path = folder / f"{tag}.log"
        self._log = open(self.log_path, "w")
        command = [sys.executable, str(HERE / "emos_recipe.py"), "--port", str(port), "--db", str(db)]
        if proxy_to:
            command += ["--proxy-to", proxy_to]
        if fixed_frame:
            command += ["--fixed-frame", fixed_frame]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "RCUTILS_COLORIZED_OUTPUT": "0",
               "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=env)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = STARTUP) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.log()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no /{pattern}/ in the recipe's log:\n{self.log()[-4000:]}")
            time.sleep(0.2)

    def wait_ready(self) -> None:
        self.wait_for(r"Planning prompt augmented for Memory component 'memory'")
        self.wait_for(r"Node memory is successfully started")

    def stop(self) -> None:
        """Ctrl-C to the launcher (its group), then SIGKILL if it hangs."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


def play_part(until: Callable[[], bool], *, rate: float = 10.0, start_offset: float = 0.0,
              timeout: float = 30.0, bag: Path = BAG, topics: tuple[str, ...] = BAG_TOPICS) -> float:
    """Play the bag's ``topics`` from ``start_offset`` until ``until()`` holds; wall seconds it played."""
    command = ["ros2", "bag", "play", str(bag), "-r", str(rate), "--topics", *topics]
    if start_offset:
        command += ["--start-offset", str(start_offset)]
    player = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    started = time.monotonic()
    try:
        while not until():
            if time.monotonic() - started > timeout or player.poll() is not None:
                break
            time.sleep(0.2)
    finally:
        if player.poll() is None:
            os.killpg(player.pid, signal.SIGINT)
            try:
                player.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(player.pid, signal.SIGKILL)
                player.wait(5)
    return time.monotonic() - started


def query(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Read the memory file (another process writes it; WAL lets us read alongside)."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    try:
        return list(conn.execute(sql, args).fetchall())
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def sightings(db: Path, text: str, layer: str) -> int:
    rows = query(db, "SELECT COUNT(*) FROM observations o JOIN texts t ON t.id = o.text_id "
                     "WHERE t.text = ? AND o.layer = ?", text, layer)
    return int(rows[0][0]) if rows else 0


@dataclass
class TaskResult:
    success: bool
    feedback: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    @property
    def final(self) -> str:
        return self.feedback[-1] if self.feedback else ""


class EmosClient:
    """The test's rclpy node (own context), spun by a background executor."""

    def __init__(self) -> None:
        import rclpy
        from automatika_embodied_agents.action import VisionLanguageAction
        from automatika_embodied_agents.msg import StreamingString
        from rclpy.action import ActionClient
        from rclpy.context import Context
        from rclpy.executors import MultiThreadedExecutor

        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("emos_test_client", context=self.context)
        self._outputs: list[str] = []
        self._lock = threading.Lock()
        self.node.create_subscription(StreamingString, "/cortex_output", self._on_output, 10)
        self._action = VisionLanguageAction
        self._client = ActionClient(self.node, VisionLanguageAction, "/cortex_input_command")
        self._clients: dict[str, Any] = {}
        self.executor = MultiThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._spinner = threading.Thread(target=self.executor.spin, daemon=True)
        self._spinner.start()

    def _on_output(self, msg: Any) -> None:
        with self._lock:
            self._outputs.append(msg.data)

    @staticmethod
    def _wait(future: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: no answer within {timeout:g} s")
            time.sleep(0.001)
        return future.result()

    def task(self, text: str, timeout: float = 60.0) -> TaskResult:
        assert self._client.wait_for_server(timeout_sec=timeout), "Cortex's /cortex_input_command is not offered"
        with self._lock:
            self._outputs.clear()
        feedback: list[str] = []
        goal = self._action.Goal()
        goal.task = text
        handle = self._wait(self._client.send_goal_async(goal, feedback_callback=lambda f: feedback.append(
            f.feedback.feedback)), 30.0, "send goal")
        assert handle is not None and handle.accepted, "Cortex rejected the task"
        result = self._wait(handle.get_result_async(), timeout, f"task {text!r}")
        time.sleep(0.5)  # the last /cortex_output message
        with self._lock:
            outputs = list(self._outputs)
        return TaskResult(bool(result.result.success), list(feedback), outputs)

    def execute(self, component: str, name: str, kwargs_json: str, timeout: float = 30.0) -> Any:
        """``<component>/execute_method`` as Cortex calls it; the raw response."""
        from automatika_ros_sugar.srv import ExecuteMethod

        client = self._clients.get(component)
        if client is None:
            client = self._clients[component] = self.node.create_client(ExecuteMethod, f"/{component}/execute_method")
        assert client.wait_for_service(timeout_sec=timeout), f"/{component}/execute_method is not offered"
        request = ExecuteMethod.Request()
        request.name, request.kwargs_json = name, kwargs_json
        return self._wait(client.call_async(request), timeout, f"execute_method {name}")

    def publish(self, topic: str, messages: list[Any], timeout: float = 20.0) -> None:
        """Publish ``messages`` on ``topic`` once a subscriber is matched."""
        publisher = self.node.create_publisher(type(messages[0]), topic, 10)
        deadline = time.monotonic() + timeout
        while publisher.get_subscription_count() == 0:
            assert time.monotonic() < deadline, f"nobody subscribes to {topic}"
            time.sleep(0.05)
        time.sleep(0.5)  # the subscriber may match this publisher a little after the publisher matched it
        for msg in messages:
            publisher.publish(msg)
            time.sleep(0.02)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        import rclpy

        rclpy.shutdown(context=self.context)


def answer_json(response: Any) -> Any:
    return json.loads(response.response_json) if response.response_json else None


def ground_truth(name: str, path: Path = GROUND_TRUTH) -> tuple[float, float]:
    for item in json.loads(path.read_text())["objects"]:
        if item["name"] == name:
            return float(item["position"][0]), float(item["position"][1])
    raise KeyError(name)


def place_in(text: str) -> Optional[tuple[float, float]]:
    found = re.search(r"\((-?\d+(?:\.\d+)?), (-?\d+(?:\.\d+)?)", text)
    return (float(found.group(1)), float(found.group(2))) if found else None
