#!/usr/bin/env python3
"""MemFS: fs_search at 10,000 files / 100,000 chunks, the cost of a write and its split, undo vs history size.

All with the deterministic ``HashingEmbeddingProvider`` (the issue's setting):

Wall-clock figures move with the machine's load; the CPU time of the calling thread
(``time.thread_time``) is printed beside them as the figure that does not.

1. search: 10k files of ~10 chunks each (written as system operations of
   200 files, which is how an import writes them); p50/p95 of
   ``session.search`` (hybrid, keyword, meaning; from '/' and from one
   folder) and of the ``fs_search`` tool answering text, over distinct queries.
2. write: a 200-line file written new (every chunk embedded), rewritten with
   one line changed (one chunk re-embedded), and rewritten with every line
   changed; total time and the part spent embedding.
3. undo: write + undo of a file whose history holds 10, 100, 1000 versions.

    python bench/bench_memfs.py            # full (10k files; a few minutes)
    python bench/bench_memfs.py --quick    # 1k files
    python bench/bench_memfs.py --save     # also to bench/results/
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from engines import machine_info, save_results  # noqa: E402

from emem_ros import Memory, MemoryConfig  # noqa: E402
from emem_ros.embeddings import HashingEmbeddingProvider  # noqa: E402
from emem_ros.memfs.records import Change  # noqa: E402

ROOMS = ["kitchen", "garage", "hall", "office", "lab", "bedroom", "porch", "cellar", "attic", "lobby"]
THINGS = ["door", "charger", "mug", "chair", "lamp", "window", "shelf", "sofa", "table", "plant", "box", "cable"]
VERBS = ["sticks", "is behind", "blocks", "opens", "is near", "faces", "leans on", "hides", "needs", "holds"]


class TimedEmbedder(HashingEmbeddingProvider):
    """The hashing embedder, counting the time spent in it."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0
        self.texts = 0

    def embed(self, texts):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return super().embed(texts)
        finally:
            self.seconds += time.perf_counter() - started
            self.texts += len(texts)


def sentence(rng: random.Random) -> str:
    return (f"The {rng.choice(THINGS)} in the {rng.choice(ROOMS)} {rng.choice(VERBS)} the {rng.choice(THINGS)}"
            f" number {rng.randint(0, 9999)}, checked on round {rng.randint(0, 500)}.")


def document(rng: random.Random, chunks: int = 10, lines: int = 5) -> str:
    return "\n\n".join("\n".join(sentence(rng) for _ in range(lines)) for _ in range(chunks))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fill(memory: Memory, files: int, rng: random.Random) -> float:
    fs = memory.fs
    started = time.perf_counter()
    batch: list[Change] = []
    contents: dict[str, str] = {}
    made: set[str] = set()
    for n in range(files):
        folder = f"/memory/d{n % 100}"
        if folder not in made:
            batch.append(Change(folder, fs.dir_state(folder, "bench")))
            made.add(folder)
        path = f"{folder}/note-{n}.md"
        text = document(rng)
        contents[path] = text
        batch.append(Change(path, fs.file_state(path, text, "bench", {
            "description": f"notes on the {ROOMS[n % len(ROOMS)]} {THINGS[n % len(THINGS)]}"})))
        if len(batch) >= 200:
            fs.commit(None, "import", "/memory", batch, contents=contents)
            batch, contents = [], {}
    if batch:
        fs.commit(None, "import", "/memory", batch, contents=contents)
    return time.perf_counter() - started


def bench_search(memory: Memory, rng: random.Random, queries: int) -> list[str]:
    session = memory.fs.session("bench")
    asks = [f"{rng.choice(THINGS)} {rng.choice(VERBS)} in the {rng.choice(ROOMS)} {rng.randint(0, 9999)}"
            for _ in range(queries)]
    lines = []
    for label, run in (
            ("hybrid from /", lambda q: session.search(q, "/")),
            ("keyword from /", lambda q: session.search(q, "/", mode="keyword")),
            ("meaning from /", lambda q: session.search(q, "/", mode="meaning")),
            ("hybrid from /memory/d7", lambda q: session.search(q, "/memory/d7")),
            ("fs_search tool (text)", lambda q: memory.dispatch_tool_call("fs_search", {"query": q}))):
        for q in asks[:10]:
            run(q)  # warm the caches and connections
        times, cpu = [], []
        for q in asks:
            started, started_cpu = time.perf_counter(), time.thread_time()
            run(q)
            cpu.append((time.thread_time() - started_cpu) * 1000)
            times.append((time.perf_counter() - started) * 1000)
        lines.append(f"  {label:<26} p50 {statistics.median(times):6.2f} ms   p95 {pct(times, 0.95):6.2f} ms"
                     f"   (CPU p50 {statistics.median(cpu):5.2f} ms)")
    return lines


def bench_write(memory: Memory, embedder: TimedEmbedder, rng: random.Random) -> list[str]:
    session = memory.fs.session("writer")
    paragraphs = ["\n".join(sentence(rng) for _ in range(5)) for _ in range(40)]  # 200 lines, ~40 chunks
    lines = []

    index = memory.store.vectors["fs_chunks"]
    inserting = [0.0]
    plain_add = index.add

    def timed_add(*args, **kwargs):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return plain_add(*args, **kwargs)
        finally:
            inserting[0] += time.perf_counter() - started

    index.add = timed_add  # type: ignore[method-assign]

    def timed(label: str, text: str, path: str) -> None:
        embedder.seconds = 0.0
        inserting[0] = 0.0
        started = time.perf_counter()
        result = session.write(path, text)
        total = (time.perf_counter() - started) * 1000
        embed = embedder.seconds * 1000
        graph = inserting[0] * 1000
        lines.append(f"  {label:<28} {total:6.1f} ms: embedding {embed:5.1f} ({embed / total:3.0%}), vector index"
                     f" {graph:5.1f} ({graph / total:3.0%}), SQLite+log+rest {total - embed - graph:5.1f};"
                     f" {result.embedded:2d} chunks embedded, {result.reused:2d} reused")

    for run in range(3):
        path = f"/memory/w/two-hundred-{run}.md"
        text = "\n\n".join(paragraphs)
        timed("new 200-line file" if run == 0 else f"new 200-line file (run {run + 1})", text, path)
        changed = list(paragraphs)
        changed[17] = changed[17].replace("checked", "re-checked", 1)
        timed("  one line changed", "\n\n".join(changed), path)
        fresh = ["\n".join(sentence(rng) for _ in range(5)) for _ in range(40)]
        timed("  every line changed", "\n\n".join(fresh), path)
        paragraphs = ["\n".join(sentence(rng) for _ in range(5)) for _ in range(40)]
    return lines


def bench_undo(memory: Memory, rng: random.Random, sizes: list[int]) -> list[str]:
    session = memory.fs.session("undoer")
    lines = []
    for size in sizes:
        path = f"/memory/u/history-{size}.md"
        for n in range(size):
            session.write(path, f"version {n}\n{sentence(rng)}\n")
        times, cpu = [], []
        for _ in range(20):
            session.write(path, f"one more\n{sentence(rng)}\n")
            started, started_cpu = time.perf_counter(), time.thread_time()
            session.undo()
            cpu.append((time.thread_time() - started_cpu) * 1000)
            times.append((time.perf_counter() - started) * 1000)
        lines.append(f"  history of {size:5d} versions: undo p50 {statistics.median(times):6.2f} ms"
                     f" (CPU p50 {statistics.median(cpu):5.2f} ms)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="1,000 files, 100 queries")
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    files = 1000 if args.quick else args.files
    queries = 100 if args.quick else args.queries
    rng = random.Random(7)
    out = [f"MemFS benchmark — {machine_info()}", ""]
    with tempfile.TemporaryDirectory() as folder:
        embedder = TimedEmbedder()
        memory = Memory(config=MemoryConfig(db_path=str(Path(folder) / "fs.db"), flush_interval=0.0,
                                            index_save_interval=0.0), embedding_provider=embedder)
        try:
            seconds = fill(memory, files, rng)
            conn = memory.store.reader()
            nodes = conn.execute("SELECT COUNT(*) FROM fs_nodes WHERE kind = 'file'").fetchone()[0]
            chunks = conn.execute("SELECT COUNT(*) FROM fs_chunks").fetchone()[0]
            out.append(f"fill: {nodes} files, {chunks} chunks in {seconds:.1f} s"
                       f" ({embedder.seconds:.1f} s embedding {embedder.texts} texts)")
            out.append(f"search ({queries} distinct queries, 10 hits):")
            out += bench_search(memory, rng, queries)
            out.append("write of a 200-line file (hashing embedder):")
            out += bench_write(memory, embedder, rng)
            out.append("undo (write + undo of one file, 20 times):")
            out += bench_undo(memory, rng, [10, 100, 1000] if not args.quick else [10, 100, 300])
        finally:
            memory.close()
    print("\n".join(out))
    if args.save:
        save_results("memfs", out, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
