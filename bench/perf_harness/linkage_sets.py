#!/usr/bin/env python3
"""The C linkage kernel against the k-d tree path on the point sets the tools really link.

    python linkage_sets.py N [REPEATS]     # on the memory bench_tools.py --reuse $REUSE built

Runs every argument set of spatial_query, locate, recall and get_current_context once with the linkage
memo off, keeps each point set the kernel is handed, then times ``tree_labels`` and ``kernel_labels`` on
each (REPEATS calls, hot caches; labels checked equal) and prints microseconds per call.
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
import numpy as np  # noqa: E402

from emem_ros.tools import clusters  # noqa: E402

TOOLS = ("spatial_query", "locate", "recall", "get_current_context")


def main() -> None:
    n, repeats = int(float(sys.argv[1])), int(sys.argv[2]) if len(sys.argv) > 2 else 200
    if clusters.KERNEL is None:
        sys.exit("the C kernel is not built here")
    reuse = Path(os.environ.get("REUSE", "/tmp/fastnear"))
    memory, stream, provider, _, _ = bt.load("emem_ros", n, reuse / f"emem_ros-{n}", reuse / "graph.json", reuse=True)
    arg_sets = bt.calls(stream)
    provider.precompute(bt.query_strings(arg_sets))
    clusters.LABELS = clusters.LabelMemo(entries=0)
    kernel, seen = clusters.KERNEL, []

    class Recorder:
        @staticmethod
        def link(points: np.ndarray, link: float, out: np.ndarray) -> bool:
            seen.append((points.copy(), link))
            return bool(kernel.link(points, link, out))

    clusters.KERNEL = Recorder
    for tool in TOOLS:
        for kwargs in arg_sets[tool]:
            getattr(memory, tool)(**kwargs)
    clusters.KERNEL = kernel
    memory.close()
    totals = [0.0, 0.0]
    for points, link in seen:
        assert np.array_equal(clusters.kernel_labels(points, link), clusters.tree_labels(points, link))
        took = []
        for fn in (clusters.tree_labels, clusters.kernel_labels):
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn(points, link)
                times.append(time.perf_counter() - t0)
            took.append(statistics.median(times) * 1e6)
        totals = [a + b for a, b in zip(totals, took)]
        print(f"{len(points):6} points {points.shape[1]}-D link {link:<4}: k-d tree {took[0]:7.1f} us"
              f"  kernel {took[1]:6.1f} us  ({took[0] / took[1]:.1f}x)")
    print(f"{len(seen)} sets: k-d tree {totals[0]:.0f} us, kernel {totals[1]:.0f} us ({totals[0] / totals[1]:.1f}x)")


if __name__ == "__main__":
    main()
