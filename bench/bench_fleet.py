"""The fleet store on PostgreSQL: sync throughput, flush-to-queryable lag, disk per observation.

Sections (``--only`` picks some):

- ``sync``: robots' memories (a real ``Memory`` fed a 20-room patrol stream,
  dense 384-float vectors like a language model's) are shipped into an empty
  fleet store, one after the other, by the real ``emem sync`` code path;
  observations per second of the whole sync (log read, translation, COPY,
  inserts into the partitioned, indexed tables, the cursor) per stream:
  ``labels`` (few distinct texts) and ``captions`` (10 % of the texts new,
  each one a pgvector HNSW insert).
- ``lag``: a robot writes 40 observations/s with the memory's own 1 s flush
  while the node's fleet worker syncs at the default period (``fleet.sync_period``
  5 s); a reader polls PostgreSQL every 20 ms. Lag = first seen in the fleet
  minus the flush that committed it on the robot.
- ``hnsw``: pgvector's HNSW insertion alone (what bounds the captions stream).
- ``tools``: fleet tool p50/p95 at 10 robots x 100k observations (each robot
  its own patrol, 2 % new texts, its map 30 m along x in the fleet frame)
  against the same tools on one robot's SQLite file of 100k.
- ``disk``: bytes per observation in PostgreSQL (every fleet table with its
  indexes and TOAST, texts included), after the ``sync`` section, against
  the robot's own SQLite file and log.

PostgreSQL: ``--url`` (an existing, empty database), else a throw-away
cluster started here (test/support/postgres.py; PostgreSQL 15 + PostGIS +
pgvector must be installed). The machine is shared: prefer the ratios and
rerun for figures you quote.

    python bench/bench_fleet.py            # 3 robots x 100k per stream, 60 s of lag
    python bench/bench_fleet.py --quick    # 2 robots x 20k, 20 s of lag
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_oplog import DenseEmbedder  # noqa: E402  (dense vectors, like MiniLM's)
from bench.engines import machine_info, save_results  # noqa: E402
from emem_ros import Memory, MemoryConfig  # noqa: E402
from emem_ros.fleet import db  # noqa: E402
from emem_ros.fleet.schema import init_fleet  # noqa: E402
from emem_ros.fleet.sync import sync_memory  # noqa: E402
from emem_ros.fleet.worker import FleetSyncWorker  # noqa: E402

LABELS = ["chair", "table", "red mug", "refrigerator", "sofa", "tv", "potted plant", "laptop", "door", "pallet"]
SCENES = ["a kitchen with a red mug on the table", "a living room with a sofa facing the tv",
          "a hallway with a closed door", "an aisle with pallets on the shelves"]
DEFAULT_SYNC_PERIOD = 5.0
SERVER_SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "256MB", "work_mem": "16MB"}
"""The throw-away cluster's memory settings (a fleet store's server would have more; 64 MB of shared
buffers would thrash once the HNSW index outgrows them). fsync is off there: figures are CPU-bound."""


def feed(memory: Memory, n: int, unique: float, seed: int, start: float = 1_763_000_000.0) -> None:
    """A patrol: 2 Hz detections with repeating labels, scenes, a 1 Hz battery; ``unique`` of texts new."""
    rng = random.Random(seed)
    for i in range(n):
        angle = i / 300.0
        x, y, t = 20 * math.cos(angle), 10 * math.sin(angle), start + i * 0.5
        if i % 20 == 0:
            memory.add_body_state(f"battery {100 - i * 50 // n}%", "battery", x=x, y=y, timestamp=t,
                                  value=1 - i / (2 * n))
        elif rng.random() < unique:
            memory.add(f"{rng.choice(SCENES)}, item {rng.randint(0, 10 ** 9)}", x=x, y=y, timestamp=t,
                       layer_name="scene", source_type="perception")
        elif i % 7 == 0:
            memory.add(rng.choice(SCENES), x=x, y=y, timestamp=t, layer_name="scene", source_type="perception")
        else:
            memory.add(rng.choice(LABELS), x=x + rng.random(), y=y, z=0.8, timestamp=t, layer_name="detections",
                       source_type="perception", confidence=0.5 + rng.random() / 2,
                       metadata={"class_id": "x", "score": 0.9})
    memory.flush()


def make_robot(folder: Path, n: int, unique: float, seed: int) -> Path:
    path = folder / f"robot-{seed}.db"
    memory = Memory(config=MemoryConfig(db_path=str(path), flush_interval=0.0, index_save_interval=0.0,
                                        flush_batch_size=2048, working_memory_size=20_000),
                    embedding_provider=DenseEmbedder())
    feed(memory, n, unique, seed)
    memory.close()
    return path


def folder_bytes(path: Path) -> int:
    total = 0
    for entry in [path.with_name(path.name + s) for s in ("", "-wal")] + list(
            path.with_name(path.name + ".log").glob("*.seg")):
        if entry.exists():
            total += entry.stat().st_size
    return total


# ---------------------------------------------------------------------------- sections
def section_sync(url: str, work: Path, robots: int, n: int, results: dict) -> list[str]:
    lines = ["## sync: robot logs into an empty fleet store (the `emem sync` code path)", "",
             "| stream | robot | observations | log records | seconds | obs/s |", "|:--|--:|--:|--:|--:|--:|"]
    totals: dict[str, tuple[int, float]] = {}
    robot_files = []
    for stream, unique in (("labels", 0.0), ("captions", 0.1)):
        for r in range(robots):
            seed = (1 if stream == "labels" else 101) + r
            path = make_robot(work, n, unique, seed)
            robot_files.append(path)
            started = time.perf_counter()
            report = sync_memory(path, url, f"{stream}-{r + 1}")
            seconds = time.perf_counter() - started
            obs = report.counts.get("observations", 0)
            lines.append(f"| {stream} | {r + 1} | {obs:,} | {report.records:,} | {seconds:.2f} | "
                         f"{obs / seconds:,.0f} |")
            count, secs = totals.get(stream, (0, 0.0))
            totals[stream] = (count + obs, secs + seconds)
    lines.append("")
    for stream, (count, secs) in totals.items():
        lines.append(f"{stream}: {count:,} observations in {secs:.2f} s = **{count / secs:,.0f} obs/s**")
        results[f"sync_{stream}"] = count / secs
    results["robot_files"] = robot_files
    return lines + [""]


def section_disk(url: str, results: dict) -> list[str]:
    with db.connect(url) as conn:
        sizes = dict(conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON "
            "n.oid = c.relnamespace WHERE n.nspname = 'fleet' AND c.relkind IN ('r', 'p')").fetchall())
        count = conn.execute("SELECT count(*) FROM fleet.observations").fetchone()[0]
        texts = conn.execute("SELECT count(*) FROM fleet.texts").fetchone()[0]
    observations = sum(v for k, v in sizes.items() if k.startswith("observations"))
    total = sum(sizes.values())
    robot_bytes = sum(folder_bytes(p) for p in results.get("robot_files", []))
    lines = ["## disk in PostgreSQL (tables + indexes + TOAST)", "",
             f"{count:,} observations, {texts:,} distinct texts (one vector each) from "
             f"{len(results.get('robot_files', []))} robots", "",
             "| what | bytes | per observation |", "|:--|--:|--:|",
             f"| observations (partitions, 4 indexes) | {observations:,} | {observations / max(count, 1):.0f} |",
             f"| texts (vector + HNSW + tsvector + GIN) | {sizes.get('texts', 0):,} | "
             f"{sizes.get('texts', 0) / max(count, 1):.0f} |",
             f"| whole fleet store | {total:,} | {total / max(count, 1):.0f} |",
             f"| the robots' own files (SQLite + op-log) | {robot_bytes:,} | {robot_bytes / max(count, 1):.0f} |", ""]
    results["disk_per_obs"] = total / max(count, 1)
    return lines


def section_lag(url: str, work: Path, seconds: float, results: dict, period: float = DEFAULT_SYNC_PERIOD,
                rate: float = 40.0) -> list[str]:
    path = work / "lag-robot.db"
    memory = Memory(config=MemoryConfig(db_path=str(path), flush_interval=0.0, index_save_interval=0.0),
                    embedding_provider=DenseEmbedder())
    feed(memory, 2000, 0.0, 7)  # something there already
    worker = FleetSyncWorker(path, url, "lag-robot", max_seconds=period)
    worker.run_now()
    flushed: dict[int, float] = {}  # max observation id of each flush -> wall time of the commit
    seen: dict[int, float] = {}
    stop = threading.Event()

    def robot() -> None:  # the memory's 1 s flush thread, written out so each commit time is known
        rng = random.Random(5)
        t0 = time.time()
        i = 0
        next_flush = time.monotonic() + 1.0
        while not stop.is_set():
            memory.add(rng.choice(LABELS), x=rng.random(), y=rng.random(), timestamp=t0 + i / rate,
                       layer_name="detections")
            i += 1
            time.sleep(1.0 / rate)
            if time.monotonic() >= next_flush:
                memory.flush()
                flushed[memory.store.state.ids.max_stored] = time.time()
                next_flush += 1.0

    def timer() -> None:  # the node's fleet_sync timer
        while not stop.wait(period):
            worker.trigger()

    def poll() -> None:
        with db.connect(url) as conn:
            while not stop.is_set():
                top = conn.execute("SELECT max(id) FROM fleet.observations WHERE robot_id = 'lag-robot'").fetchone()[0]
                conn.rollback()
                now = time.time()
                for mark in flushed.copy():
                    if mark not in seen and top is not None and top >= mark:
                        seen[mark] = now
                time.sleep(0.02)

    threads = [threading.Thread(target=f, daemon=True) for f in (robot, timer, poll)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    time.sleep(period + 2.0)  # let the last flushes arrive
    stop.set()
    for thread in threads:
        thread.join(30)
    worker.close()
    memory.close()
    lags = sorted(seen[m] - flushed[m] for m in seen)
    if not lags:
        return ["## lag: no flush reached the fleet store", ""]
    p50, p95 = float(np.percentile(lags, 50)), float(np.percentile(lags, 95))
    results.update(lag_p50=p50, lag_p95=p95, lag_max=lags[-1])
    return ["## lag: a robot's flush -> queryable in the fleet store", "",
            f"{rate:.0f} observations/s, the memory's flush every 1 s, fleet.sync_period {period:g} s (the default), "
            f"{len(lags)} flushes over {seconds:.0f} s", "",
            "| p50 s | p95 s | max s |", "|--:|--:|--:|", f"| {p50:.2f} | {p95:.2f} | {lags[-1]:.2f} |", "",
            "Expected: about half a period on average plus one sync (a flush waits for the next tick).", ""]


def section_hnsw(url: str, results: dict, rounds: int = 3, batch: int = 5000) -> list[str]:
    """What bounds the captions stream: pgvector HNSW insertion, measured alone (random 384-float vectors)."""
    rng = np.random.default_rng(0)
    lines = ["## pgvector alone: vectors/s inserted into a vector(384) table (COPY, text format)", "",
             "| index | after 5k | after 10k | after 15k |", "|:--|--:|--:|--:|"]
    with db.connect(url, autocommit=True) as conn:
        for label, ddl in (("none", ""), ("HNSW cosine, m 16, ef_construction 64 (the fleet's)",
                                          "CREATE INDEX ON bench_vectors USING hnsw (e vector_cosine_ops)")):
            conn.execute("DROP TABLE IF EXISTS bench_vectors")
            conn.execute("CREATE TABLE bench_vectors(id serial, e vector(384))")
            if ddl:
                conn.execute(ddl)
            rates = []
            for _ in range(rounds):
                vectors = rng.standard_normal((batch, 384)).astype(np.float32)
                started = time.perf_counter()
                with conn.cursor().copy("COPY bench_vectors(e) FROM STDIN") as copy:
                    for row in vectors:
                        copy.write_row(["[" + ",".join(map(str, row.tolist())) + "]"])
                rates.append(batch / (time.perf_counter() - started))
            lines.append(f"| {label} | " + " | ".join(f"{r:,.0f}" for r in rates) + " |")
            results[f"hnsw_{'on' if ddl else 'off'}"] = rates
        conn.execute("DROP TABLE bench_vectors")
    return lines + [""]


def _percentiles(samples: list[float]) -> tuple[float, float]:
    return float(np.percentile(samples, 50)) * 1000, float(np.percentile(samples, 95)) * 1000


def _time_calls(calls: list[Callable[[], object]], rounds: int = 2) -> list[float]:
    """Seconds per call, warm (the first round is discarded: it fills caches on both sides)."""
    for call in calls:
        call()
    out = []
    for _ in range(rounds):
        for call in calls:
            started = time.perf_counter()
            call()
            out.append(time.perf_counter() - started)
    return out


def section_tools(url: str, work: Path, robots: int, n: int, results: dict, unique: float = 0.02) -> list[str]:
    """Fleet tool p50/p95 at ``robots`` x ``n`` observations, against the same tools on one robot's file."""
    from emem_ros.fleet.memory import FleetMemory
    from emem_ros.fleet.robots import add_robot
    from emem_ros.fleet.transform import RigidTransform

    tools_url = url.rsplit("/", 1)[0] + "/postgres"
    keep = results.get("keep")
    url = tools_url.rsplit("/", 1)[0] + "/bench_tools"
    built = synced = 0.0
    first = keep / "robot1.db" if keep is not None else None
    if keep is not None and results.get("reuse") and first is not None and first.exists():
        print(f"tools: reusing the fleet store bench_tools and {first}", flush=True)
    else:
        first = None
        with db.connect(tools_url, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS bench_tools")
            conn.execute("CREATE DATABASE bench_tools")
        with db.connect(url) as conn:
            init_fleet(conn, dim=DenseEmbedder.dim)
            for r in range(robots):  # the robots' patrol ellipses (40 m x 20 m) overlap by 10 m in the fleet frame
                add_robot(conn, f"robot{r + 1}", RigidTransform(30.0 * r, 0.0, 0.0))
        for r in range(robots):
            started = time.perf_counter()
            path = make_robot(keep if keep is not None and r == 0 else work, n, unique, 500 + r)
            built += time.perf_counter() - started
            first = first or path
            started = time.perf_counter()
            sync_memory(path, url, f"robot{r + 1}")
            synced += time.perf_counter() - started
            if r:
                path.unlink()
                for extra in path.parent.glob(path.name + "*"):
                    shutil.rmtree(extra, ignore_errors=True) if extra.is_dir() else extra.unlink()
            print(f"tools: robot {r + 1}/{robots} built and synced ({built:.0f} s building, {synced:.0f} s syncing)",
                  flush=True)
        if keep is not None:
            path = keep / "robot1.db"
            if first != path:
                first.rename(path)
                for extra in first.parent.glob(first.name + "*"):
                    extra.rename(keep / ("robot1.db" + extra.name[len(first.name):]))
                first = path
        with db.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        if results.get("build_only"):
            return [f"## fleet tools fixture built: {robots} robots x {n:,} in {built:.0f} s, synced in "
                    f"{synced:.0f} s", ""]
    with db.connect(url, autocommit=True) as conn:
        total = conn.execute("SELECT count(*) FROM fleet.observations").fetchone()[0]
        texts = conn.execute("SELECT count(*) FROM fleet.texts").fetchone()[0]
    rng = random.Random(9)
    labels = LABELS + ["forklift", "a spilled drink", "pallet 4711", "the red chair"]
    queries = [rng.choice(labels) for _ in range(10)] + [rng.choice(SCENES) for _ in range(5)]
    points = [(20 * math.cos(a) + 30.0 * rng.randrange(robots), 10 * math.sin(a))
              for a in (rng.uniform(0, 2 * math.pi) for _ in range(15))]
    fleet = FleetMemory(url, embedding_provider=DenseEmbedder(), now="latest")
    assert first is not None
    import sqlite3

    with sqlite3.connect(first) as conn:
        newest = conn.execute("SELECT max(stamp) FROM observations").fetchone()[0]
    local = Memory(config=MemoryConfig(db_path=str(first), flush_interval=0.0, index_save_interval=0.0,
                                       query_cache_enabled=False),  # both sides answer every call in full
                   embedding_provider=DenseEmbedder(), get_current_time=lambda: newest)
    local_points = [(x - 30.0 * int((x + 20) // 30), y) for x, y in points]
    one = ["robot1"]
    cases: list[tuple[str, list, list]] = [
        ("semantic_search", [lambda q=q: fleet.semantic_search(q) for q in queries],
         [lambda q=q: local.semantic_search(q) for q in queries]),
        ("semantic_search robots=[1]", [lambda q=q: fleet.semantic_search(q, robots=one) for q in queries], []),
        ("locate", [lambda q=q: fleet.locate(q) for q in queries], [lambda q=q: local.locate(q) for q in queries]),
        ("locate robots=[1]", [lambda q=q: fleet.locate(q, robots=one) for q in queries], []),
        ("spatial_query r=2", [lambda p=p: fleet.spatial_query(p[0], p[1], radius=2.0) for p in points],
         [lambda p=p: local.spatial_query(p[0], p[1], radius=2.0) for p in local_points]),
        ("temporal_query 10 min", [lambda: fleet.temporal_query(last_n_minutes=10)] * 5,
         [lambda: local.temporal_query(last_n_minutes=10)] * 5),
        ("recall", [lambda q=q: fleet.recall(q) for q in queries[:8]],
         [lambda q=q: local.recall(q) for q in queries[:8]]),
        ("entity_query near", [lambda p=p: fleet.entity_query(near_x=p[0], near_y=p[1]) for p in points[:5]],
         [lambda p=p: local.entity_query(near_x=p[0], near_y=p[1]) for p in local_points[:5]]),
        ("search_gists", [lambda q=q: fleet.search_gists(q) for q in queries[:5]],
         [lambda q=q: local.search_gists(q) for q in queries[:5]]),
    ]
    lines = [f"## fleet tools: {robots} robots x {n:,} observations = {total:,} in the fleet store "
             f"({texts:,} distinct texts)", "",
             (f"Built the robots in {built:.0f} s, synced them in {synced:.0f} s "
              f"({total / max(synced, 1e-9):,.0f} obs/s). " if synced else "A fixture built before (--reuse). ")
             + "Warm p50/p95 in ms over the query set (2 rounds after a warm-up round); the robot column is "
             f"the same tool on one robot's SQLite file ({n:,} observations).", "",
             "| tool | fleet p50 | fleet p95 | one robot p50 | one robot p95 |", "|:--|--:|--:|--:|--:|"]
    try:
        for name, fleet_calls, local_calls in cases:
            f50, f95 = _percentiles(_time_calls(fleet_calls))
            row = f"| {name} | {f50:.1f} | {f95:.1f} |"
            if local_calls:
                l50, l95 = _percentiles(_time_calls(local_calls))
                row += f" {l50:.1f} | {l95:.1f} |"
            else:
                row += " | |"
            lines.append(row)
            results[f"tools_{name}"] = f50
            print(row, flush=True)
        lines += ["", "Sample fleet answer (locate, first lines):", "```",
                  *str(fleet.locate(LABELS[2])).splitlines()[:6], "```", ""]
    finally:
        fleet.close()
        local.close()
    return lines


SECTIONS: dict[str, Callable[..., list[str]]] = {"sync": section_sync, "disk": section_disk, "lag": section_lag,
                                                 "hnsw": section_hnsw, "tools": section_tools}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--url", default=None, help="an existing, empty PostgreSQL database (default: start one)")
    parser.add_argument("--only", default="sync,disk,lag,hnsw,tools",
                        help="sections, comma-separated: sync, disk, lag, hnsw, tools")
    parser.add_argument("--robots", type=int, default=None)
    parser.add_argument("--observations", type=int, default=None)
    parser.add_argument("--lag-seconds", type=float, default=None)
    parser.add_argument("--tool-robots", type=int, default=None, help="robots in the tools section (default 10)")
    parser.add_argument("--save", action="store_true", help="write bench/results/fleet-<date>.txt")
    parser.add_argument("--pg-dir", type=Path, default=None,
                        help="keep the PostgreSQL cluster (and the tools section's robot1.db) in this folder")
    parser.add_argument("--build-only", action="store_true",
                        help="tools: build the fleet fixture into --pg-dir and stop (run niced, outside the lock)")
    parser.add_argument("--reuse", action="store_true", help="tools: measure the fixture kept in --pg-dir")
    args = parser.parse_args(argv)
    robots = args.robots or (2 if args.quick else 3)
    n = args.observations or (20_000 if args.quick else 100_000)
    lag_seconds = args.lag_seconds or (20.0 if args.quick else 60.0)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    server = None
    url = args.url
    if url is None:
        from test.support.postgres import start_server

        server = start_server(SERVER_SETTINGS, root=args.pg_dir)
        url = server.url("bench")
        with db.connect(server.url(), autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS bench")
            conn.execute("CREATE DATABASE bench")
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    load = os.getloadavg()
    lines = [f"bench_fleet on {machine_info()}", f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
             f"robots per stream: {robots}, observations per robot: {n:,}",
             "PostgreSQL: " + ("given by --url" if args.url else "a throw-away cluster here (fsync off, "
                               + ", ".join(f"{k} {v}" for k, v in SERVER_SETTINGS.items()) + ")"),
             ""]
    try:
        with db.connect(url) as conn:
            init_fleet(conn, dim=DenseEmbedder.dim)
        results: dict = {"keep": args.pg_dir, "reuse": args.reuse, "build_only": args.build_only}
        for name in wanted:
            if name == "sync":
                lines += section_sync(url, work, robots, n, results)
            elif name == "disk":
                lines += section_disk(url, results)
            elif name == "lag":
                lines += section_lag(url, work, lag_seconds, results)
            elif name == "hnsw":
                lines += section_hnsw(url, results)
            elif name == "tools":
                lines += section_tools(url, work, args.tool_robots or (3 if args.quick else 10), n, results)
            else:
                raise SystemExit(f"unknown section {name!r}; sections: {', '.join(SECTIONS)}")
            print("\n".join(lines[-12:]), flush=True)
        load = os.getloadavg()
        lines.append(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if server is not None:
            server.stop("fast") if args.pg_dir is not None else server.destroy()
    print("\n".join(lines))
    if args.save:
        save_results("fleet", lines, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
