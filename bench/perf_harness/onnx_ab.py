"""A/B in one process, taking turns: the ONNX backend as it was (single-file weights, 1,024 padded tokens
per run) against as it is (memory-mapped weights, 512), on the same robot texts: batched texts/s (median
of 5 passes) and one-query latency. Run from the repository root:

    python bench/perf_harness/onnx_ab.py [--int8] [--ba]    # --ba: the new one takes the first turn
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())

from emem_ros.embeddings import onnx_provider as op
from test.support.robot_texts import robot_texts


def main() -> None:
    int8 = "--int8" in sys.argv
    real_mapped = op.mapped_model
    op.mapped_model = lambda path: path  # type: ignore[assignment]
    old = op.OnnxEmbeddingProvider(int8=int8, threads=2)
    op.TOKEN_BUDGET = 1024
    old.embed(["warm up"])
    op.mapped_model = real_mapped
    new = op.OnnxEmbeddingProvider(int8=int8, threads=2)
    new.embed(["warm up"])
    print("old", old.onnx_path, "new", new.onnx_path)
    turns = [("new", new, 512), ("old", old, 1024)] if "--ba" in sys.argv else [("old", old, 1024), ("new", new, 512)]
    texts, queries = robot_texts(600, seed=3), robot_texts(200, seed=4)
    passes: dict[str, list[float]] = {"old": [], "new": []}
    latency: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(5):
        for name, provider, budget in turns:
            op.TOKEN_BUDGET = budget
            started = time.perf_counter()
            provider.embed(texts)
            passes[name].append(time.perf_counter() - started)
    for query in queries:
        for name, provider, budget in turns:
            op.TOKEN_BUDGET = budget
            started = time.perf_counter()
            provider.embed([query])
            latency[name].append((time.perf_counter() - started) * 1000)
    for name in ("old", "new"):
        ordered = sorted(latency[name])
        print(f"{name}: {len(texts) / statistics.median(passes[name]):.1f} texts/s (median of 5), query p50 "
              f"{ordered[len(ordered) // 2]:.2f} p95 {ordered[int(len(ordered) * 0.95)]:.2f} ms")
    print("load", " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
