#!/usr/bin/env python3
"""Time-window consolidation: emem_ros vs the peer ``emem`` 0.3.0, one run, same data, same embedder.

The stream is the multi-room patrol of ``test/support.patrol.py``
(six rooms, 2-D and 3-D detections, scene texts, battery readings, docking
gaps) with its ground truth: the number of room visits. Both memories get the
same deterministic ``HashingEmbeddingProvider`` and no LLM. Ingestion is not
timed; what is timed is consolidating everything once it is older than the
consolidation window (emem: ``consolidate_time_window()``, which also runs
its entity extraction; emem_ros: ``consolidate_time_window()`` plus
``extract_entities()``).

emem's DBSCAN over a continuous path costs O(neighbours), which grows with
the square of the observation density (and its neighbour lists take GBs:
~7 GB of RAM at 55k on this floor plan). ``--emem-n`` runs it on a prefix
and extrapolates *linearly* to ``--n`` — which flatters emem — and the
output labels that figure as extrapolated. By default both run in full.

    python bench/bench_consolidation.py                 # 55k, both in full (~1-2 minutes)
    python bench/bench_consolidation.py --emem-n 10000  # emem on a 10k prefix, extrapolated
    python bench/bench_consolidation.py --quick         # 5k each, seconds
    python bench/bench_consolidation.py --repeat 5 --save  # ours 5 times (median shown), to bench/results/
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from engines import machine_info, save_results  # noqa: E402

from emem_ros import Memory, MemoryConfig  # noqa: E402
from emem_ros.embeddings import HashingEmbeddingProvider  # noqa: E402
from test.support.patrol import PatrolInfo, multi_room_patrol  # noqa: E402

Row = tuple[Any, ...]  # (text, x, y, z, stamp, layer, source, conf, meta, value)


@dataclass
class Result:
    name: str
    observations: int
    visits: int
    seconds: float
    gists: int
    entities: int
    detail: str = ""
    extrapolated_seconds: Optional[float] = None
    gist_seconds: Optional[float] = None
    matched_visits: Optional[int] = None


def build_stream(n: int, seed: int) -> tuple[list[Row], PatrolInfo]:
    rows: list[Row] = []
    info = multi_room_patrol(lambda *args: rows.append(args), n, seed=seed)
    return rows, info


def visits_in(rows: list[Row], info: PatrolInfo) -> int:
    """Ground-truth visits among the first len(rows) observations (whole or partial)."""
    if not rows:
        return 0
    last = rows[-1][4]
    return sum(1 for start, _ in info.visit_spans if start <= last)


def matched(spans: list[tuple[float, float]], gist_ranges: list[tuple[float, float]]) -> int:
    """Visits holding the middle of exactly one gist: one gist per visit, at the right time."""
    middles = sorted((a + b) / 2 for a, b in gist_ranges)
    return sum(1 for start, end in spans if sum(1 for m in middles if start <= m <= end) == 1)


def run_ours(rows: list[Row], visits: int, folder: Path, spans: list[tuple[float, float]],
             in_process: bool = False) -> Result:
    clock = [0.0]
    config = MemoryConfig(db_path=str(folder / "emem_ros.db"), flush_interval=0.0, index_save_interval=0.0,
                          working_memory_size=20_000, flush_batch_size=2048, maintenance_process=not in_process)
    memory = Memory(config=config, embedding_provider=HashingEmbeddingProvider(), get_current_time=lambda: clock[0])
    try:
        for text, x, y, z, stamp, layer, source, conf, meta, value in rows:
            if source == "interoception":
                memory.add_body_state(text, layer, x=x, y=y, z=z, timestamp=stamp, value=value)
            else:
                memory.add(text, x=x, y=y, z=z, timestamp=stamp, layer_name=layer, source_type=source,
                           confidence=conf, metadata=meta)
        memory.flush()
        clock[0] = rows[-1][4] + config.consolidation_window + config.consolidation_time_gap + 1.0
        started = time.perf_counter()
        gist_report = memory.consolidate_time_window()
        entity_report = memory.extract_entities()
        seconds = time.perf_counter() - started
        counts = memory.store.counts()
        ranges = memory.store.reader().execute("SELECT time_start, time_end FROM gists").fetchall()
        detail = (f"gists {gist_report.seconds:.2f} s + entities {entity_report.seconds:.2f} s; "
                  f"{gist_report.observations} summarised, {gist_report.noise} noise")
        return Result("emem_ros", len(rows), visits, seconds, counts["gists"], counts["entities"], detail,
                      gist_seconds=gist_report.seconds, matched_visits=matched(spans, ranges))
    finally:
        memory.close()


def run_emem(rows: list[Row], visits: int, folder: Path) -> Result:
    from emem import SpatioTemporalMemory, SpatioTemporalMemoryConfig

    clock = [0.0]
    db = folder / "emem.db"
    config = SpatioTemporalMemoryConfig(db_path=str(db), hnsw_path=str(folder / "emem.hnsw.bin"),
                                        working_memory_size=4096, flush_batch_size=512, flush_interval=3600.0,
                                        entity_extract_flush_interval=10**9, entity_extract_time_interval=10**9,
                                        hnsw_max_elements=max(100_000, 2 * len(rows)))
    memory = SpatioTemporalMemory(db_path=str(db), config=config, embedding_provider=HashingEmbeddingProvider(),
                                  get_current_time=lambda: clock[0])
    try:
        for text, x, y, z, stamp, layer, source, conf, meta, _value in rows:
            if source == "interoception":
                memory.add_body_state(text, layer, x=x, y=y, z=z, timestamp=stamp)
            else:
                memory.add(text, x=x, y=y, z=z, timestamp=stamp, layer_name=layer, source_type=source,
                           confidence=conf, metadata=meta)
        memory._wm.flush()
        clock[0] = rows[-1][4] + config.consolidation_window + 1.0
        started = time.perf_counter()
        gist_ids = memory.consolidate_time_window()
        seconds = time.perf_counter() - started
        conn = sqlite3.connect(str(db))
        try:
            gists = conn.execute("SELECT COUNT(*) FROM gists").fetchone()[0]
            entities = conn.execute("SELECT COUNT(*) FROM entities").fetchone()[0]
        finally:
            conn.close()
        largest = ""
        if gist_ids:
            sizes = [g.source_observation_count for g in (memory.store.get_gist(i) for i in gist_ids) if g]
            largest = f"largest gist holds {max(sizes)} of {len(rows)} observations"
        return Result("emem 0.3.0", len(rows), visits, seconds, gists, entities, largest)
    finally:
        memory.close()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=55_000, help="observations for emem_ros (default 55000)")
    parser.add_argument("--emem-n", type=int, default=None,
                        help="observations for emem (a prefix; extrapolated linearly to --n when smaller); "
                             "default: --n")
    parser.add_argument("--quick", action="store_true", help="5000 observations for both")
    parser.add_argument("--skip-emem", action="store_true")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of emem_ros, each on a fresh file; the median run is the one shown")
    parser.add_argument("--save", action="store_true", help="write the output to bench/results/")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--in-process", action="store_true",
                        help="maintenance_process=False: ours reads and plans in this process (no child)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    n = 5000 if args.quick else args.n
    emem_n = n if args.quick or args.emem_n is None else args.emem_n
    emem_n = min(emem_n, n)
    lines: list[str] = []

    def say(line: str = "") -> None:
        print(line, flush=True)
        lines.append(line)

    say(f"bench_consolidation ({'quick' if args.quick else 'full'}) on {machine_info()}")
    say()
    rows, info = build_stream(n, args.seed)
    say(f"stream: {len(rows)} observations, {info.visits} room visits, "
        f"{(info.end - info.start) / 3600:.1f} h of patrol, layers {info.layers}")
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-consolidation-") as tmp:
        runs = []
        for k in range(max(1, args.repeat)):
            folder = Path(tmp) / f"ours-{k}"
            folder.mkdir()
            runs.append(run_ours(rows, info.visits, folder, info.visit_spans, args.in_process))
        runs.sort(key=lambda r: r.seconds)
        ours = runs[(len(runs) - 1) // 2]
        results.append(ours)
        spread = ""
        if len(runs) > 1:
            spread = (f"; median of {len(runs)} runs: {', '.join(f'{r.seconds:.2f}' for r in runs)} s, "
                      f"mean {statistics.mean(r.seconds for r in runs):.2f} s")
        say(f"emem_ros   {ours.seconds:8.2f} s  ({ours.detail}{spread})")
        if not args.skip_emem:
            prefix = rows[:emem_n]
            folder = Path(tmp) / "emem"
            folder.mkdir()
            peer = run_emem(prefix, visits_in(prefix, info), folder)
            if emem_n < n:
                peer.extrapolated_seconds = peer.seconds * n / emem_n
            results.append(peer)
            say(f"emem 0.3.0 {peer.seconds:8.2f} s on {emem_n} observations ({peer.detail})")

    say()
    say(f"{'':12}{'observations':>13}{'room visits':>13}{'seconds':>11}{'gists':>8}{'entities':>10}")
    for r in results:
        say(f"{r.name:12}{r.observations:>13}{r.visits:>13}{r.seconds:>11.2f}{r.gists:>8}{r.entities:>10}")
    if len(results) == 2:
        peer = results[1]
        if peer.extrapolated_seconds is not None:
            say(f"{'emem (lin.)':12}{n:>13}{info.visits:>13}{peer.extrapolated_seconds:>11.1f}{'?':>8}{'?':>10}"
                "   <- emem time EXTRAPOLATED linearly from its prefix run (a lower bound: it grows faster)")
            peer_seconds, how = peer.extrapolated_seconds, "emem extrapolated"
        else:
            peer_seconds, how = peer.seconds, "both measured"
        say(f"speed-up at n={n} ({how}): {peer_seconds / ours.seconds:.0f}x gists + entities, "
            f"{peer_seconds / ours.gist_seconds:.0f}x gists alone (emem's run makes gists only: no LLM, no entities)")
        say(f"gists vs room visits: emem_ros {ours.gists}/{ours.visits}, emem {peer.gists}/{peer.visits}")
    if ours.matched_visits is not None:
        say(f"emem_ros: {ours.matched_visits} of {ours.visits} visits hold the middle of exactly one gist")
    if args.save:
        save_results("consolidation", lines, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
