#!/usr/bin/env python3
"""Days of robot time through the launched memory node: RSS, latency, disk and backlog, sampled as it runs.

A week is generated on the fly (``rosbags/generate_week.py``: a patrol by day,
docked and charging by night, the red mug moving to the office on Thursday)
into a temporary folder and played segment by segment into
``ros2 launch emem_ros memory.launch.py`` with ``ros2 bag play --clock``: each
patrol at ``--patrol-rate``, each (quiet) night at ``--night-rate``. The node
runs the packaged ``config/memory.yaml`` (db_path, embedder and use_sim_time
changed; with ``--retention``, retention rules on as well). Like a robot's
service manager, the soak restarts the node once per robot-day (SIGTERM to the
launch's process group, after the night) and SIGKILLs it once, half-way through
the patrol of ``--kill-day``.

Every ``--sample`` seconds of wall time it records, against robot time (the
``/clock`` the player publishes): RSS of the node and of its maintenance
process, their CPU, the size of every file of the memory (SQLite, WAL, index
snapshots, operation log, cold store), the consolidation backlog (age of the
oldest observation still short-term, and how late the oldest archivable
long-term one is), and the round-trip latency of ``locate``,
``semantic_search`` and ``recall`` (one call every ``--query-period`` s,
round-robin). Before each restart and the kill it notes what SQLite holds
(committed rows), and after the node is back checks that every one of them is
still there; at the end ``PRAGMA integrity_check``; on Friday (after its patrol)
it asks "where is the red mug?".

Run it with ROS sourced and the package built (as bench/bench_node.py):

    python bench/soak.py --days 7 --hours 0.5 --save                # the week, default config
    python bench/soak.py --days 7 --hours 0.5 --retention --save    # the same, retention rules on
    python bench/soak.py --days 2 --hours 0.2 --night-hours 1       # a quick look

Writes bench/results/soak-<date>[-retention].{csv,json,md} and (``--picture``) docs/soak.png.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "rosbags"))

import generate_week  # noqa: E402
from bench_node import Client, child_env, children_rss_mb, cpu_seconds, node_pid, pct, rss_mb  # noqa: E402
from engines import machine_info  # noqa: E402

PARAMS = ROOT / "config" / "memory.yaml"
EMBEDDERS = {"hashing": {"backend": "hashing", "model": ""}, "onnx": {"backend": "onnx", "model": ""}}
RETENTION_AGE = 3 * 86400
"""Retention run: every perception and body layer keeps three robot-days. Friday's question then still
has Wednesday's kitchen table within the horizon; Sunday's has it beyond (retention forgets it)."""
SETTLE = 600.0
"""Robot seconds after a gap in bag time whose backlog samples are not counted (see ``Sample.settling``)."""
RESTART_PAUSE = 3.0
"""Seconds between a node's end and the next start: a launch started at once sometimes configured nothing
(its lifecycle request went to the old node's service, not yet forgotten by discovery)."""
QUESTIONS = ["red mug", "fridge", "sofa", "laptop", "coffee machine", "person", "chair", "bookshelf"]
TOOLS = (("locate", "Locate"), ("semantic_search", "SemanticSearch"), ("recall", "Recall"))


# ---------------------------------------------------------------------- parameters
def write_params(folder: Path, embedder: str, retention: bool, retention_age: float = RETENTION_AGE,
                 rate: float = 1.0) -> tuple[Path, Path, dict[str, Any]]:
    """The packaged parameters with the soak's file, embedder and retention; each layer's queue is ``rate``
    times deeper, so a bag played ``rate`` times faster has the seconds of slack the node has at 1x."""
    import yaml

    tree = yaml.safe_load(PARAMS.read_text())
    params = tree["/**"]["ros__parameters"]
    for layer in params["layers"].values():
        layer["qos_depth"] = max(int(layer.get("qos_depth", 10)), math.ceil(int(layer.get("qos_depth", 10)) * rate))
    db_path = folder / "memory.db"
    params["db_path"] = str(db_path)
    params["embedding"] = dict(EMBEDDERS[embedder])
    if retention:
        params["retention"] = {"max_age": json.dumps({name: retention_age for name in params["layer_names"]}),
                               "rules": ""}
        params["archive_retention"] = "drop"
    out = folder / "params.yaml"
    out.write_text(yaml.safe_dump(tree))
    return out, db_path, params


# ---------------------------------------------------------------------- the node
class Node:
    """One `ros2 launch` of the memory in its own process group (what a service manager starts)."""

    def __init__(self, params: Path, env: dict[str, str], log: Path) -> None:
        self._log = log.open("a")
        self.proc = subprocess.Popen(["ros2", "launch", "emem_ros", "memory.launch.py", f"params_file:={params}",
                                      "use_sim_time:=true"], env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.pid: Optional[int] = None
        self.started = time.monotonic()

    def wait_active(self, client: Client, seconds: float = 180.0) -> float:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ros2 launch exited ({self.proc.returncode}) before the node was active")
            answer, _ = client.call("memory_stats", "MemoryStats", timeout=2.0)
            if answer is not None and answer.success:
                self.pid = node_pid(self.proc.pid)
                return time.monotonic() - self.started
            client.spin(0.3)
        raise RuntimeError(f"the memory node was not active after {seconds:g} s")

    def signal(self, sig: int, timeout: float = 120.0) -> Optional[int]:
        """``sig`` to the launch's process group (SIGTERM: a service manager's stop); the exit code."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait(30)
        if self.pid is not None:  # launch is gone; the node too (same group), or soon
            _wait_gone(self.pid, 30.0)
        self._log.close()
        time.sleep(RESTART_PAUSE)
        return code


def _wait_gone(pid: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)


def maintenance_pids(pid: Optional[int]) -> list[int]:
    if pid is None:
        return []
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


# ---------------------------------------------------------------------- the memory's files
def file_sizes(db_path: Path) -> dict[str, int]:
    """Bytes of every file of the memory: memory.db, -wal, -shm, and each of .idx/, .log/, .cold/ summed."""
    out: dict[str, int] = {}
    for path in sorted(db_path.parent.glob(db_path.name + "*")):
        name = path.name[len(db_path.name):] or ".db"
        if path.is_dir():
            out[name] = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            out[name] = path.stat().st_size
    return out


def read_db(db_path: Path, query: str, params: tuple[Any, ...] = ()) -> Any:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10.0)
    try:
        return conn.execute(query, params).fetchone()
    finally:
        conn.close()


def backlog(db_path: Path, now: float, archive_after: float, window: float) -> tuple[float, float, int]:
    """(age of the oldest short-term observation, how late the oldest archivable long-term one is (s),
    short-term rows older than two consolidation windows).

    The count is the better measure: rows time-window consolidation judged noise stay short-term for
    good, so a handful of them make the oldest age rise however well consolidation keeps up."""
    try:
        short, = read_db(db_path, "SELECT MIN(stamp) FROM observations WHERE tier = 'short_term'")
        since, = read_db(db_path, "SELECT MIN(tier_since) FROM observations WHERE tier = 'long_term'")
        overdue, = read_db(db_path, "SELECT COUNT(*) FROM observations WHERE tier = 'short_term' AND stamp < ?",
                           (now - 2 * window,))
    except sqlite3.Error:
        return math.nan, math.nan, -1
    age = now - short if short is not None else 0.0
    late = max(0.0, now - since - archive_after) if since is not None else 0.0
    return age, late, int(overdue)


def committed(db_path: Path, since: float) -> tuple[int, int]:
    """(highest observation id, rows with an id up to it stamped after ``since``) that SQLite holds now."""
    top, = read_db(db_path, "SELECT COALESCE(MAX(id), 0) FROM observations")
    count, = read_db(db_path, "SELECT COUNT(*) FROM observations WHERE id <= ? AND stamp >= ?", (top, since))
    return int(top), int(count)


def stored_between(db_path: Path, start: float, end: float, settle: float = 2.0) -> int:
    """Observations stamped in [start, end] once the node has had ``settle`` s to write what it still holds:
    the same segment played at two rates stores the same count when the node keeps up with both."""
    time.sleep(settle)
    count, = read_db(db_path, "SELECT COUNT(*) FROM observations WHERE stamp >= ? AND stamp <= ?", (start, end))
    return int(count)


# ---------------------------------------------------------------------- the soak
@dataclasses.dataclass
class Sample:
    wall: float
    robot: float
    day: float
    segment: str
    rss_node_mb: float
    rss_maint_mb: float
    cpu_node: float
    load1: float
    observations: int
    backlog_s: float
    archive_late_s: float
    files: dict[str, int]
    overdue_rows: int = 0
    """Short-term rows older than two consolidation windows (see ``backlog``)."""
    settling: bool = False
    """Within ``SETTLE`` s of robot time after a gap in bag time (the robot was off): everything stored
    before the gap is suddenly old until the first consolidation pass; not counted as backlog."""


@dataclasses.dataclass
class Soak:
    config: dict[str, Any]
    samples: list[Sample] = dataclasses.field(default_factory=list)
    calls: list[tuple[float, str, float, bool]] = dataclasses.field(default_factory=list)
    """(robot time, tool, ms, success)."""
    events: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    segments: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    mug: dict[str, Any] = dataclasses.field(default_factory=dict)
    mug_end: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The same question after the last patrol of the week."""
    keep_up: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """``keep_up`` of the finished run (``--keep-up``)."""
    integrity: str = ""
    week_start: float = generate_week.WEEK_START
    load: list[str] = dataclasses.field(default_factory=list)


def run(days: int = 7, hours: float = 0.5, seed: int = 7, *, night_hours: Optional[float] = None,
        patrol_rate: float = 20.0, night_rate: float = 1000.0, retention: bool = False, embedder: str = "hashing",
        kill_day: Optional[int] = None, mug_moves: int = generate_week.MUG_MOVES, ask_day: Optional[int] = None,
        sample_period: float = 3.0, query_period: float = 1.0, domain: Optional[int] = None,
        retention_age: float = RETENTION_AGE,
        folder: Optional[Path] = None, say: Any = print) -> Soak:
    """Generate the week, play it into the launched node, sample; see the module docstring."""
    folder = Path(folder or tempfile.mkdtemp(prefix="emem_soak_"))
    kill_day = days // 2 if kill_day is None else kill_day
    ask_day = min(days - 1, 4) if ask_day is None else ask_day
    domain = int(os.environ.get("ROS_DOMAIN_ID", "0")) or random.randint(100, 199) if domain is None else domain
    say(f"soak: generating {days} robot-day(s) ({hours:g} h patrol each) in {folder}")
    week = generate_week.week(folder / "bags", days, hours, seed, night_hours=night_hours, mug_moves=mug_moves)
    params_path, db_path, params = write_params(folder, embedder, retention, retention_age, patrol_rate)
    soak = Soak(config={"days": days, "hours": hours, "night_hours": night_hours, "seed": seed,
                        "patrol_rate": patrol_rate, "night_rate": night_rate, "retention": retention,
                        "retention_age": retention_age if retention else None,
                        "embedder": embedder, "kill_day": kill_day,
                        "qos_depth": params["layers"]["detections"]["qos_depth"], "mug_moves": mug_moves, "ask_day": ask_day,
                        "consolidation_window": params["consolidation_window"],
                        "archive_after_seconds": params["archive_after_seconds"], "machine": machine_info(),
                        "folder": str(folder), "domain": domain})
    env = child_env(domain)
    client = Client(domain)
    log = folder / "launch.log"
    soak.load.append(Path("/proc/loadavg").read_text().strip())
    node, ready, tries = _start(params_path, env, log, client)
    try:
        soak.events.append({"what": "start", "robot": 0.0, "ready_s": round(ready, 1), "launches": tries})
        previous_end = None
        for segment in week["segments"]:
            gap = previous_end is not None and segment["start"] - previous_end > 3600.0
            segment = dict(segment, settle_until=segment["start"] + SETTLE if gap else -math.inf)
            previous_end = segment["end"]
            rate = patrol_rate if segment["kind"] == "patrol" else night_rate
            kill = segment["kind"] == "patrol" and segment["day"] == kill_day
            say(f"soak: {segment['name']} ({(segment['end'] - segment['start']) / 3600:.2f} h, "
                f"{segment['messages']} messages) at {rate:g}x{' — SIGKILL half-way' if kill else ''}")
            began = time.monotonic()
            node = _play(soak, segment, rate, node, client, db_path, params, params_path, env, log,
                         kill, sample_period, query_period)
            segment_report = {"name": segment["name"], "rate": rate, "wall_s": round(time.monotonic() - began, 1),
                              "robot_s": segment["end"] - segment["start"], "messages": segment["messages"],
                              "stored": stored_between(db_path, segment["start"], segment["end"])}
            soak.segments.append(segment_report)
            if segment["kind"] == "patrol" and segment["day"] == ask_day:
                soak.mug = _ask_mug(client, segment["day"])
                say(f"soak: {generate_week.WEEKDAYS[segment['day'] % 7]}: where is the red mug? "
                    f"{soak.mug.get('text', '')[:300]}")
            elif segment["kind"] == "patrol" and segment["day"] == days - 1:
                soak.mug_end = _ask_mug(client, segment["day"])
            if segment["kind"] == "night" and segment["day"] < days - 1:
                node = _restart(soak, node, client, db_path, params_path, env, log, signal.SIGTERM,
                                segment["end"], "daily restart (SIGTERM)")
        node.signal(signal.SIGTERM)
        row = read_db(db_path, "PRAGMA integrity_check")
        soak.integrity = str(row[0]) if row else "no answer"
        soak.load.append(Path("/proc/loadavg").read_text().strip())
    finally:
        if node.proc.poll() is None:
            node.signal(signal.SIGTERM)
        client.close()
    return soak


def _play(soak: Soak, segment: dict[str, Any], rate: float, node: Node, client: Client, db_path: Path,
          params: dict[str, Any], params_path: Path, env: dict[str, str], log: Path, kill: bool,
          sample_period: float, query_period: float) -> Node:
    bag = subprocess.Popen(["ros2", "bag", "play", segment["bag"], "--rate", f"{rate:g}", "--clock",
                            "--disable-keyboard-controls", "-d", "1.0"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.STDOUT, start_new_session=True)
    expected = (segment["end"] - segment["start"]) / rate
    begin = time.monotonic()
    next_sample = next_query = begin
    turn = 0
    killed = False
    cpu_mark: Optional[tuple[float, float]] = None
    archive_after = float(params["archive_after_seconds"])
    try:
        while bag.poll() is None:
            now = time.monotonic()
            if kill and not killed and now - begin > expected / 2:
                node = _restart(soak, node, client, db_path, params_path, env, log, signal.SIGKILL,
                                client.sim_now, "crash (SIGKILL) mid-patrol")
                killed = True
                cpu_mark = None
                continue
            if now >= next_query:
                tool, srv = TOOLS[turn % len(TOOLS)]
                question = QUESTIONS[(turn // len(TOOLS)) % len(QUESTIONS)]
                fields: dict[str, Any] = {"locate": {"concept": question},
                                          "semantic_search": {"query": question, "near_x": math.nan,
                                                              "near_y": math.nan},
                                          "recall": {"query": question}}[tool]
                answer, ms = client.call(tool, srv, timeout=10.0, **fields)
                soak.calls.append((client.sim_now, tool, ms, bool(answer is not None and answer.success)))
                turn += 1
                next_query = now + query_period
            if now >= next_sample and node.pid is not None and client.sim_now >= segment["start"] - 1.0:
                cpu_mark = _sample(soak, segment, node, client, db_path, archive_after, cpu_mark)
                next_sample = now + sample_period
            client.spin(0.05)
    finally:
        if bag.poll() is None:
            os.killpg(bag.pid, signal.SIGINT)
            bag.wait(30)
    client.spin(1.0)
    if node.pid is not None and client.sim_now >= segment["start"] - 1.0:
        _sample(soak, segment, node, client, db_path, archive_after, cpu_mark)
    return node


def _sample(soak: Soak, segment: dict[str, Any], node: Node, client: Client, db_path: Path, archive_after: float,
            mark: Optional[tuple[float, float]]) -> Optional[tuple[float, float]]:
    window = float(soak.config["consolidation_window"])
    pid = node.pid
    assert pid is not None
    try:
        cpu = cpu_seconds(pid) + sum(_cpu(p) for p in maintenance_pids(pid))
    except OSError:
        return mark
    now = time.monotonic()
    percent = 100.0 * (cpu - mark[1]) / max(now - mark[0], 1e-6) if mark is not None else math.nan
    robot = client.sim_now
    age, late, overdue = backlog(db_path, robot, archive_after, window)
    try:
        observations = int(read_db(db_path, "SELECT COUNT(*) FROM observations")[0])
    except sqlite3.Error:
        observations = -1
    soak.samples.append(Sample(
        wall=time.time(), robot=robot, day=(robot - soak.week_start) / 86400.0, segment=segment["name"],
        rss_node_mb=round(rss_mb(pid), 1), rss_maint_mb=round(children_rss_mb(pid), 1),
        cpu_node=round(percent, 1), load1=os.getloadavg()[0], observations=observations, backlog_s=round(age, 1),
        archive_late_s=round(late, 1), files=file_sizes(db_path), overdue_rows=overdue,
        settling=robot < segment["settle_until"]))
    return now, cpu


def _cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except OSError:
        return 0.0


def _restart(soak: Soak, node: Node, client: Client, db_path: Path, params_path: Path, env: dict[str, str],
             log: Path, sig: int, robot: float, what: str) -> Node:
    """Stop the node with ``sig`` and start it again; check SQLite still holds every row it held before."""
    since = robot - 86400.0  # rows a retention horizon (two days) cannot have taken meanwhile
    top, count = committed(db_path, since)
    code = node.signal(sig)
    node, ready, tries = _start(params_path, env, log, client)
    _, after = committed(db_path, since)
    after_top, = read_db(db_path, "SELECT COUNT(*) FROM observations WHERE id <= ? AND stamp >= ?", (top, since))
    soak.events.append({"what": what, "robot": robot, "exit_code": code, "committed_top_id": top,
                        "committed": count, "stored_after": int(after_top), "ready_s": round(ready, 1),
                        "lost": max(0, count - int(after_top)), "launches": tries})
    return node


def _start(params_path: Path, env: dict[str, str], log: Path, client: Client) -> tuple[Node, float, int]:
    """Launch until the node is active (a second launch when the first stays unconfigured for a minute)."""
    for tries in (1, 2, 3):
        node = Node(params_path, env, log)
        try:
            return node, node.wait_active(client, 60.0 if tries < 3 else 180.0), tries
        except RuntimeError:
            node.signal(signal.SIGKILL)
    raise RuntimeError("the memory node did not come up after three launches")


def _ask_mug(client: Client, day: int) -> dict[str, Any]:
    answer, ms = client.call("locate", "Locate", timeout=30.0, concept="where is the red mug?")
    if answer is None or not answer.success:
        return {"day": day, "ok": False, "text": "" if answer is None else answer.message}
    p = answer.location.point
    rooms = generate_week.g.ROOMS
    room = next((r.name for r in rooms if r.contains(p.x, p.y)), "nowhere")
    elsewhere = answer.text.split("Also seen elsewhere:", 1)[1] if "Also seen elsewhere:" in answer.text else ""
    return {"day": day, "ok": True, "found": bool(answer.found), "at": [p.x, p.y, p.z], "room": room,
            "text": answer.text, "ms": ms, "kitchen_listed": "(1.0, 4.6" in elsewhere,
            "kitchen_until": _date_after(elsewhere, "(1.0, 4.6")}


def _date_after(text: str, anchor: str) -> str:
    """The 'last YYYY-MM-DD' date on the line that starts with ``anchor`` (the kitchen's place)."""
    for line in text.splitlines():
        if anchor in line and "last " in line:
            return line.split("last ", 1)[1][:10]
    return ""


# ---------------------------------------------------------------------- keeping up
KEEP_UP_LAYERS = ("detections", "detections_3d")
"""Layers stamped by their sensor: the node and a replay of the same bag store the same rows."""


def keep_up(folder: Path, kill_day: Optional[int] = None) -> list[dict[str, Any]]:
    """Per patrol of a finished run (not the killed one): rows the node stored against `emem replay` of its bag.

    The replay reads every message of the bag, so it cannot fall behind; the node, fed by ``ros2 bag play``
    at the patrol rate, stores fewer once its queues overflow. Counted before archival can drop rows
    (``archive_retention: drop`` makes the node's count smaller for reasons other than speed)."""
    from emem_ros.replay.runner import ReplayOptions, replay_bag
    from emem_ros.ros.params import load_params_yaml

    params = load_params_yaml(folder / "params.yaml")
    week = json.loads((folder / "bags" / "week.json").read_text())
    out = []
    for segment in week["segments"]:
        if segment["kind"] != "patrol" or segment["day"] == kill_day:
            continue
        node = {layer: read_db(folder / "memory.db", "SELECT COUNT(*) FROM observations WHERE layer = ? AND "
                               "stamp >= ? AND stamp <= ?", (layer, segment["start"], segment["end"]))[0]
                for layer in KEEP_UP_LAYERS}
        with tempfile.TemporaryDirectory() as scratch:
            summary = replay_bag(segment["bag"], params, ReplayOptions(db_path=str(Path(scratch) / "m.db"),
                                                                        consolidate=False, progress=False))
        replayed = {r.name: r.observations for r in summary.layers if r.name in KEEP_UP_LAYERS}
        out.append({"segment": segment["name"], "node": node, "replay": replayed,
                    "kept": round(sum(node.values()) / max(1, sum(replayed.values())), 4)})
    return out


# ---------------------------------------------------------------------- figures
def by_day(soak: Soak) -> list[dict[str, Any]]:
    """Per robot-day: RSS at its end, p50/p95 of each tool, largest backlog, disk at its end."""
    days: dict[int, dict[str, Any]] = {}
    for s in soak.samples:
        d = days.setdefault(int(s.day), {"day": int(s.day), "backlog_max_s": 0.0, "archive_late_max_s": 0.0,
                                         "overdue_rows_max": 0})
        d["rss_maint_mb"] = max(d.get("rss_maint_mb", 0.0), s.rss_maint_mb)  # it exits when idle: its peak
        d.update({"rss_node_mb": s.rss_node_mb,
                  "disk_mb": round(sum(s.files.values()) / 1e6, 2), "observations": s.observations,
                  "files": s.files})
        if not math.isnan(s.backlog_s) and not s.settling:
            d["backlog_max_s"] = max(d["backlog_max_s"], s.backlog_s)
            d["archive_late_max_s"] = max(d["archive_late_max_s"], s.archive_late_s)
            d["overdue_rows_max"] = max(d["overdue_rows_max"], s.overdue_rows)
    for robot, tool, ms, ok in soak.calls:
        d = days.get(int((robot - soak.week_start) / 86400.0))
        if d is not None and ok and not math.isnan(ms):
            d.setdefault(tool, []).append(ms)
    out = []
    for number in sorted(days):
        d = days[number]
        for tool, _ in TOOLS:
            values = d.pop(tool, [])
            d[f"{tool}_p50_ms"] = round(pct(values, 0.5), 1)
            d[f"{tool}_p95_ms"] = round(pct(values, 0.95), 1)
            d[f"{tool}_n"] = len(values)
        out.append(d)
    return out


def verdict(soak: Soak) -> dict[str, Any]:
    """The issue's targets, each with its figures."""
    days = [d for d in by_day(soak) if d["day"] < int(soak.config["days"])]  # the last night ends on day `days`
    out: dict[str, Any] = {}
    if len(days) >= 2:
        first, last = days[0], days[-1]
        out["rss_end_vs_day1"] = round(last["rss_node_mb"] / first["rss_node_mb"], 3)
        out["rss_maint_end_vs_day1"] = round(last["rss_maint_mb"] / max(first["rss_maint_mb"], 1e-9), 3)
        for tool, _ in TOOLS:
            a, b = first[f"{tool}_p95_ms"], last[f"{tool}_p95_ms"]
            out[f"{tool}_p95_last_vs_day1"] = round(b / a, 2) if a and not math.isnan(a) else math.nan
        growth = [days[k + 1]["disk_mb"] - days[k]["disk_mb"] for k in range(len(days) - 1)]
        out["disk_per_day_mb"] = [round(g, 2) for g in growth]
    window = float(soak.config["consolidation_window"])
    out["backlog_max_s"] = max((d["backlog_max_s"] for d in days), default=math.nan)
    out["backlog_windows"] = round(out["backlog_max_s"] / window, 2)
    out["archive_late_max_s"] = max((d["archive_late_max_s"] for d in days), default=math.nan)
    out["overdue_rows_max"] = max((d["overdue_rows_max"] for d in days), default=0)
    out["lost"] = sum(e.get("lost", 0) for e in soak.events)
    out["restarts"] = sum(1 for e in soak.events if "SIGTERM" in e["what"])
    out["kills"] = sum(1 for e in soak.events if "SIGKILL" in e["what"])
    out["integrity"] = soak.integrity
    out["mug_room"] = soak.mug.get("room")
    out["mug_kitchen_listed"] = soak.mug.get("kitchen_listed")
    out["mug_kitchen_until"] = soak.mug.get("kitchen_until")
    if soak.mug_end:
        out["mug_end_room"] = soak.mug_end.get("room")
        out["mug_end_kitchen_listed"] = soak.mug_end.get("kitchen_listed")
    out["failed_calls"] = sum(1 for c in soak.calls if not c[3])
    return out


def save(soak: Soak, stem: Path) -> None:
    stem.parent.mkdir(parents=True, exist_ok=True)
    names = sorted({k for s in soak.samples for k in s.files})
    with stem.with_suffix(".csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["wall", "robot", "day", "segment", "rss_node_mb", "rss_maint_mb", "cpu_node", "load1",
                         "observations", "backlog_s", "archive_late_s", "overdue_rows", "settling",
                         *[f"bytes{n}" for n in names]])
        for s in soak.samples:
            writer.writerow([round(s.wall, 1), round(s.robot, 1), round(s.day, 4), s.segment, s.rss_node_mb,
                             s.rss_maint_mb, s.cpu_node, round(s.load1, 2), s.observations, s.backlog_s,
                             s.archive_late_s, s.overdue_rows, int(s.settling), *[s.files.get(n, 0) for n in names]])
    with stem.with_name(stem.name + "-calls").with_suffix(".csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["robot", "tool", "ms", "ok"])
        writer.writerows([(round(r, 1), t, round(ms, 2), int(ok)) for r, t, ms, ok in soak.calls])
    stem.with_suffix(".json").write_text(json.dumps(
        {"config": soak.config, "load": soak.load, "segments": soak.segments, "events": soak.events,
         "days": by_day(soak), "verdict": verdict(soak), "mug": soak.mug, "mug_end": soak.mug_end,
         "keep_up": soak.keep_up, "integrity": soak.integrity},
        indent=1, default=str) + "\n")


def load(stem: Path) -> Soak:
    """A saved run (``save``) back: samples, calls, events and the rest, for ``picture`` and ``report``."""
    data = json.loads(stem.with_suffix(".json").read_text())
    soak = Soak(config=data["config"], events=data["events"], segments=data["segments"], mug=data["mug"],
                mug_end=data.get("mug_end", {}), keep_up=data.get("keep_up", []), integrity=data["integrity"],
                load=data["load"])
    with stem.with_suffix(".csv").open() as handle:
        for row in csv.DictReader(handle):
            files = {k[len("bytes"):]: int(v) for k, v in row.items() if k.startswith("bytes")}
            soak.samples.append(Sample(float(row["wall"]), float(row["robot"]), float(row["day"]), row["segment"],
                                       float(row["rss_node_mb"]), float(row["rss_maint_mb"]), float(row["cpu_node"]),
                                       float(row["load1"]), int(row["observations"]), float(row["backlog_s"]),
                                       float(row["archive_late_s"]), files, int(row.get("overdue_rows") or 0),
                                       row.get("settling") == "1"))
    with stem.with_name(stem.name + "-calls").with_suffix(".csv").open() as handle:
        soak.calls = [(float(r["robot"]), r["tool"], float(r["ms"]), r["ok"] == "1") for r in csv.DictReader(handle)]
    return soak


def picture(runs: list[tuple[str, Soak]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    for label, soak in runs:
        days = [s.day for s in soak.samples]
        axes[0].plot(days, [s.rss_node_mb for s in soak.samples], label=f"node {label}")
        busy = [s for s in soak.samples if s.rss_maint_mb > 0]  # it exits when idle and starts again
        axes[0].plot([s.day for s in busy], [s.rss_maint_mb for s in busy], ".", ms=2,
                     label=f"maintenance {label}")
        calls = [(r, ms) for r, t, ms, ok in soak.calls if t == "locate" and ok and r >= soak.week_start]
        axes[1].plot([(r - soak.week_start) / 86400 for r, _ in calls], [ms for _, ms in calls], ".", ms=2,
                     label=f"locate {label}")
        axes[2].plot(days, [sum(s.files.values()) / 1e6 for s in soak.samples], label=label)
        axes[3].plot(days, [s.overdue_rows for s in soak.samples], label=label)
        for e in soak.events[1:]:
            for ax in axes:
                ax.axvline((e["robot"] - soak.week_start) / 86400, color="red" if "KILL" in e["what"] else "grey",
                           lw=0.6, alpha=0.5)
    axes[0].set_ylabel("RSS (MB)")
    axes[1].set_ylabel("locate (ms)")
    axes[1].set_yscale("log")
    axes[2].set_ylabel("disk (MB)")
    axes[3].set_ylabel("short-term rows\nolder than 2 windows")
    axes[3].set_xlabel("robot time (days since Monday 00:00); grey: daily restart, red: SIGKILL")
    for ax in axes:
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    fig.suptitle(f"emem_ros memory node through robot-days ({datetime.date.today().isoformat()})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def report(soak: Soak, label: str) -> list[str]:
    c = soak.config
    lines = [f"## {label}", "",
             f"{c['days']} robot-day(s): {c['hours']:g} h patrol + night "
             f"({'docked until 08:00' if c['night_hours'] is None else str(c['night_hours']) + ' h'}); "
             f"patrol at {c['patrol_rate']:g}x, night at {c['night_rate']:g}x; embedder {c['embedder']}; "
             f"retention {_retention_words(c)}; SIGKILL on day {c['kill_day']}; "
             f"layer queues {c.get('qos_depth', 10)} deep (10 at 1x)",
             f"load average before / after: {soak.load[0]} / {soak.load[-1] if len(soak.load) > 1 else '?'}", "",
             "| day | observations | RSS node MB | RSS maint MB | disk MB | locate p50/p95 ms | search p50/p95 ms "
             "| recall p50/p95 ms | backlog max min | archive late max min |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for d in by_day(soak):
        lines.append(f"| {d['day']} | {d['observations']} | {d['rss_node_mb']} | {d['rss_maint_mb']} | {d['disk_mb']} "
                     f"| {d['locate_p50_ms']} / {d['locate_p95_ms']} "
                     f"| {d['semantic_search_p50_ms']} / {d['semantic_search_p95_ms']} "
                     f"| {d['recall_p50_ms']} / {d['recall_p95_ms']} | {d['backlog_max_s'] / 60:.1f} "
                     f"| {d['archive_late_max_s'] / 60:.1f} |")
    lines += ["", "Segments (wall s, observations stored): " + ", ".join(
        f"{s['name']} {s['wall_s']} s, {s.get('stored', '?')}" for s in soak.segments), "",
              "Restarts and the crash:"]
    for e in soak.events:
        lines.append(f"- {e['what']}: " + ", ".join(f"{k} {v}" for k, v in e.items() if k != "what"))
    lines += ["", "Verdict: " + json.dumps(verdict(soak), default=str), ""]
    if soak.mug:
        lines += ["Where is the red mug (asked after the patrol of day "
                  f"{soak.mug.get('day')}):", "", "```", soak.mug.get("text", ""), "```", ""]
    if soak.keep_up:
        lines += ["Kept up (rows of " + " and ".join(KEEP_UP_LAYERS) + " the node stored / what `emem replay` of the "
                  "same bag stores): " + ", ".join(f"{k['segment']} {sum(k['node'].values())} / "
                                                   f"{sum(k['replay'].values())}" for k in soak.keep_up), ""]
    if soak.mug_end:
        lines += ["And after the last patrol (day "
                  f"{soak.mug_end.get('day')}):", "", "```", soak.mug_end.get("text", ""), "```", ""]
    return lines


def _retention_words(config: dict[str, Any]) -> str:
    if not config["retention"]:
        return "off"
    return f"on ({float(config.get('retention_age') or RETENTION_AGE) / 86400:g} days, drop)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--hours", type=float, default=0.5, help="hours of patrol per robot-day")
    parser.add_argument("--night-hours", type=float, default=None, help="cut nights short (default: until 08:00)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--patrol-rate", type=float, default=20.0)
    parser.add_argument("--night-rate", type=float, default=1000.0)
    parser.add_argument("--retention", action="store_true", help="retention rules on (text dropped)")
    parser.add_argument("--retention-days", type=float, default=RETENTION_AGE / 86400, help="their horizon")
    parser.add_argument("--embedder", choices=sorted(EMBEDDERS), default="hashing")
    parser.add_argument("--kill-day", type=int, default=None, help="day whose patrol is SIGKILLed (default: middle)")
    parser.add_argument("--sample", type=float, default=3.0, help="wall seconds between samples")
    parser.add_argument("--name", default="soak")
    parser.add_argument("--save", action="store_true", help="bench/results/<name>-<date>[-retention].*")
    parser.add_argument("--picture", type=Path, default=None, help="also draw the run here (e.g. docs/soak.png)")
    parser.add_argument("--keep-up", type=Path, default=None, metavar="STEM",
                        help="a saved run: replay each of its patrol bags and compare what the node stored")
    parser.add_argument("--draw", nargs="+", type=Path, default=None, metavar="STEM",
                        help="only draw saved runs (bench/results/soak-<date>[-retention]) into --picture")
    args = parser.parse_args()
    if args.keep_up:
        data = json.loads(args.keep_up.with_suffix(".json").read_text())
        data["keep_up"] = keep_up(Path(data["config"]["folder"]), data["config"]["kill_day"])
        args.keep_up.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str) + "\n")
        print(json.dumps(data["keep_up"], indent=1))
        return 0
    if args.draw:  # saved runs: their reports again (this code's verdict) and one picture
        runs = []
        for stem in args.draw:
            saved = load(stem)
            label = f"{stem.name}: " + ("retention on" if saved.config["retention"] else "default config")
            stem.with_suffix(".md").write_text("\n".join(report(saved, label)) + "\n")
            data = json.loads(stem.with_suffix(".json").read_text())
            data["verdict"], data["days"] = verdict(saved), by_day(saved)
            stem.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str) + "\n")
            runs.append((label, saved))
        picture(runs, args.picture or ROOT / "docs" / "soak.png")
        return 0
    soak = run(args.days, args.hours, args.seed, night_hours=args.night_hours, patrol_rate=args.patrol_rate,
               night_rate=args.night_rate, retention=args.retention, embedder=args.embedder,
               kill_day=args.kill_day, sample_period=args.sample, retention_age=args.retention_days * 86400)
    label = "retention on" if args.retention else "default config"
    lines = report(soak, label)
    print("\n".join(lines))
    if args.save:
        date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        stem = HERE / "results" / f"{args.name}-{date}{'-retention' if args.retention else ''}"
        save(soak, stem)
        stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
        print(f"saved {stem}.csv, .json, .md")
    if args.picture is not None:
        picture([(label, soak)], args.picture)
    return 0


if __name__ == "__main__":
    sys.exit(main())
