"""Experience ledger beside the peer ``emk`` 1.0.0, in one run.

For each size (1k, 10k, 100k records) both sides get the same deterministic
records (goal, action, result, reflection, success, tags) and are timed on:

- **creation**: latency per record (p50/p95) and sustained throughput.
  Ours is durable when the call returns (in the operation log, flushed to the
  OS) and the throughput includes applying the records to SQLite. emk is
  timed twice: ``Episode(...)`` alone (its in-memory creation: the issue's
  target) and ``FileAdapter.store(Episode(...))`` (its file append);
- **retrieval by id**, **by filter** (failures with a tag, newest 10) and **by
  meaning** (top 10 for a query). emk's FileAdapter re-reads its JSONL file on
  every call and ignores ``query_embedding`` (it returns the newest records),
  so it has no retrieval by meaning: the table says n/a, and gives an exact
  numpy search over the same vectors as a reference instead.

The same deterministic embedder (HashingEmbeddingProvider) serves both sides;
vector indexing of our records (background work in a running memory) is
reported on its own line. Targets (issue 6): creation at least as fast as
emk's in-memory episode creation, and durable; by meaning at 100k < 5 ms.

    python bench/bench_ledger.py            # 1k, 10k, 100k
    python bench/bench_ledger.py --quick    # 1k, 10k, fewer queries (make bench)
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emem_ros import Memory, MemoryConfig  # noqa: E402
from emem_ros.embeddings import HashingEmbeddingProvider  # noqa: E402

ROOMS = ["kitchen", "living room", "office", "bedroom", "hallway", "bathroom", "garage", "lab"]
OBJECTS = ["red mug", "keys", "laptop", "charger", "book", "towel", "bottle", "plant", "remote", "box"]
VERBS = ["fetch", "bring", "find", "put away", "check", "clean"]
OUTCOMES_OK = ["picked it up and delivered it", "found it on the shelf", "done in one try", "delivered to the user"]
OUTCOMES_BAD = ["door was closed", "object not found", "grasp slipped twice", "path blocked by a chair"]
LESSONS = ["the {room} door is often closed", "look on the table first", "approach the {obj} from the left",
           "ask a person when the path is blocked", "the {obj} is usually near the window"]
QUERIES = ["the kitchen door was closed", "where are the keys", "grasp slipped on the red mug",
           "charger in the office", "path blocked in the hallway", "find the remote in the living room"]


@dataclass
class Spec:
    goal: str
    action: str
    result: str
    reflection: str
    success: bool
    tags: list[str]
    stamp: float


def records(n: int, seed: int = 1) -> list[Spec]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        room, obj, verb = rng.choice(ROOMS), rng.choice(OBJECTS), rng.choice(VERBS)
        ok = rng.random() < 0.7
        out.append(Spec(
            goal=f"{verb} the {obj} in the {room} (task {i})",
            action=f"drove to the {room}, searched for the {obj}, tried to grasp it",
            result=rng.choice(OUTCOMES_OK if ok else OUTCOMES_BAD),
            reflection=rng.choice(LESSONS).format(room=room, obj=obj),
            success=ok, tags=sorted({room.split()[0], verb.split()[0]}), stamp=1_700_000_000.0 + i,
        ))
    return out


@dataclass
class Timing:
    samples: list[float] = field(default_factory=list)
    total: float = 0.0

    def p(self, q: float) -> float:
        return float(np.percentile(self.samples, q)) if self.samples else float("nan")


def time_each(items, fn: Callable, budget: Optional[float] = None) -> Timing:
    """Time ``fn(item)`` per item; stop early once ``budget`` seconds are spent."""
    timing = Timing()
    clock = time.perf_counter
    started = clock()
    for item in items:
        t0 = clock()
        fn(item)
        timing.samples.append(clock() - t0)
        if budget is not None and clock() - started > budget:
            break
    timing.total = clock() - started
    return timing


# ---------------------------------------------------------------------- ours
def bench_ours(data: list[Spec], queries: int, folder: Path) -> dict:
    memory = Memory(config=MemoryConfig(db_path=str(folder / "ledger.db"), flush_interval=0.0,
                                        index_save_interval=0.0, hnsw_max_elements=max(1024, len(data))),
                    embedding_provider=HashingEmbeddingProvider(), get_current_time=lambda: 1_800_000_000.0)
    ledger = memory.ledger
    record = ledger.record
    ids: list[str] = []
    gc.disable()
    create = time_each(data, lambda s: ids.append(record(s.goal, s.action, s.result, s.reflection, s.success,
                                                         tags=s.tags, timestamp=s.stamp)))
    t0 = time.perf_counter()
    assert ledger.count() == len(data)  # reading applies the log tail to SQLite: part of the cost
    create.total += time.perf_counter() - t0
    gc.enable()
    t0 = time.perf_counter()
    ledger.embed_pending()
    embed_seconds = time.perf_counter() - t0
    rng = random.Random(5)
    by_id = time_each([rng.choice(ids) for _ in range(queries)], ledger.get)
    by_filter = time_each(range(queries), lambda i: ledger.find(success=False, tags=[ROOMS[i % len(ROOMS)].split()[0]],
                                                               n_results=10))
    by_meaning = time_each([QUERIES[i % len(QUERIES)] for i in range(queries)],
                           lambda q: ledger.find(q, n_results=10))
    top = ledger.find(QUERIES[0], n_results=3)
    log_bytes = memory.store.oplog.size_bytes()
    memory.close()
    db_bytes = sum(p.stat().st_size for p in folder.glob("ledger.db*") if p.is_file())
    return {"create": create, "by_id": by_id, "by_filter": by_filter, "by_meaning": by_meaning,
            "embed_seconds": embed_seconds, "top": [e.goal for e, _ in top], "log_bytes": log_bytes,
            "db_bytes": db_bytes}


# ---------------------------------------------------------------------- emk
def bench_emk(data: list[Spec], queries: int, folder: Path, budget: float) -> dict:
    from emk import Episode, FileAdapter

    def episode(s: Spec) -> "Episode":
        return Episode(goal=s.goal, action=s.action, result=s.result, reflection=s.reflection,
                       metadata={"success": s.success, "is_failure": not s.success, "tags": s.tags})

    gc.disable()
    in_memory = time_each(data, episode)
    store = FileAdapter(str(folder / "episodes.jsonl"))
    ids: list[str] = []
    durable = time_each(data, lambda s: ids.append(store.store(episode(s))))
    gc.enable()
    rng = random.Random(5)
    by_id = time_each([rng.choice(ids) for _ in range(queries)], store.get_by_id, budget)
    by_filter = time_each(range(queries), lambda i: store.retrieve_failures(limit=10), budget)
    provider = HashingEmbeddingProvider()
    query_vectors = provider.embed(QUERIES)
    unranked = time_each(range(min(queries, 5)),
                         lambda i: store.retrieve(query_embedding=query_vectors[i % len(QUERIES)], limit=10), budget)
    # Reference for an exact search, not emk: numpy over the same vectors, already in memory.
    matrix = provider.embed([f"{s.goal} {s.action} {s.result} {s.reflection}" for s in data])
    exact = time_each(range(queries), lambda i: np.argpartition(-(matrix @ query_vectors[i % len(QUERIES)]), 10)[:10])
    return {"in_memory": in_memory, "durable": durable, "by_id": by_id, "by_filter": by_filter,
            "unranked": unranked, "exact_numpy": exact, "file_bytes": (folder / "episodes.jsonl").stat().st_size}


# ---------------------------------------------------------------------- report
def us(seconds: float) -> str:
    if seconds != seconds:
        return "n/a"
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def ratio(theirs: float, ours: float) -> str:
    if theirs != theirs or ours != ours or ours <= 0:
        return "n/a"
    return f"{theirs / ours:.1f}x"


def table(n: int, ours: dict, emk: dict) -> list[str]:
    rows = []

    def row(name: str, ours_value: float, emk_value: float, emk_note: str = "") -> None:
        rows.append(f"| {n:>7,} | {name:<34} | {us(ours_value):>10} | {us(emk_value):>10}{emk_note:<1} "
                    f"| {ratio(emk_value, ours_value):>7} |")

    c = ours["create"]
    rate = len(c.samples) / c.total
    row("create p50 (emk: Episode in memory)", c.p(50), emk["in_memory"].p(50))
    row("create p95 (emk: Episode in memory)", c.p(95), emk["in_memory"].p(95))
    row("create p50 (emk: FileAdapter.store)", c.p(50), emk["durable"].p(50))
    row("create p95 (emk: FileAdapter.store)", c.p(95), emk["durable"].p(95))
    rows.append(f"| {n:>7,} | {'throughput, records/s (emk: memory)':<34} | {rate:>10,.0f} | "
                f"{len(emk['in_memory'].samples) / emk['in_memory'].total:>10,.0f} | "
                f"{rate / (len(emk['in_memory'].samples) / emk['in_memory'].total):>6.2f}x |")
    rows.append(f"| {n:>7,} | {'throughput, records/s (emk: file)':<34} | {rate:>10,.0f} | "
                f"{len(emk['durable'].samples) / emk['durable'].total:>10,.0f} | "
                f"{rate / (len(emk['durable'].samples) / emk['durable'].total):>6.2f}x |")
    row("by id p50", ours["by_id"].p(50), emk["by_id"].p(50))
    row("by filter p50", ours["by_filter"].p(50), emk["by_filter"].p(50))
    row("by meaning p50", ours["by_meaning"].p(50), float("nan"))
    row("by meaning p95", ours["by_meaning"].p(95), float("nan"))
    rows.append(f"| {n:>7,} | {'  emk retrieve(query_embedding) *':<34} | {'':>10} | "
                f"{us(emk['unranked'].p(50)):>10} | {'':>7} |")
    rows.append(f"| {n:>7,} | {'  exact numpy top-10 (reference)':<34} | {'':>10} | "
                f"{us(emk['exact_numpy'].p(50)):>10} | {'':>7} |")
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1k and 10k records, fewer queries")
    parser.add_argument("--sizes", type=int, nargs="*", help="record counts (default 1000 10000 100000)")
    args = parser.parse_args(argv)
    try:
        import emk  # noqa: F401
    except ImportError:
        print("bench_ledger: the peer 'emk' is not installed (pip install -e '.[bench]')", file=sys.stderr)
        return 2
    sizes = args.sizes or ([1000, 10000] if args.quick else [1000, 10000, 100000])
    queries = 100 if args.quick else 300
    budget = 3.0 if args.quick else 15.0
    lines = ["| records | metric                             |       ours |        emk |   ratio |",
             "|--------:|:-----------------------------------|-----------:|-----------:|--------:|"]
    notes = []
    met = {}
    for n in sizes:
        data = records(n)
        folder = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
        try:
            ours = bench_ours(data, queries, folder)
            emk_figures = bench_emk(data, queries, folder, budget)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        lines += table(n, ours, emk_figures)
        notes.append(f"{n:>7,} records: our vector indexing {ours['embed_seconds']:.2f} s (background in a running "
                     f"memory); disk: ours {ours['db_bytes'] / n:.0f} B/record SQLite + {ours['log_bytes'] / n:.0f} "
                     f"B/record log, emk {emk_figures['file_bytes'] / n:.0f} B/record JSONL; "
                     f"emk queries timed: by id {len(emk_figures['by_id'].samples)}, by filter "
                     f"{len(emk_figures['by_filter'].samples)}")
        met[n] = (ours["create"].p(50) <= emk_figures["in_memory"].p(50), ours["by_meaning"].p(50))
        print(f"[{n:,} done]", file=sys.stderr, flush=True)
    print("\n".join(lines))
    print("\nratio = emk / ours (above 1: ours is faster); throughput ratio = ours / emk.")
    print("* emk's FileAdapter ignores query_embedding and returns the newest records: no retrieval by meaning.")
    print("\n".join(notes))
    for n, (create_ok, meaning) in met.items():
        print(f"targets at {n:,}: creation p50 <= emk in-memory: {'yes' if create_ok else 'NO'}; "
              f"by meaning p50 {us(meaning)}" + (f" ({'< 5 ms: yes' if meaning < 5e-3 else '>= 5 ms: NO'})"
                                                  if n >= 100000 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
