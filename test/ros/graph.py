"""Tests on the real ROS graph: the memory started with `ros2 launch`, driven with the `ros2` CLI.

A `LaunchedMemory` is one `ros2 launch emem_ros memory.launch.py` in its own process group (so a
Ctrl-C reaches launch and the node together, as a terminal's does), its output in a log file the
tests read. `ros2(...)` runs one CLI command. Parameters files are the packaged config/memory.yaml
with the store moved to a temporary folder and the deterministic hashing embedder (no model files).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGED_PARAMS = ROOT / "config" / "memory.yaml"
BAGS = ROOT / "rosbags"
STARTUP = 90.0
"""Seconds for launch to bring a node to active on a loaded 2-core machine."""


def flat_parameters(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A params mapping as ROS sees it: nested mappings become dotted names."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_parameters(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def packaged_parameters() -> dict[str, Any]:
    tree = yaml.safe_load(PACKAGED_PARAMS.read_text())
    merged: dict[str, Any] = {}
    for section in tree.values():
        merged.update(flat_parameters(section.get("ros__parameters", {})))
    return merged


def write_params(folder: Path, name: str = "memory", **overrides: Any) -> tuple[Path, Path]:
    """The packaged parameters, store in `folder`, hashing embedder, `overrides` (dotted names) on top."""
    folder.mkdir(parents=True, exist_ok=True)
    parameters = packaged_parameters()
    db_path = folder / "memory.db"
    parameters.update({"db_path": str(db_path), "embedding.backend": "hashing", "embedding.model": ""})
    parameters.update(overrides)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": parameters}}))
    return path, Path(parameters["db_path"])


def ros2(*args: str, timeout: float = 60.0, check: bool = False) -> subprocess.CompletedProcess:
    """One `ros2` CLI command, its output captured."""
    result = subprocess.run(["ros2", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"ros2 {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


class LaunchedMemory:
    """`ros2 launch emem_ros memory.launch.py ...` in its own process group, output in `log_path`."""

    def __init__(self, folder: Path, params_file: Path, *, namespace: str = "", node_name: str = "memory",
                 use_sim_time: bool = False, autostart: bool = True, tag: str = "launch") -> None:
        self.namespace, self.node_name = namespace.strip("/"), node_name
        self.log_path = folder / f"{tag}.log"
        command = ["ros2", "launch", "emem_ros", "memory.launch.py", f"params_file:={params_file}",
                   f"node_name:={node_name}", f"use_sim_time:={str(use_sim_time).lower()}",
                   f"autostart:={str(autostart).lower()}"]
        if self.namespace:
            command.append(f"namespace:={self.namespace}")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", "RCUTILS_COLORIZED_OUTPUT": "0"})

    @property
    def name(self) -> str:
        """The node's fully qualified name."""
        return f"/{self.namespace}/{self.node_name}" if self.namespace else f"/{self.node_name}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, timeout: float = STARTUP, after: int = 0) -> re.Match:
        """The first match of `pattern` in the log (from character `after`), waiting for it."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.compile(pattern).search(self.log(), after)
            if found:
                return found
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no /{pattern}/ in the launch log (launch "
                                     f"{'exited ' + str(self.proc.returncode) if self.proc.poll() is not None else 'running'}"
                                     f"):\n{self.log()[-4000:]}")
            time.sleep(0.2)

    def wait_active(self) -> None:
        self.wait_for_log(r"\]: active: ")

    def node_pids(self) -> list[int]:
        import psutil

        return [child.pid for child in psutil.Process(self.proc.pid).children(recursive=True)
                if "memory_node" in " ".join(child.cmdline())]

    def ctrl_c(self, timeout: float = 60.0) -> int:
        """SIGINT to launch and the node together (a terminal's Ctrl-C); launch's exit code."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.wait(timeout)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.flush()

    def stop(self) -> None:
        """Teardown: Ctrl-C, then SIGKILL of the group if it hangs."""
        if self.proc.poll() is None:
            try:
                self.ctrl_c(30.0)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10.0)
        self._log.close()

    def error_lines(self) -> list[str]:
        return [line for line in self.log().splitlines()
                if "[ERROR]" in line or "Failed to publish" in line or "Traceback" in line]

    def memory_node_exit(self) -> Optional[str]:
        """Launch's line about how the node's process ended."""
        found = re.search(r"\[memory_node-\d+\]: process (has finished cleanly|has died[^\n]*)", self.log())
        return found.group(1) if found else None


def play_bag(bag: Path, rate: float, *, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    """`ros2 bag play BAG --clock -r RATE` (after a short delay so subscriptions match first)."""
    return subprocess.Popen(["ros2", "bag", "play", str(bag), "--clock", "-r", str(rate), "-d", "2.0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


INTAKE_LINE = re.compile(r"intake since configure: (.*)")
INTAKE_LAYER = re.compile(r"(\w+) (\d+) message\(s\) -> (\d+) stored, (\d+) thinned, (\d+) skipped")


def intake_counts(log: str) -> dict[str, dict[str, int]]:
    """The node's last `intake since configure` line: layer -> messages/stored/thinned/skipped."""
    lines = INTAKE_LINE.findall(log)
    assert lines, f"the node logged no intake report:\n{log[-3000:]}"
    return {layer: {"messages": int(m), "stored": int(s), "thinned": int(t), "skipped": int(k)}
            for layer, m, s, t, k in INTAKE_LAYER.findall(lines[-1])}


def stored_per_layer(db_path: Path) -> dict[str, int]:
    import sqlite3

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT layer, COUNT(*) FROM observations GROUP BY layer").fetchall())
    finally:
        conn.close()
