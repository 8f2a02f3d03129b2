#!/usr/bin/env python3
"""all-MiniLM-L6-v2 three ways: sentence-transformers/torch, ONNX Runtime float, ONNX Runtime int8.

Each backend runs in its own subprocess (so its resident memory is its own, and
the ONNX ones can show that torch was never imported), with 2 threads:

- batched throughput: the provider's own ``embed`` (what a memory flush calls) on
  robot texts (test/support/robot_texts.py), median of 3 passes, texts/s;
- per-query latency: one text per call (a question), p50/p95 over distinct texts;
- RSS: after loading and embedding (VmRSS) and the peak (VmHWM) of a process
  holding only that backend, then of a Memory with that backend (no hashing
  embedder) after adding, flushing and searching 2,000 observations;
- recall@10 on the LoCoMo-style retrieval set (same file), exact cosine search,
  and each backend's minimum cosine against torch on the same texts.

    python bench/bench_embeddings.py            # full (~5 min on 2 idle cores)
    python bench/bench_embeddings.py --quick    # smaller sets
    python bench/bench_embeddings.py --save     # also write bench/results/embeddings-<date>.txt
    python bench/bench_embeddings.py --interleaved  # throughput/latency only, backends taking turns

The ONNX files are taken from (or exported into) the user cache folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

BACKENDS = ("torch", "onnx", "onnx-int8")
THREADS = 2


def _rss_mb() -> tuple[float, float]:
    values = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "VmHWM:")):
                values[line.split(":")[0]] = int(line.split()[1]) / 1024
    return values["VmRSS"], values["VmHWM"]


def _provider(backend: str) -> Any:
    if backend == "torch":
        import torch

        torch.set_num_threads(THREADS)
        from emem_ros.embeddings.sentence_transformer import SentenceTransformerProvider

        return SentenceTransformerProvider()
    from emem_ros.embeddings.onnx_provider import OnnxEmbeddingProvider

    return OnnxEmbeddingProvider(int8=backend == "onnx-int8", threads=THREADS)


def child(backend: str, quick: bool, out_dir: Path) -> dict[str, Any]:
    """One backend in this process: throughput, latency, RSS, and the vectors for recall (saved to out_dir)."""
    from test.support.robot_texts import retrieval_set, robot_texts

    result: dict[str, Any] = {"backend": backend}
    started = time.perf_counter()
    provider = _provider(backend)
    provider.embed(["warm up"])
    result["load_s"] = time.perf_counter() - started
    texts = robot_texts(300 if quick else 1000, seed=3)
    passes = []
    for _ in range(3):
        started = time.perf_counter()
        provider.embed(texts)
        passes.append(time.perf_counter() - started)
    result["texts_per_s"] = len(texts) / statistics.median(passes)
    queries = robot_texts(100 if quick else 300, seed=4)
    latencies = []
    for query in queries:
        started = time.perf_counter()
        provider.embed([query])
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    result["query_p50_ms"] = latencies[len(latencies) // 2]
    result["query_p95_ms"] = latencies[int(len(latencies) * 0.95)]
    result["rss_mb"], result["peak_rss_mb"] = _rss_mb()
    data = retrieval_set()
    np.save(out_dir / f"{backend}-corpus.npy", provider.embed(data.corpus))
    np.save(out_dir / f"{backend}-questions.npy", provider.embed(data.questions))
    np.save(out_dir / f"{backend}-agreement.npy", provider.embed(robot_texts(300)))
    result["torch_imported"] = "torch" in sys.modules
    return result


def node_child(backend: str, quick: bool) -> dict[str, Any]:
    """A Memory with this backend, as the node holds it: add, flush, search; its RSS."""
    from emem_ros import Memory, MemoryConfig
    from test.support.robot_texts import robot_texts

    with tempfile.TemporaryDirectory() as tmp:
        config = MemoryConfig(db_path=str(Path(tmp) / "m.db"), flush_interval=0.0, index_save_interval=0.0)
        memory = Memory(config=config, embedding_provider=_provider(backend))
        for i, text in enumerate(robot_texts(500 if quick else 2000, seed=5)):
            memory.add(text, x=float(i % 40), y=float(i // 40), layer_name="scene", timestamp=1.7e9 + i)
        memory.flush()
        for query in robot_texts(50, seed=6):
            memory.semantic_search(query)
        rss, peak = _rss_mb()
        torch_imported = "torch" in sys.modules
        memory.close()
    return {"node_rss_mb": rss, "node_peak_rss_mb": peak, "node_torch_imported": torch_imported}


def interleaved(quick: bool) -> list[str]:
    """All three backends in one process, taking turns on the same texts: fair ratios on a shared machine
    whose load moves between sequential runs (RSS is not measured here: torch is loaded)."""
    from test.support.robot_texts import robot_texts

    providers = {backend: _provider(backend) for backend in BACKENDS}
    for provider in providers.values():
        provider.embed(["warm up"])
    texts = robot_texts(200 if quick else 500, seed=3)
    queries = robot_texts(60 if quick else 200, seed=4)
    passes: dict[str, list[float]] = {b: [] for b in BACKENDS}
    latencies: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for _ in range(3):
        for backend, provider in providers.items():
            started = time.perf_counter()
            provider.embed(texts)
            passes[backend].append(time.perf_counter() - started)
    for query in queries:
        for backend, provider in providers.items():
            started = time.perf_counter()
            provider.embed([query])
            latencies[backend].append((time.perf_counter() - started) * 1000)
    base = len(texts) / statistics.median(passes["torch"])
    lines = [f"interleaved ({len(texts)} texts x 3 passes, {len(queries)} queries, turns taken): "
             f"{'backend':<10} {'texts/s':>8} {'x torch':>8} {'q p50 ms':>9} {'q p95 ms':>9}"]
    for backend in BACKENDS:
        rate = len(texts) / statistics.median(passes[backend])
        ordered = sorted(latencies[backend])
        lines.append(f"{'':<71}{backend:<10} {rate:>8.1f} {rate / base:>8.2f} {ordered[len(ordered) // 2]:>9.2f} "
                     f"{ordered[int(len(ordered) * 0.95)]:>9.2f}")
    return lines


def run_child(args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def recall_at_10(corpus: np.ndarray, questions: np.ndarray, answers: list[int]) -> float:
    top = np.argsort(-(questions @ corpus.T), axis=1)[:, :10]
    return float(np.mean([answer in row for answer, row in zip(answers, top)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--node", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--interleaved", action="store_true",
                        help="only the turn-taking throughput/latency comparison (one process, all backends)")
    args = parser.parse_args()
    if args.interleaved:
        lines = interleaved(args.quick)
        lines.append(f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}; threads {THREADS}")
        print("\n".join(lines))
        if args.save:
            from engines import save_results

            save_results("embeddings-interleaved", lines, quick=args.quick)
        return
    if args.child:
        result = node_child(args.child, args.quick) if args.node else child(args.child, args.quick, args.out)
        print(json.dumps(result))
        return

    from engines import machine_info, save_results

    from test.support.robot_texts import retrieval_set

    data = retrieval_set()
    load_before = open("/proc/loadavg").read().split()[:3]
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for backend in BACKENDS:
            quick = ["--quick"] if args.quick else []
            rows[backend] = run_child(["--child", backend, "--out", str(out), *quick])
            rows[backend].update(run_child(["--child", backend, "--node", *quick]))
            print(f"{backend}: {json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in rows[backend].items()})}",
                  flush=True)
        vectors = {b: {kind: np.load(out / f"{b}-{kind}.npy") for kind in ("corpus", "questions", "agreement")}
                   for b in BACKENDS}
    load_after = open("/proc/loadavg").read().split()[:3]
    for backend in BACKENDS:
        v = vectors[backend]
        rows[backend]["recall10"] = recall_at_10(v["corpus"], v["questions"], data.answers)
        rows[backend]["recall10_vs_torch_corpus"] = recall_at_10(vectors["torch"]["corpus"], v["questions"], data.answers)
        rows[backend]["min_cos_vs_torch"] = float((v["agreement"] * vectors["torch"]["agreement"]).sum(axis=1).min())

    torch_row = rows["torch"]
    lines = [f"bench_embeddings ({'quick' if args.quick else 'full'}) on {machine_info()}",
             f"threads per backend: {THREADS}; load average before {' '.join(load_before)}, after {' '.join(load_after)}",
             f"retrieval set: {len(data.corpus)} texts, {len(data.questions)} questions (test/support/robot_texts.py)",
             "",
             f"{'backend':<10} {'texts/s':>8} {'x torch':>8} {'q p50 ms':>9} {'q p95 ms':>9} {'RSS MB':>7} "
             f"{'peak MB':>8} {'node RSS':>9} {'node peak':>10} {'recall@10':>10} {'r@10 q->torch':>14} "
             f"{'min cos':>8} {'load s':>7} {'torch?':>7}"]
    for backend in BACKENDS:
        r = rows[backend]
        lines.append(
            f"{backend:<10} {r['texts_per_s']:>8.1f} {r['texts_per_s'] / torch_row['texts_per_s']:>8.2f} "
            f"{r['query_p50_ms']:>9.2f} {r['query_p95_ms']:>9.2f} {r['rss_mb']:>7.0f} {r['peak_rss_mb']:>8.0f} "
            f"{r['node_rss_mb']:>9.0f} {r['node_peak_rss_mb']:>10.0f} {r['recall10']:>10.3f} "
            f"{r['recall10_vs_torch_corpus']:>14.3f} {r['min_cos_vs_torch']:>8.4f} {r['load_s']:>7.1f} "
            f"{str(r['torch_imported'] or r['node_torch_imported']):>7}")
    lines += ["",
              "texts/s: provider.embed on robot texts (median of 3); q: one text per call; RSS: the process with only",
              "that backend loaded; node: a Memory with it after 2,000 adds, a flush and 50 searches; r@10 q->torch:",
              "this backend's questions against torch's corpus vectors (a torch-built memory searched with it)."]
    print("\n".join(lines))
    if args.save:
        save_results("embeddings", lines, quick=args.quick)


if __name__ == "__main__":
    main()
