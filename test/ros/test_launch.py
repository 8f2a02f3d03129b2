"""launch/memory.launch.py brings the memory node to `active` (launch_testing, ROS 2 Humble and Jazzy).

Runs the real launch file with a temporary params file whose db_path points
into a temporary folder, then asks the node for its lifecycle state through
`/memory/get_state` until it is active. Skips where ROS 2 is not installed;
needs the package built and sourced (`colcon build && source install/setup.bash`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any

import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("launch_testing")

import launch_testing  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import launch_testing.markers  # noqa: E402
import yaml  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from lifecycle_msgs.msg import State  # noqa: E402
from lifecycle_msgs.srv import GetState  # noqa: E402

import launch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_FILE = ROOT / "launch" / "memory.launch.py"
PACKAGED_PARAMS = ROOT / "config" / "memory.yaml"
NODE_NAME = "memory"
ACTIVE_TIMEOUT = 120.0
"""Seconds: configure loads the embedding model, which can take a while on a cold cache."""


def _ros_parameters(tree: Any) -> dict[str, Any]:
    """Every `ros__parameters` mapping in a params file, merged (names and namespaces vary)."""
    found: dict[str, Any] = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "ros__parameters" and isinstance(value, dict):
                found.update(value)
            else:
                found.update(_ros_parameters(value))
    return found


def write_params(folder: Path) -> tuple[Path, Path]:
    """The packaged parameters (if any), with the store moved into `folder`."""
    base = yaml.safe_load(PACKAGED_PARAMS.read_text()) if PACKAGED_PARAMS.exists() else {}
    parameters = _ros_parameters(base)
    db_path = folder / "memory.db"
    parameters["db_path"] = str(db_path)
    # What is tested is launch -> active, not the embedding model: the deterministic
    # embedder needs no model files on the test machine.
    parameters["embedding"] = {**parameters.get("embedding", {}), "backend": "hashing", "model": ""}
    params_file = folder / "memory_test.yaml"
    # `/**` applies to the node whatever its name or namespace.
    params_file.write_text(yaml.safe_dump({"/**": {"ros__parameters": parameters}}))
    return params_file, db_path


@pytest.mark.launch_test
@launch_testing.markers.keep_alive
def generate_test_description():
    folder = Path(tempfile.mkdtemp(prefix="emem_launch_test_"))
    params_file, db_path = write_params(folder)
    memory = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH_FILE)),
        launch_arguments={"params_file": str(params_file), "node_name": NODE_NAME}.items(),
    )
    return (
        launch.LaunchDescription([memory, launch_testing.actions.ReadyToTest()]),
        {"folder": folder, "db_path": db_path},
    )


class TestMemoryBecomesActive(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        rclpy.init()
        cls.probe = rclpy.create_node("emem_launch_test_probe")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.probe.destroy_node()
        rclpy.shutdown()

    def current_state(self, client) -> State | None:
        future = client.call_async(GetState.Request())
        rclpy.spin_until_future_complete(self.probe, future, timeout_sec=5.0)
        if not future.done() or future.result() is None:
            return None
        return future.result().current_state

    def test_memory_node_reaches_active(self) -> None:
        client = self.probe.create_client(GetState, f"/{NODE_NAME}/get_state")
        try:
            self.assertTrue(client.wait_for_service(timeout_sec=ACTIVE_TIMEOUT),
                            f"/{NODE_NAME}/get_state never appeared: did memory_node start?")
            state = None
            deadline = time.monotonic() + ACTIVE_TIMEOUT
            while time.monotonic() < deadline:
                state = self.current_state(client)
                if state is not None and state.id == State.PRIMARY_STATE_ACTIVE:
                    break
                time.sleep(0.5)
            self.assertIsNotNone(state, "get_state never answered")
            self.assertEqual(state.id, State.PRIMARY_STATE_ACTIVE,
                             f"memory node is '{state.label}', not 'active' (see its log for the failed transition)")
        finally:
            self.probe.destroy_client(client)


    def test_memory_node_runs_with_two_malloc_arenas(self, folder: Path) -> None:
        """The launch sets MALLOC_ARENA_MAX=2 for the node (less RSS: docs/soak.md)."""
        node = [proc for proc in Path("/proc").glob("[0-9]*") if _is_our_node(proc, folder)]
        self.assertEqual(len(node), 1, "exactly one memory_node of this test should run")
        environment = (node[0] / "environ").read_bytes().split(b"\0")
        self.assertIn(b"MALLOC_ARENA_MAX=2", environment)


def _is_our_node(proc: Path, folder: Path) -> bool:
    try:
        command = (proc / "cmdline").read_bytes()
    except OSError:
        return False
    return b"memory_node" in command and str(folder).encode() in command


@launch_testing.post_shutdown_test()
class TestMemoryShutdown(unittest.TestCase):
    def test_store_was_opened_where_the_params_file_said(self, db_path: Path, folder: Path) -> None:
        self.addCleanup(shutil.rmtree, folder, True)
        self.assertTrue(db_path.exists(), f"{db_path} was not created: the params file was not applied")

    def test_node_exits_cleanly_on_shutdown(self, proc_info) -> None:
        # Launch stops the node with SIGINT; the node flushes and closes the memory and exits 0.
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])
