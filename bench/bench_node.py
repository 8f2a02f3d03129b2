#!/usr/bin/env python3
"""The memory node's cost on a robot: the patrol bag replayed into the live launched node.

For each embedder (``hashing``, ``minilm`` on torch, ``onnx``, ``onnx-int8``: MiniLM on ONNX
Runtime, which needs onnxruntime and tokenizers in the node's Python) and each rate (1x, 10x) this
launches ``ros2 launch emem_ros memory.launch.py`` with the packaged
``config/memory.yaml`` (only ``db_path``, the embedder and ``use_sim_time``
changed: default flush settings), waits for ``active``, asks one question so
the embedder loads its model (a one-time cost; without it the first minute of
playback measures the model load), measures the idle node for a while, then
plays ``rosbags/patrol_db3`` with
``ros2 bag play --rate R --clock`` and measures, from outside the node:

- CPU of the node process, % of one core, from ``/proc/<pid>/stat``
  (utime + stime over wall time): idle before the bag, during the first part
  of the playback with nothing asked ("intake"), and during the rest while the
  probes and queries below run ("intake + queries");
- RSS (``VmRSS``), the largest seen;
- message-to-queryable latency: a unique caption published on the scene layer
  topic, then ``semantic_search`` for it polled every 50 ms until a hit has
  that text (p50 / p95 / max). A probe is sent only when the scene layer's
  intake would keep it (``min_period`` of sim time after the last caption on
  the topic), so what is measured is the path to queryable, not the sampling
  policy;
- service latency of ``locate`` and ``semantic_search`` (round trip from a
  client in this process, p50 / p95), a call every 0.5 s over varied
  questions while the bag plays.

``--clock`` makes the player publish ``/clock`` (40 Hz by default), which the
node needs for ``use_sim_time`` and a robot does not have: every message
wakes rclpy's executor, so ``--clock-hz`` shows what that part costs.

It is a benchmark, not a test: run it with ROS sourced and the package built
(``colcon build`` in a workspace outside the source tree, its install
sourced) under a Python that has the core's dependencies (the node runs under
the first ``python3`` on PATH; this script puts its own interpreter first).

    python bench/bench_node.py                         # both embedders, 1x (300 s of bag) and 10x (whole bag)
    python bench/bench_node.py --embedders hashing --rates 10 --seconds 20
    python bench/bench_node.py --save                  # also bench/results/node-<date>.txt and .json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from engines import machine_info  # noqa: E402

BAG = ROOT / "rosbags" / "patrol_db3"
BAG_SECONDS = 788.6
BAG_LENGTHS = {"patrol_db3": 788.6, "patrol_mcap": 788.6, "patrol_tf_mcap": 540.0}
FIXED_FRAME = ""
"""fixed_frame of the runs ('' = odometry, as config/memory.yaml; 'map' with patrol_tf_mcap: TF's cost)."""
PARAMS = ROOT / "config" / "memory.yaml"
EMBEDDERS = {"hashing": {"backend": "hashing", "model": ""},
             "minilm": {"backend": "sentence_transformers", "model": ""},
             "onnx": {"backend": "onnx", "model": ""},
             "onnx-int8": {"backend": "onnx", "model": "all-MiniLM-L6-v2-int8"}}
QUESTIONS = ["red mug", "coffee machine", "fridge", "sofa", "television", "laptop", "blue mug",
             "bookshelf", "coat rack", "fire extinguisher", "chair", "potted plant"]
SCENE_TOPIC = "/scene"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------- /proc
def _ppid_map() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return parents


def node_pid(launch_pid: int) -> Optional[int]:
    """The memory_node process among the launch process's descendants."""
    parents = _ppid_map()
    family, grew = {launch_pid}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in family and pid not in family:
                family.add(pid)
                grew = True
    for pid in sorted(family - {launch_pid}):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"/memory_node") for arg in argv[:2]):
            return pid
    return None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15 of stat)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_rss_mb(pid: int) -> float:
    """Resident MB of the node's child processes (the maintenance process, while maintenance runs)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                total += rss_mb(int(stat.parent.name))
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return total


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


class CpuMeter:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.wall, self.cpu = time.monotonic(), cpu_seconds(pid)

    def percent(self) -> float:
        wall, cpu = time.monotonic(), cpu_seconds(self.pid)
        return 100.0 * (cpu - self.cpu) / max(wall - self.wall, 1e-9)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# ---------------------------------------------------------------------- one run
@dataclass
class Run:
    embedder: str
    rate: float
    bag_seconds: float
    clock_hz: float
    load_before: str = ""
    load_after: str = ""
    startup_s: float = 0.0
    rss_idle_mb: float = 0.0
    rss_max_mb: float = 0.0
    rss_children_max_mb: float = 0.0
    cpu_idle: float = 0.0
    cpu_intake: float = 0.0
    cpu_with_queries: float = 0.0
    probes: list[float] = field(default_factory=list)
    probes_lost: int = 0
    locate_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    failed_calls: int = 0
    stored: dict[str, Any] = field(default_factory=dict)


def write_params(folder: Path, embedder: str) -> Path:
    import yaml

    tree = yaml.safe_load(PARAMS.read_text())
    params = tree["/**"]["ros__parameters"]
    params["db_path"] = str(folder / "memory.db")
    params["embedding"] = dict(EMBEDDERS[embedder])
    params["fixed_frame"] = FIXED_FRAME
    out = folder / "params.yaml"
    out.write_text(yaml.safe_dump(tree))
    return out


def child_env(domain: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"ROS_DOMAIN_ID": str(domain), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1"})
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def scene_min_period() -> float:
    import yaml

    params = yaml.safe_load(PARAMS.read_text())["/**"]["ros__parameters"]
    return float(params["layers"]["scene"]["intake"]["min_period"])


class Client:
    """A probe node on the run's domain: service calls, the scene topic, /clock."""

    def __init__(self, domain: int) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import qos_profile_sensor_data
        from rosgraph_msgs.msg import Clock
        from std_msgs.msg import String

        from emem_ros import srv

        self.rclpy, self.srv, self.String = rclpy, srv, String
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = rclpy.create_node(f"bench_{uuid.uuid4().hex[:6]}", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.sim_now = 0.0
        self.last_caption_sim = -1e9
        # Best effort hears reliable and best-effort publishers alike.
        self.node.create_subscription(Clock, "/clock", self._on_clock, qos_profile_sensor_data)
        self.node.create_subscription(String, SCENE_TOPIC, self._on_scene, qos_profile_sensor_data)
        self.scene = self.node.create_publisher(String, SCENE_TOPIC, 10)
        self.clients: dict[str, Any] = {}

    def _on_clock(self, msg: Any) -> None:
        self.sim_now = msg.clock.sec + msg.clock.nanosec * 1e-9

    def _on_scene(self, msg: Any) -> None:
        self.last_caption_sim = self.sim_now

    def call(self, name: str, srv_name: str, timeout: float = 10.0, **fields: Any) -> tuple[Any, float]:
        srv_type = getattr(self.srv, srv_name)
        client = self.clients.get(name)
        if client is None:
            client = self.clients[name] = self.node.create_client(srv_type, f"/memory/{name}")
        if not client.wait_for_service(timeout_sec=timeout):
            return None, float("nan")
        request = srv_type.Request()
        for key, value in fields.items():
            setattr(request, key, value)
        start = time.perf_counter()
        future = client.call_async(request)
        self.executor.spin_until_future_complete(future, timeout_sec=timeout)
        elapsed = (time.perf_counter() - start) * 1000.0
        return (future.result() if future.done() else None), elapsed

    def spin(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=max(0.0, min(0.05, deadline - time.monotonic())))

    def close(self) -> None:
        self.node.destroy_node()
        self.rclpy.shutdown(context=self.context)


def wait_active(client: Client, launch: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if launch.poll() is not None:
            raise RuntimeError("ros2 launch exited before the node was active")
        answer, _ = client.call("memory_stats", "MemoryStats", timeout=2.0)
        if answer is not None and answer.success:
            return
        client.spin(0.5)
    raise RuntimeError(f"the memory node was not active after {seconds:g} s")


def run_once(embedder: str, rate: float, bag_seconds: float, quiet_fraction: float, idle_seconds: float,
             probe_timeout: float, log_dir: Path, clock_hz: float) -> Run:
    ros2 = shutil.which("ros2")
    if ros2 is None:
        raise SystemExit("bench_node: the ros2 CLI is not on PATH (source ROS 2 and the built workspace)")
    domain = random.randint(100, 199)
    run = Run(embedder, rate, bag_seconds, clock_hz, load_before=loadavg())
    folder = Path(tempfile.mkdtemp(prefix=f"bench_node_{embedder}_"))
    params = write_params(folder, embedder)
    env = child_env(domain)
    tag = f"{embedder}-{rate:g}x-clock{clock_hz:g}"
    launch_log = (log_dir / f"launch-{tag}.log").open("w")
    started = time.monotonic()
    launch = subprocess.Popen([ros2, "launch", "emem_ros", "memory.launch.py", f"params_file:={params}",
                               "use_sim_time:=true"], env=env, stdout=launch_log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    client = Client(domain)
    bag = None
    try:
        wait_active(client, launch, 300.0)
        run.startup_s = time.monotonic() - started
        pid = node_pid(launch.pid)
        if pid is None:
            raise RuntimeError("could not find the memory_node process under ros2 launch")
        # The embedder loads its model at the first text it embeds: ask once so the model is loaded
        # before anything is measured (a one-time cost of ~5-15 s of one core, not a running cost).
        client.call("semantic_search", "SemanticSearch", timeout=120.0, query="warm up", near_x=float("nan"),
                    near_y=float("nan"))
        run.startup_s = time.monotonic() - started
        client.spin(2.0)  # let activation settle (catalog thread, first timers)
        idle = CpuMeter(pid)
        client.spin(idle_seconds)
        run.cpu_idle = idle.percent()
        run.rss_idle_mb = rss_mb(pid)

        bag = subprocess.Popen([ros2, "bag", "play", str(BAG), "--rate", f"{rate:g}", "--clock", f"{clock_hz:g}",
                                "--disable-keyboard-controls"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.STDOUT, start_new_session=True)
        wall = bag_seconds / rate
        begin = time.monotonic()
        end = begin + wall
        quiet_end = begin + wall * quiet_fraction
        intake = CpuMeter(pid)
        while time.monotonic() < quiet_end and bag.poll() is None:
            client.spin(0.5)
            run.rss_max_mb = max(run.rss_max_mb, rss_mb(pid))
            run.rss_children_max_mb = max(run.rss_children_max_mb, children_rss_mb(pid))
        run.cpu_intake = intake.percent()

        loaded = CpuMeter(pid)
        min_period = scene_min_period()
        pending: Optional[tuple[str, float]] = None
        next_query = time.monotonic()
        turn = 0
        while time.monotonic() < end and bag.poll() is None:
            now = time.monotonic()
            if pending is None and client.sim_now - client.last_caption_sim > min_period + 0.3:
                caption = f"benchmark probe {uuid.uuid4().hex[:10]} by the charging dock"
                client.scene.publish(client.String(data=caption))
                pending = (caption, time.monotonic())
            if pending is not None:
                answer, _ = client.call("semantic_search", "SemanticSearch", query=pending[0], n_results=3,
                                        near_x=float("nan"), near_y=float("nan"))
                if answer is not None and answer.success and any(h.text == pending[0] for h in answer.hits):
                    run.probes.append(time.monotonic() - pending[1])
                    pending = None
                elif time.monotonic() - pending[1] > probe_timeout:
                    run.probes_lost += 1
                    pending = None
            if now >= next_query:
                question = QUESTIONS[turn // 2 % len(QUESTIONS)]
                if turn % 2 == 0:
                    answer, ms = client.call("locate", "Locate", concept=question)
                    if answer is not None:
                        run.locate_ms.append(ms)
                else:
                    answer, ms = client.call("semantic_search", "SemanticSearch", query=question,
                                             near_x=float("nan"), near_y=float("nan"))
                    if answer is not None:
                        run.search_ms.append(ms)
                run.failed_calls += answer is None or not answer.success
                turn += 1
                next_query = now + 0.5
            run.rss_max_mb = max(run.rss_max_mb, rss_mb(pid))
            run.rss_children_max_mb = max(run.rss_children_max_mb, children_rss_mb(pid))
            client.spin(0.05)
        run.cpu_with_queries = loaded.percent()
        stats, _ = client.call("memory_stats", "MemoryStats")
        if stats is not None and stats.success:
            counts = json.loads(stats.stats_json).get("counts", {})
            run.stored = {k: v for k, v in counts.items() if isinstance(v, (int, float))}
    finally:
        if bag is not None and bag.poll() is None:
            os.killpg(bag.pid, signal.SIGINT)
            try:
                bag.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(bag.pid, signal.SIGKILL)
        client.close()
        if launch.poll() is None:
            os.killpg(launch.pid, signal.SIGINT)
            try:
                launch.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(launch.pid, signal.SIGKILL)
                launch.wait(timeout=10)
        launch_log.close()
        shutil.rmtree(folder, ignore_errors=True)
    run.load_after = loadavg()
    return run


# ---------------------------------------------------------------------- report
def table(runs: list[Run]) -> list[str]:
    lines = ["embedder rate  bag s  ready s  CPU idle  CPU intake  CPU +queries  RSS idle/max MB  "
             "msg->queryable p50/p95/max s (n, lost)  locate p50/p95 ms  search p50/p95 ms  failed"]
    for r in runs:
        lines.append(
            f"{r.embedder:8} {r.rate:>3g}x {r.bag_seconds:6.0f} {r.startup_s:8.1f} {r.cpu_idle:8.1f}% "
            f"{r.cpu_intake:10.1f}% {r.cpu_with_queries:12.1f}%  {r.rss_idle_mb:6.0f} / {r.rss_max_mb:5.0f}    "
            f"{pct(r.probes, .5):6.2f} / {pct(r.probes, .95):4.2f} / {max(r.probes, default=float('nan')):4.2f} "
            f"({len(r.probes)}, {r.probes_lost})        "
            f"{pct(r.locate_ms, .5):6.1f} / {pct(r.locate_ms, .95):5.1f}   "
            f"{pct(r.search_ms, .5):6.1f} / {pct(r.search_ms, .95):5.1f}   {r.failed_calls}")
    lines.append("")
    for r in runs:
        lines.append(f"{r.embedder} {r.rate:g}x: load before {r.load_before} | after {r.load_after}; "
                     f"child processes' largest RSS {r.rss_children_max_mb:.0f} MB; "
                     f"stored {json.dumps(r.stored, sort_keys=True)}")
    return lines


def ros_info() -> str:
    """The sourced distribution, its rclpy and the executors it offers (the node uses the multi-threaded one)."""
    from importlib.metadata import PackageNotFoundError, version

    from emem_ros.ros import distro  # the built workspace's (sourced)

    try:
        rclpy_version = version("rclpy")
    except PackageNotFoundError:
        rclpy_version = "?"
    return (f"ROS 2 {distro.current() or '?'} (rclpy {rclpy_version}, RMW {os.environ.get('RMW_IMPLEMENTATION', 'default')}); "
            f"executors in this rclpy: {', '.join(distro.executor_kinds())}; the node's: {distro.DEFAULT_EXECUTOR}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedders", default="hashing,minilm")
    parser.add_argument("--rates", default="1,10")
    parser.add_argument("--seconds", type=float, default=300.0,
                        help="wall seconds of playback per run, at most the whole bag (at 10x: 78.9 s)")
    parser.add_argument("--quiet-fraction", type=float, default=0.5,
                        help="share of the playback measured with nothing asked (intake CPU)")
    parser.add_argument("--idle", type=float, default=15.0, help="seconds of idle measurement before the bag")
    parser.add_argument("--probe-timeout", type=float, default=10.0)
    parser.add_argument("--clock-hz", type=float, default=40.0,
                        help="rate of /clock from the player (40 = ros2 bag play's default); a robot has none")
    parser.add_argument("--bag", default="patrol_db3", choices=sorted(BAG_LENGTHS),
                        help="bundled bag to play (patrol_tf_mcap has /tf: run it with --fixed-frame map and '')")
    parser.add_argument("--fixed-frame", default="", help="fixed_frame of the node ('' = the odometry frame)")
    parser.add_argument("--name", default="node", help="results file stem: bench/results/<name>-<date>")
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    global BAG, BAG_SECONDS, FIXED_FRAME
    BAG, BAG_SECONDS, FIXED_FRAME = ROOT / "rosbags" / args.bag, BAG_LENGTHS[args.bag], args.fixed_frame

    import datetime

    date = datetime.datetime.now(datetime.timezone.utc)
    log_dir = Path(tempfile.mkdtemp(prefix="bench_node_logs_"))
    header = [f"bench_node on {machine_info()}", ros_info(),
              f"bag {BAG.name} ({BAG_SECONDS:g} s) played with --clock {args.clock_hz:g}; params config/memory.yaml "
              f"(db_path, embedding, use_sim_time, fixed_frame {FIXED_FRAME!r} changed); launch logs in {log_dir}",
              ""]
    print("\n".join(header), flush=True)
    runs = []
    for embedder in args.embedders.split(","):
        for rate in (float(r) for r in args.rates.split(",")):
            seconds = min(BAG_SECONDS, args.seconds * rate)
            run = run_once(embedder, rate, seconds, args.quiet_fraction, args.idle, args.probe_timeout, log_dir,
                           args.clock_hz)
            runs.append(run)
            print("\n".join(table([run])[1:2]), flush=True)
    lines = header + table(runs)
    print("\n" + "\n".join(lines))
    if args.save:
        stem = HERE / "results" / f"{args.name}-{date.date().isoformat()}"
        stem.with_suffix(".txt").write_text("\n".join(lines) + "\n")
        stem.with_suffix(".json").write_text(json.dumps(
            {"machine": machine_info(), "date": date.isoformat(), "runs": [asdict(r) for r in runs]}, indent=1) + "\n")
        print(f"saved {stem}.txt and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
