#!/usr/bin/env python3
"""Per tool, the fastest of REPEATS calls per argument set (and p10), on a loaded machine.

    python fastest_calls.py ROOT N TOOLS REPEATS     # ROOT: the checkout whose emem_ros is timed

Runs on the memory ``bench_tools.py --reuse $REUSE`` built for N observations (default /tmp/perf-bt);
prints one ``RESULT {json}`` line: per tool the mean over its argument sets of each set's fastest call.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    root, n = Path(sys.argv[1]), int(float(sys.argv[2]))
    tools, repeats = sys.argv[3].split(","), int(sys.argv[4])
    sys.path[:0] = [str(root / "bench"), str(root)]
    import bench_tools as bt

    import emem_ros

    assert emem_ros.__file__.startswith(str(root)), emem_ros.__file__
    reuse = Path(os.environ.get("REUSE", "/tmp/perf-bt"))
    memory, stream, provider, _, _ = bt.load("emem_ros", n, reuse / f"emem_ros-{n}", reuse / "graph.json", reuse=True)
    arg_sets = bt.calls(stream)
    provider.precompute(bt.query_strings(arg_sets))
    out = {}
    for tool in tools:
        method, sets = getattr(memory, tool), arg_sets[tool]
        for kwargs in sets:
            method(**kwargs)
        per: list[list[float]] = [[] for _ in sets]
        for _ in range(repeats):
            for k, kwargs in enumerate(sets):
                t0 = time.perf_counter()
                method(**kwargs)
                per[k].append(time.perf_counter() - t0)
        every = sorted(x for s in per for x in s)
        out[tool] = {"min": statistics.mean(min(s) * 1e3 for s in per),
                     "p10": statistics.mean(sorted(s)[len(s) // 10] * 1e3 for s in per),
                     "p50": every[len(every) // 2] * 1e3, "mins": [round(min(s) * 1e3, 3) for s in per]}
    memory.close()
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
