#!/usr/bin/env python3
"""p50 / p95 ms per call of the five target tools with the linkage memo (``tools.clusters.LABELS``) kept or
switched off, taking turns in one process: what "near here" costs when every call links afresh (a robot
whose places around the spot just changed) next to what the bench's repeated calls cost.

    python memo_off.py N ROUNDS      # on the memory bench_tools.py --reuse $REUSE built
    KERNEL=off python memo_off.py N ROUNDS   # the same without the C linkage kernel (the k-d tree path)
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(HERE / "bench"), str(HERE)]

import bench_tools as bt  # noqa: E402

from emem_ros.tools import clusters  # noqa: E402

TOOLS = ("semantic_search", "spatial_query", "locate", "recall", "get_current_context")


def main() -> None:
    n, rounds = int(float(sys.argv[1])), int(sys.argv[2])
    reuse = Path(os.environ.get("REUSE", "/tmp/fastnear"))
    memory, stream, provider, _, _ = bt.load("emem_ros", n, reuse / f"emem_ros-{n}", reuse / "graph.json", reuse=True)
    arg_sets = bt.calls(stream)
    provider.precompute(bt.query_strings(arg_sets))
    if os.environ.get("KERNEL") == "off":
        clusters.KERNEL = None  # (before the kernel there was none: a no-op there)
    kept, off = clusters.LABELS, clusters.LabelMemo(entries=0)
    samples: dict[tuple[str, str], list[float]] = {}
    for tool in TOOLS:
        for kwargs in arg_sets[tool]:
            getattr(memory, tool)(**kwargs)
    for _ in range(rounds):
        for mode, memo in (("memo", kept), ("no memo", off)):
            clusters.LABELS = memo
            for tool in TOOLS:
                method = getattr(memory, tool)
                for kwargs in arg_sets[tool]:
                    t0 = time.perf_counter()
                    method(**kwargs)
                    samples.setdefault((tool, mode), []).append(time.perf_counter() - t0)
    clusters.LABELS = kept
    for tool in TOOLS:
        row = f"{tool:22}{n:>9}"
        for mode in ("memo", "no memo"):
            s = sorted(samples[(tool, mode)])
            row += f" | {mode}: p50 {statistics.median(s) * 1000:.2f} p95 {s[int(0.95 * (len(s) - 1))] * 1000:.2f}"
        print(row, flush=True)
    memory.close()


if __name__ == "__main__":
    main()
