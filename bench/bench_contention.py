#!/usr/bin/env python3
"""Questions while the memory is busy writing: tool latency under unthrottled writers and maintenance.

A robot's memory answers a planner while perception writes as fast as it
can. This bench fills a memory (the realistic stream of robot_streams.py,
the deterministic ``HashingEmbeddingProvider``, the default flush timer),
then measures the tools' latency (query cache off, query embeddings
pre-computed) in four phases:

- ``quiet``: no writer;
- ``writers``: three threads add observations as fast as they can;
- ``writers+maintenance``: the same, while consolidation (entities, gists)
  and archival run in a loop on the consolidation worker (each run's seconds
  are printed below the table);
- ``writers only``: the three writers without questions, for the write
  throughput the questions cost.

A question is asked every ``--interval`` seconds (a planner's pace, not a
load test of reads). Reported: p50 / p95 / p99 / max per phase and the
write throughput (observations stored per second) with and without
questions.

    python bench/bench_contention.py            # 20k prefill, 8 s per phase
    python bench/bench_contention.py --quick    # 5k prefill, 4 s per phase
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from load_threads import LoadThreads  # noqa: E402
from robot_streams import CachedProvider, make_stream  # noqa: E402

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("semantic_search", {"query": "red mug"}),
    ("spatial_query", {"x": 9.0, "y": 3.0, "radius": 3.0}),
    ("temporal_query", {"last_n_minutes": 1}),
    ("locate", {"concept": "fire extinguisher"}),
    ("recall", {"query": "laptop on the desk"}),
    ("get_current_context", {}),
    ("semantic_search", {"query": "a person near the door", "time_after": "-1m"}),
    ("body_status", {}),
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def open_memory(folder: Path, provider, **overrides: Any) -> Any:
    from emem_ros import Memory, MemoryConfig

    settings: dict[str, Any] = {"query_cache_enabled": False, "consolidation_window": 5.0,
                                "archive_after_seconds": 0.0, "index_save_interval": 0.0}
    settings.update(overrides)
    config = MemoryConfig(db_path=str(folder / "memory.db"), **settings)
    return Memory(config=config, embedding_provider=provider)


class Writers(LoadThreads):
    """Three threads adding the stream's rows (stamped by the memory's clock) until told to stop."""

    def __init__(self, memory, rows: list[tuple], threads: int = 3) -> None:
        self.memory = memory
        self.rows = rows
        self.stop = threading.Event()
        self.added = [0] * threads
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, index: int) -> None:
        add = self.memory.add
        n = 0
        for text, x, y, z, _stamp, layer, source, conf, _value, meta in itertools.cycle(self.rows[index::3]):
            if self.stop.is_set():
                break
            if source == "interoception":
                continue
            add(text, x, y, z, None, layer, source, conf, meta)
            n += 1
            if n % 256 == 0:
                self.added[index] = n
        self.added[index] = n


class Maintenance:
    """Consolidation (entities, gists) and archival in a loop, as a node's timers would run them."""

    def __init__(self, memory) -> None:
        self.memory = memory
        self.stop = threading.Event()
        self.runs = 0
        self.reports: list[Any] = []
        """Every finished run's MaintenanceReport (the one running when the phase ends included)."""
        self.child_rss_mb = 0.0
        self.rss_mb = 0.0
        """The largest resident size of this (serving) process at the end of a run."""
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.reports.append(self.memory.maintenance(timeout=60))
                self.runs += 1
                self.child_rss_mb = max(self.child_rss_mb, child_rss_mb(self.memory))
                self.rss_mb = max(self.rss_mb, rss_mb(os.getpid()))
            except Exception as exc:  # reported, not fatal: the bench measures the questions
                print(f"maintenance failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            self.stop.wait(0.2)

    def __enter__(self) -> "Maintenance":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def child_rss_mb(memory) -> float:
    """Resident MB of the maintenance process (0 without one: in-process maintenance)."""
    offload = getattr(getattr(memory, "_consolidation", None), "offload", None)
    pid = getattr(offload, "pid", None)
    return 0.0 if pid is None else rss_mb(pid)


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def describe_runs(reports: list[Any]) -> str:
    """Seconds per maintenance run: total (entities + time window + archive)."""
    if not reports:
        return "none finished"
    return "; ".join(f"{r.seconds:.2f} s ({r.entities.seconds:.2f} + {r.consolidation.seconds:.2f} +"
                     f" {r.archive.seconds:.2f}, {r.archive.observations} archived)" for r in reports)


def ask(memory, seconds: float, interval: float) -> list[float]:
    """Tool latencies (ms) over ``seconds``, one question every ``interval`` s, cycling through CALLS."""
    latencies = []
    end = time.perf_counter() + seconds
    for name, args in itertools.cycle(CALLS):
        started = time.perf_counter()
        if started > end:
            break
        answer = str(getattr(memory, name)(**args))
        took = time.perf_counter() - started
        if answer.startswith("Error"):
            raise RuntimeError(f"{name}{args}: {answer}")
        latencies.append(took * 1000)
        time.sleep(max(0.0, interval - took))
    return latencies


def stored(memory) -> int:
    return int(memory.stats["observations_written"])


def phase(memory, label: str, seconds: float, interval: float, writers: Callable[[], Any] | None,
          maintenance: bool, questions: bool = True) -> dict[str, Any]:
    memory.flush()
    before = stored(memory)
    memory.store.write_lock.reset()
    wal = WalSize(Path(str(memory.store.path) + "-wal"))
    collections = Collections()
    started = time.perf_counter()
    latencies: list[float] = []
    runs = 0
    reports: list[Any] = []
    child_mb = own_mb = 0.0
    if writers is None:
        latencies = ask(memory, seconds, interval)
    else:
        with writers() as w:
            if maintenance:
                with Maintenance(memory) as m:
                    latencies = ask(memory, seconds, interval) if questions else _sleep(seconds)
                    runs = m.runs
                reports, child_mb, own_mb = m.reports, m.child_rss_mb, m.rss_mb
            else:
                latencies = ask(memory, seconds, interval) if questions else _sleep(seconds)
        added = sum(w.added)
    elapsed = time.perf_counter() - started
    wal.stop()
    gc_passes = collections.stop()
    written = stored(memory) - before
    row: dict[str, Any] = {"phase": label, "questions": len(latencies), "seconds": elapsed,
                           "stored_per_s": written / elapsed, "maintenance_runs": runs,
                           "maintenance": describe_runs(reports) if maintenance else "", "child_mb": child_mb, "own_mb": own_mb}
    if writers is not None:
        row["added_per_s"] = added / elapsed
    row["wal_mb"] = wal.largest / 1e6
    row["gc"] = gc_passes
    lock = memory.store.write_lock.stats()
    row["holds"] = sorted(((h["max_ms"], h["p99_ms"], h["count"], label) for label, h in lock["holds"].items()),
                          reverse=True)[:4]
    row["waits"] = sorted(((h["max_ms"], h["p99_ms"], h["count"], label) for label, h in lock["waits"].items()),
                          reverse=True)[:3]
    if latencies:
        row.update(p50=statistics.median(latencies), p95=percentile(latencies, 95),
                   p99=percentile(latencies, 99), max=max(latencies))
    return row


class Collections:
    """Python's cyclic-GC passes during a phase (each one holds the interpreter lock: every thread waits)."""

    def __init__(self) -> None:
        self.passes: list[tuple[int, float]] = []  # (generation, ms)
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, stage: str, info: dict[str, Any]) -> None:
        if stage == "start":
            self._started = time.perf_counter()
        else:
            self.passes.append((int(info["generation"]), (time.perf_counter() - self._started) * 1000))

    def stop(self) -> str:
        gc.callbacks.remove(self._callback)
        parts = []
        for generation in (0, 1, 2):
            times = [ms for g, ms in self.passes if g == generation]
            if times:
                parts.append(f"gen{generation} {len(times)} x, {sum(times):.0f} ms, max {max(times):.0f}")
        return "; ".join(parts) or "none"


class WalSize:
    """The largest size of the WAL file during a phase (it grows while it cannot start over)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.largest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.largest = max(self.largest, self.path.stat().st_size)
            except OSError:
                pass
            if self._stop.wait(0.05):
                break

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _sleep(seconds: float) -> list[float]:
    time.sleep(seconds)
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--prefill", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between questions (default 0.05)")
    parser.add_argument("--archive-batch-size", type=int, default=None,
                        help="archive_batch_size (default: the memory's, 5000)")
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="sys.setswitchinterval for the run (Python's default 0.005 s): how long a thread that "
                             "holds the writer lock may wait for the GIL after each SQLite call")
    parser.add_argument("--in-process", action="store_true",
                        help="maintenance_process=False: maintenance reads and plans in the serving process")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    prefill = args.prefill or (5_000 if args.quick else 20_000)
    seconds = args.seconds or (4.0 if args.quick else 8.0)

    from emem_ros.embeddings.hashing import HashingEmbeddingProvider

    stream = make_stream(prefill + 60_000)
    provider = CachedProvider(HashingEmbeddingProvider())
    provider.precompute([a["query"] for _, a in CALLS if "query" in a] + [a["concept"] for _, a in CALLS
                                                                         if "concept" in a])
    rows = list(stream.rows())
    with tempfile.TemporaryDirectory() as tmp:
        overrides: dict[str, Any] = {} if args.archive_batch_size is None else {
            "archive_batch_size": args.archive_batch_size}
        if args.in_process:
            overrides["maintenance_process"] = False
        memory = open_memory(Path(tmp), provider, **overrides)
        try:
            now = time.time()
            shift = now - 600 - float(stream.stamp[prefill - 1])
            for text, x, y, z, stamp, layer, source, conf, value, meta in rows[:prefill]:
                if source == "interoception":
                    memory.add_body_state(text, layer, x, y, z, stamp + shift, metadata=meta, value=value)
                else:
                    memory.add(text, x, y, z, stamp + shift, layer, source, conf, meta)
            memory.flush()
            for name, call_args in CALLS:  # warm: the first call of a tool builds its catalogs
                getattr(memory, name)(**call_args)
            live = rows[prefill:]

            def writers() -> Writers:
                return Writers(memory, live)

            results = [
                phase(memory, "quiet", seconds, args.interval, None, False),
                phase(memory, "writers", seconds, args.interval, writers, False),
                phase(memory, "writers+maintenance", seconds, args.interval, writers, True),
                phase(memory, "writers only (no questions)", seconds, args.interval, writers, False, False),
            ]
        finally:
            memory.close()
    print(f"prefill {prefill} observations, {seconds:g} s per phase, a question every {args.interval * 1000:g} ms"
          + (f", archive_batch_size {args.archive_batch_size}" if args.archive_batch_size else "")
          + (f", switch interval {args.switch_interval:g} s" if args.switch_interval is not None else "") + ";"
          f" load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} on {os.cpu_count()} cores")
    print(f"{'phase':30s} {'questions':>9s} {'p50 ms':>8s} {'p95 ms':>8s} {'p99 ms':>8s} {'max ms':>8s}"
          f" {'added/s':>9s} {'stored/s':>9s} {'maint.':>6s}")
    for r in results:
        lat = (f"{r['p50']:8.1f} {r['p95']:8.1f} {r['p99']:8.1f} {r['max']:8.1f}" if "p50" in r
               else f"{'-':>8s} {'-':>8s} {'-':>8s} {'-':>8s}")
        print(f"{r['phase']:30s} {r['questions']:9d} {lat} {r.get('added_per_s', 0):9.0f} {r['stored_per_s']:9.0f}"
              f" {r['maintenance_runs']:6d}")
    for r in results:
        if r["maintenance"]:
            print(f"maintenance runs in '{r['phase']}' (the last one finishing after the phase):"
                  f" {r['maintenance']}; serving process RSS {r['own_mb']:.0f} MB"
                  + (f", maintenance process {r['child_mb']:.0f} MB" if r["child_mb"] else ""))
    print("longest writer-lock holds per phase (caller: max / p99 ms, holds):")
    for r in results:
        print(f"  {r['phase']:28s} "
              + "; ".join(f"{label} {mx:.0f}/{p99:.0f} ({n})" for mx, p99, n, label in r["holds"]))
    print("largest WAL file per phase (MB): " + "; ".join(f"{r['phase']} {r['wal_mb']:.1f}" for r in results))
    print("garbage-collector passes per phase (generation: count, total, longest ms):")
    for r in results:
        print(f"  {r['phase']:28s} {r['gc']}")
    print("longest waits for the writer lock per phase (waiter: max / p99 ms, waits):")
    for r in results:
        print(f"  {r['phase']:28s} "
              + "; ".join(f"{label} {mx:.0f}/{p99:.0f} ({n})" for mx, p99, n, label in r["waits"]))


if __name__ == "__main__":
    main()
