#!/usr/bin/env python3
"""Forget: time to forget 1 and 10,000 observations from a large memory, the log rewrite, the lock.

The peer ``emem`` cannot forget (nothing to compare with): figures are absolute.
A memory of N observations (default 1M; ``--n``) is built with the hashing
embedder: detections repeating 20k distinct labels at random positions, one
scene description in 100 naming a person ("a man in a red jacket near shelf
K", ~10k of them). Then, with a thread that keeps ingesting (one observation
every 10 ms, flushed) and one that keeps asking (semantic_search and locate)
while forget runs, it measures:

- forget 1 observation by id, then ~1,000 by ``match="red jacket"`` (every
  person description: texts, places, FTS, vectors go), then 10,000
  consecutive by ids (texts stay: other observations use them), then 10,000
  spread over the memory by ids (thousands of gists re-summarised);
  ``--cases`` picks some (``--reuse``: the words case is one common label
  within a time window holding ~1,000 of its sightings);
- per forget: wall time, the scrub steps (FTS merge, vector rebuild, log
  rewrite = base copy + segment restart, WAL truncate), the longest writer
  lock a forget step held, and the slowest ingest flush and question seen
  meanwhile (what "never blocks more than 100 ms" is about).

    python bench/bench_forget.py              # 1M observations (build takes minutes)
    python bench/bench_forget.py --n 100000   # smaller
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from load_threads import LoadThreads  # noqa: E402

from emem_ros import Memory, MemoryConfig  # noqa: E402
from emem_ros.embeddings import HashingEmbeddingProvider  # noqa: E402

LABELS = 20_000
CASES = ("one", "consecutive", "spread", "words")
CHUNK = 20_000

Selector = tuple[str, Optional[str], Callable[[list[tuple[Any, ...]]], dict[str, Any]]]
"""A case's label, the SQL picking its rows (None: none needed) and the forget's criteria from those rows."""


def _by_ids(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    return {"ids": [f"obs-{r[0]}" for r in rows]}


SELECTORS: dict[str, dict[str, Selector]] = {
    # A memory built here (``build``); the cases run in this order.
    "built": {
        "one": ("1 by id", "SELECT id FROM observations WHERE id % 97 = 3 LIMIT 1", _by_ids),
        "words": ("~1k by match 'red jacket'", None, lambda rows: {"match": "red jacket"}),
        "consecutive": ("10k consecutive by ids", "SELECT id FROM observations WHERE layer='detections'"
                        " ORDER BY id LIMIT 10000 OFFSET 1000", _by_ids),
        "spread": ("10k spread by ids (id % 9 = 4)",
                   "SELECT id FROM observations WHERE id % 9 = 4 ORDER BY id LIMIT 10000", _by_ids),
    },
    # A copy of a bench_tools memory (``--reuse``); the cases run in this order.
    "reused": {
        "one": ("1 by id", "SELECT id FROM observations WHERE id % 97 = 3 AND text_id IS NOT NULL LIMIT 1",
                _by_ids),
        # 10,000 consecutive observations (a stretch of the robot's day; ~35 gists re-summarised).
        "consecutive": ("10k consecutive by ids", "SELECT id FROM observations ORDER BY id LIMIT 10000 OFFSET 500000",
                        _by_ids),
        # 10,000 spread over the whole memory: thousands of gists touched, each re-summarised.
        "spread": ("10k spread by ids (id % 97 = 5)",
                   "SELECT id FROM observations WHERE id % 97 = 5 ORDER BY id LIMIT 10000", _by_ids),
        # ~1,000 by words: one common label within a time window holding about 1,000 of its sightings.
        "words": ("~1k by words 'drawer' in a time window",
                  "SELECT o.stamp FROM observations o JOIN texts t ON t.id = o.text_id WHERE t.text = 'drawer'"
                  " ORDER BY o.stamp LIMIT 1000 OFFSET 10000",
                  lambda rows: {"match": "drawer", "since": rows[0][0], "until": rows[-1][0]}),
    },
}


def build(db: Path, n: int, clock: list[float]) -> Memory:
    config = MemoryConfig(db_path=str(db), flush_interval=0.0, index_save_interval=0.0,
                          working_memory_size=CHUNK * 2, flush_batch_size=CHUNK, hnsw_max_elements=LABELS * 2)
    memory = Memory(config=config, embedding_provider=HashingEmbeddingProvider(), get_current_time=lambda: clock[0])
    rng = random.Random(7)
    t0 = clock[0] - n * 0.01
    started = time.perf_counter()
    for i in range(n):
        if i % 100 == 50:
            text, layer = f"a man in a red jacket near shelf {i // 100}", "scene"
        else:
            text, layer = f"object {rng.randrange(LABELS)}", "detections"
        memory.add(text, x=rng.uniform(0, 100), y=rng.uniform(0, 100), timestamp=t0 + i * 0.01, layer_name=layer)
        if i % CHUNK == CHUNK - 1:
            memory.flush()
    memory.flush()
    memory.save()
    print(f"built {n} observations in {time.perf_counter() - started:.1f} s; "
          f"{sum(p.stat().st_size for p in db.parent.rglob('*') if p.is_file()) / 1e6:.0f} MB on disk", flush=True)
    return memory


class Load(LoadThreads):
    """Ingest and questions beside the forget; records the slowest of each."""

    def __init__(self, memory: Memory, clock: list[float]) -> None:
        self.memory, self.clock = memory, clock
        self.stop = threading.Event()
        self.worst_flush = 0.0
        self.worst_question = 0.0
        self.question_times: list[float] = []
        self.flushes = self.questions = 0
        self.threads = [threading.Thread(target=self._ingest), threading.Thread(target=self._ask)]

    def _ingest(self) -> None:
        k = 0
        while not self.stop.is_set():
            self.memory.add(f"object {k % LABELS}", x=1.0, y=2.0, timestamp=self.clock[0], layer_name="detections")
            began = time.perf_counter()
            self.memory.flush()
            self.worst_flush = max(self.worst_flush, time.perf_counter() - began)
            self.flushes += 1
            k += 1
            time.sleep(0.01)

    def _ask(self) -> None:
        k = 0
        while not self.stop.is_set():
            began = time.perf_counter()
            self.memory.tools.call("semantic_search", f"object {k % LABELS}", n_results=3)
            self.memory.tools.call("locate", f"object {(k * 7) % LABELS}")
            took = (time.perf_counter() - began) / 2
            self.question_times.append(took)
            self.worst_question = max(self.worst_question, took)
            self.questions += 1
            k += 1
            time.sleep(0.01)


def run_case(memory: Memory, clock: list[float], name: str, **criteria: object) -> None:
    memory.tools.warm()  # the catalog is built before, as on a node that has answered questions already
    memory.tools.call("semantic_search", "object 1", n_results=3)
    memory.tools.call("locate", "object 2")
    memory.store.write_lock.reset()
    with Load(memory, clock) as load:
        began = time.perf_counter()
        report = memory.forget(**criteria, reason="bench")
        wall = time.perf_counter() - began
    holds = memory.writer_lock_stats["holds"]
    top = sorted(((h["max_ms"], label) for label, h in holds.items()), reverse=True)[:3]
    steps = ", ".join(f"{k} {v:.2f}s" for k, v in report.step_seconds.items())
    print(f"{name}: forgot {report.observations} obs ({report.texts} texts) in {wall:.2f} s "
          f"[rows {report.seconds - report.scrub_seconds:.2f} s in {report.transactions} transactions; "
          f"scrub {report.scrub_seconds:.2f} s: {steps}]; longest writer lock {report.longest_lock * 1000:.0f} ms "
          f"({report.longest_lock_step}); meanwhile slowest flush {load.worst_flush * 1000:.0f} ms "
          f"({load.flushes} flushes), slowest question {load.worst_question * 1000:.0f} ms ({load.questions}; "
          f"p50 {_pct(load.question_times, 50):.1f} ms, over 100 ms: "
          f"{sum(1 for t in load.question_times if t > 0.1)}); "
          f"writer lock, longest holds by anyone: " + ", ".join(f"{label} {ms:.0f} ms" for ms, label in top)
          + f"; R-tree tombstones left {memory.store.places.tombstones}, compactions {memory.store.places.compactions}",
          flush=True)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000 if ordered else 0.0


def run_cases(memory: Memory, clock: list[float], memory_kind: str, cases: list[str]) -> None:
    """The chosen cases of ``SELECTORS[memory_kind]``, one after the other on the same memory."""
    reader = memory.store.reader()
    for case, (label, sql, criteria) in SELECTORS[memory_kind].items():
        if case not in cases:
            continue
        rows = reader.execute(sql).fetchall() if sql is not None else []
        if sql is not None and not rows:
            raise SystemExit(f"{case}: no observations to forget ({sql})")
        run_case(memory, clock, label, **criteria(rows))


def reuse(source: Path, args_cases: list[str]) -> None:
    """Forget from a copy of a bench_tools memory (an older schema opens with its migration)."""
    print(f"load before: {Path('/proc/loadavg').read_text().strip()}; cpus {os.cpu_count()}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / source.name
        began = time.perf_counter()
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.lock"))
        copied = time.perf_counter() - began
        clock = [time.time()]
        config = MemoryConfig(db_path=str(copy / "memory.db"), flush_interval=0.0, index_save_interval=0.0,
                              flush_batch_size=2048, working_memory_size=20_000)
        began = time.perf_counter()
        memory = Memory(config=config, embedding_provider=HashingEmbeddingProvider(),
                        get_current_time=lambda: clock[0])
        reader = memory.store.reader()
        total = reader.execute("SELECT COUNT(*) FROM observations").fetchone()[0]
        print(f"copied {source} in {copied:.1f} s, opened (with migration) in {time.perf_counter() - began:.1f} s;"
              f" {total} observations, {len(memory.store.places)} places", flush=True)
        try:
            run_cases(memory, clock, "reused", args_cases)
        finally:
            memory.close()
    print(f"load after: {Path('/proc/loadavg').read_text().strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--keep", default=None,
                        help="folder keeping a pristine copy of the built memory; reused when it holds one of --n")
    parser.add_argument("--build-only", action="store_true", help="with --keep: build the copy and stop")
    parser.add_argument("--reuse", default=None,
                        help="a memory folder built by bench_tools.py --reuse (memory.db): copied, then forget "
                             "1 and 10,000 observations by id from the copy (the folder is never modified)")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES,
                        help="which forgets to run (in SELECTORS' order for the memory)")
    args = parser.parse_args()
    if args.reuse:
        reuse(Path(args.reuse), args.cases)
        return
    print(f"load before: {Path('/proc/loadavg').read_text().strip() if Path('/proc/loadavg').exists() else '?'}; "
          f"cpus {os.cpu_count()}", flush=True)
    clock = [1_763_800_000.0]
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "bench.db"
        kept = Path(args.keep) / f"bench-{args.n}.db" if args.keep else None
        if kept is not None and kept.exists():
            shutil.copyfile(kept, db)
            shutil.copytree(kept.with_name(kept.name + ".log"), db.with_name(db.name + ".log"))
            config = MemoryConfig(db_path=str(db), flush_interval=0.0, index_save_interval=0.0,
                                  hnsw_max_elements=LABELS * 2)
            memory = Memory(config=config, embedding_provider=HashingEmbeddingProvider(),
                            get_current_time=lambda: clock[0])
            print(f"reused {kept}", flush=True)
        else:
            memory = build(db, args.n, clock)
            if args.build_only:
                memory.close()
                if kept is not None:
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(db, kept)
                    shutil.copytree(db.with_name(db.name + ".log"), kept.with_name(kept.name + ".log"))
                return
            if kept is not None:
                memory.close()
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(db, kept)
                shutil.rmtree(kept.with_name(kept.name + ".log"), ignore_errors=True)
                shutil.copytree(db.with_name(db.name + ".log"), kept.with_name(kept.name + ".log"))
                memory = Memory(config=MemoryConfig(db_path=str(db), flush_interval=0.0, index_save_interval=0.0,
                                                    hnsw_max_elements=LABELS * 2),
                                embedding_provider=HashingEmbeddingProvider(), get_current_time=lambda: clock[0])
        try:
            run_cases(memory, clock, "built", args.cases)
        finally:
            memory.close()
    print(f"load after: {Path('/proc/loadavg').read_text().strip() if Path('/proc/loadavg').exists() else '?'}")


if __name__ == "__main__":
    main()
