#!/usr/bin/env python3
"""Ingest: emem_ros vs the peer ``emem`` 0.3.0, one run, same streams, same embedder.

Two synthetic robot streams (bench/robot_streams.py): a *realistic* one
(detection classes and scene descriptions repeat: ~330 distinct strings,
plus battery and CPU-temperature readings) and a *unique* one (same path and
rates, every text different). Both engines get the deterministic
``HashingEmbeddingProvider``, so what is measured is the engine, not a
model. Each case runs in a fresh subprocess, so peak memory (RSS) is the
case's own; the stream's columns are built before the engine is opened and
only the ``add`` calls, the final flush and the close are timed.

Printed per case: throughput (observations/s over the whole run, and over
the 10% of the run that ends at 50k stored, i.e. "at 50k"), close time,
reopen time (constructor on the closed files) and the first query after it,
disk bytes per observation, peak RSS; then the ratio to emem. Last, the
end-to-end rate with the real all-MiniLM-L6-v2 model (ours: the text cache,
so each distinct string is embedded once; emem embeds every observation).

    python bench/bench_ingest.py            # full: 10k/50k/100k both, 1M emem_ros (~20-25 min)
    python bench/bench_ingest.py --quick    # seconds (make bench)
    python bench/bench_ingest.py --save     # also write bench/results/ingest-<date>.txt
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from engines import (  # noqa: E402
    OURS,
    PEER,
    adder,
    flush,
    folder_bytes,
    machine_info,
    open_ours,
    open_peer,
    peak_rss_mb,
    rss_mb,
    save_results,
)
from robot_streams import make_stream  # noqa: E402

CHUNK = 5000
"""Rows materialised (untimed) and then added (timed) at a time."""
QUERY = "red mug"


# ---------------------------------------------------------------------- one case (child process)
def make_provider(name: str):
    if name == "minilm":
        from emem_ros.embeddings.sentence_transformer import SentenceTransformerProvider

        provider = SentenceTransformerProvider()
        provider.embed(["warm up the model before the clock starts"])
        return provider
    from emem_ros.embeddings import HashingEmbeddingProvider

    return HashingEmbeddingProvider()


def run_ingest(spec: dict[str, Any]) -> dict[str, Any]:
    engine, n, folder = spec["engine"], spec["n"], Path(spec["folder"])
    stream = make_stream(n, unique=spec["stream"] == "unique")
    provider = make_provider(spec["provider"])
    rss_before = rss_mb()
    clock = [float(stream.stamp[0])]
    started = time.perf_counter()
    memory = (open_ours(folder, provider, lambda: clock[0]) if engine == OURS
              else open_peer(folder, provider, lambda: clock[0], capacity=n))
    open_s = time.perf_counter() - started
    add = adder(engine, memory)
    marks: list[tuple[int, float]] = [(0, 0.0)]
    elapsed = 0.0
    for start in range(0, n, CHUNK):
        rows = list(stream.rows(start, min(n, start + CHUNK)))
        clock[0] = rows[-1][4]
        t0 = time.perf_counter()
        for row in rows:
            add(*row)
        elapsed += time.perf_counter() - t0
        marks.append((start + len(rows), elapsed))
    t0 = time.perf_counter()
    flush(engine, memory)
    elapsed += time.perf_counter() - t0
    marks[-1] = (n, elapsed)
    t0 = time.perf_counter()
    memory.close()
    close_s = time.perf_counter() - t0
    return {"n": n, "seconds": elapsed, "rate": n / elapsed, "open_s": open_s, "close_s": close_s,
            "rate_at_50k": _window_rate(marks, 50_000), "rate_first": _window_rate(marks, max(n // 10, CHUNK)),
            "rate_last": _window_rate(marks, n), "disk": folder_bytes(folder), "rss_before": rss_before,
            "peak_rss": peak_rss_mb(), "distinct": stream.distinct_texts()}


def _window_rate(marks: list[tuple[int, float]], at: int) -> Optional[float]:
    """Observations/s over the tenth of the run that ends at ``at`` stored."""
    end = next((m for m in marks if m[0] >= at), None)
    if end is None or end[0] > at + CHUNK:
        return None
    before = [m for m in marks if m[0] <= end[0] - max(end[0] // 10, CHUNK)]
    begin = max(before, key=lambda m: m[0]) if before else marks[0]
    return (end[0] - begin[0]) / max(end[1] - begin[1], 1e-9)


def run_reopen(spec: dict[str, Any]) -> dict[str, Any]:
    engine, folder = spec["engine"], Path(spec["folder"])
    provider = make_provider(spec["provider"])
    rss_before = rss_mb()
    started = time.perf_counter()
    memory = open_ours(folder, provider) if engine == OURS else open_peer(folder, provider, capacity=spec["n"])
    open_s = time.perf_counter() - started
    started = time.perf_counter()
    if engine == OURS:
        memory.tools.semantic_search(QUERY)
    else:
        memory.semantic_search(QUERY)
    query_s = time.perf_counter() - started
    memory.close()
    return {"reopen_s": open_s, "first_query_s": query_s, "reopen_peak_rss": peak_rss_mb(),
            "reopen_rss_before": rss_before}


def child(spec_json: str) -> int:
    logging.basicConfig(level=logging.ERROR)
    spec = json.loads(spec_json)
    result = run_ingest(spec) if spec["phase"] == "ingest" else run_reopen(spec)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------------- the parent
def run_case(engine: str, stream: str, n: int, provider: str, tmp: Path, timeout: float,
             repeat: int = 1) -> dict[str, Any]:
    """Ingest ``repeat`` times (fresh files each time), keep the fastest run, reopen its files."""
    import shutil

    out: dict[str, Any] = {"engine": engine, "stream": stream, "provider": provider, "n": n}
    best: Optional[tuple[dict[str, Any], Path]] = None
    rates = []
    for attempt in range(repeat):
        folder = tmp / f"{engine}-{stream}-{provider}-{n}-{attempt}"
        folder.mkdir()
        result = _phase("ingest", engine, stream, n, provider, folder, timeout)
        if "error" in result:
            out.update(result)
            shutil.rmtree(folder, ignore_errors=True)
            return out
        rates.append(result["rate"])
        if best is None or result["rate"] > best[0]["rate"]:
            if best is not None:
                shutil.rmtree(best[1], ignore_errors=True)
            best = (result, folder)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    assert best is not None
    out.update(best[0])
    out["rates"] = rates
    out.update(_phase("reopen", engine, stream, n, provider, best[1], timeout))
    shutil.rmtree(best[1], ignore_errors=True)
    return out


def _phase(phase: str, engine: str, stream: str, n: int, provider: str, folder: Path,
           timeout: float) -> dict[str, Any]:
    spec = {"engine": engine, "stream": stream, "n": n, "provider": provider, "folder": str(folder), "phase": phase}
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"{phase} took over {timeout:.0f} s"}
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"error": f"{phase} failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}"}
    return json.loads(lines[-1][7:])


def fmt_rate(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.0f}"


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'stream':10}{'engine':10}{'n':>9}{'obs/s':>9}{'@50k':>9}{'last10%':>9}{'close s':>8}"
             f"{'reopen s':>9}{'1st q ms':>9}{'B/obs':>7}{'peak MB':>8}{'engine MB':>10}{'ratio':>8}"]
    peers = {(r["stream"], r["provider"], r["n"]): r for r in results if r["engine"] == PEER and "rate" in r}
    for r in results:
        if "error" in r:
            lines.append(f"{r['stream']:10}{r['engine']:10}{r['n']:>9}  ERROR: {r['error']}")
            continue
        peer = peers.get((r["stream"], r["provider"], r["n"]))
        ratio = f"{r['rate'] / peer['rate']:.1f}x" if peer is not None and r["engine"] == OURS else ""
        lines.append(
            f"{r['stream']:10}{r['engine']:10}{r['n']:>9,}{fmt_rate(r['rate']):>9}{fmt_rate(r.get('rate_at_50k')):>9}"
            f"{fmt_rate(r.get('rate_last')):>9}{r['close_s']:>8.2f}{r['reopen_s']:>9.2f}"
            f"{r['first_query_s'] * 1000:>9.1f}{r['disk'] / r['n']:>7.0f}{r['peak_rss']:>8.0f}"
            f"{r['peak_rss'] - r['rss_before']:>10.0f}{ratio:>8}")
    return lines


def ratios(results: list[dict[str, Any]]) -> list[str]:
    """Side-by-side ratios (ours / emem) at each size both ran."""
    out = []
    for r in results:
        if r["engine"] != OURS or "rate" not in r:
            continue
        peer = next((p for p in results if p["engine"] == PEER and p["stream"] == r["stream"]
                     and p["provider"] == r["provider"] and p["n"] == r["n"] and "rate" in p), None)
        if peer is None:
            continue
        at50 = ""
        if r.get("rate_at_50k") and peer.get("rate_at_50k"):
            at50 = f", at 50k stored {r['rate_at_50k'] / peer['rate_at_50k']:.1f}x"
        out.append(
            f"{r['stream']:9} {r['provider']:7} n={r['n']:>7,}: throughput {r['rate'] / peer['rate']:.1f}x{at50}; "
            f"reopen {peer['reopen_s'] / max(r['reopen_s'], 1e-9):.1f}x faster; disk/obs "
            f"{r['disk'] / peer['disk']:.2f}x; peak RSS {r['peak_rss'] / peer['peak_rss']:.2f}x")
    return out


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (2k, 10k; MiniLM 1k)")
    parser.add_argument("--sizes", type=str, default=None, help="comma-separated sizes for both engines")
    parser.add_argument("--ours-only", type=str, default=None, help="comma-separated sizes for emem_ros only")
    parser.add_argument("--minilm", type=str, default=None, help="comma-separated sizes for the MiniLM run")
    parser.add_argument("--minilm-ours", type=str, default=None, help="extra MiniLM sizes, emem_ros only")
    parser.add_argument("--streams", type=str, default="realistic,unique")
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--skip-minilm", action="store_true")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per case")
    parser.add_argument("--repeat", type=int, default=None,
                        help="ingest runs per case, the fastest kept (default: 2 in full mode, 1 with --quick)")
    parser.add_argument("--repeat-max", type=int, default=200_000, help="only cases up to this size are repeated")
    parser.add_argument("--save", action="store_true", help="write the tables to bench/results/")
    parser.add_argument("--child", type=str, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)

    def sizes(text: Optional[str], default: str) -> list[int]:
        return [int(float(s)) for s in (text or default).split(",") if s]

    if args.repeat is None:
        args.repeat = 1 if args.quick else 2
    both = sizes(args.sizes, "2000,10000" if args.quick else "10000,50000,100000")
    ours_only = sizes(args.ours_only if args.ours_only is not None else ("" if args.quick else "1000000"), "")
    minilm = sizes(args.minilm, "1000" if args.quick else "10000")
    minilm_ours = sizes(args.minilm_ours if args.minilm_ours is not None else ("" if args.quick else "100000"), "")
    plan: list[tuple[str, str, int, str]] = []
    for stream in args.streams.split(","):
        for n in both:
            plan.append((OURS, stream, n, "hashing"))
            if not args.skip_peer:
                plan.append((PEER, stream, n, "hashing"))
        for n in ours_only:
            plan.append((OURS, stream, n, "hashing"))
    if not args.skip_minilm:
        for n in minilm:
            plan.append((OURS, "realistic", n, "minilm"))
            if not args.skip_peer:
                plan.append((PEER, "realistic", n, "minilm"))
        for n in minilm_ours:
            plan.append((OURS, "realistic", n, "minilm"))

    header = f"bench_ingest ({'quick' if args.quick else 'full'}) on {machine_info()}"
    print(header, flush=True)
    results: list[dict[str, Any]] = []
    total = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        for engine, stream, n, provider in plan:
            t0 = time.perf_counter()
            repeat = args.repeat if n <= args.repeat_max else 1
            result = run_case(engine, stream, n, provider, Path(tmp), args.timeout, repeat)
            results.append(result)
            summary = result.get("error") or (
                f"{result['rate']:,.0f} obs/s (runs: {', '.join(f'{r:,.0f}' for r in result['rates'])}), "
                f"reopen {result['reopen_s']:.2f} s, peak {result['peak_rss']:.0f} MB")
            print(f"  {engine:9} {stream:9} {provider:7} n={n:>9,}: {summary}  "
                  f"[{time.perf_counter() - t0:.0f} s]", flush=True)

    lines = [header, "", "Engine only (HashingEmbeddingProvider for both):"]
    lines += table([r for r in results if r["provider"] == "hashing"])
    mini = [r for r in results if r["provider"] == "minilm"]
    if mini:
        lines += ["", "End to end with all-MiniLM-L6-v2 (CPU), realistic stream:"]
        lines += table(mini)
    lines += ["", "Ratios (emem_ros vs emem 0.3.0, same run):"] + ratios(results)
    lines += ["", _notes(), f"total bench time {time.perf_counter() - total:.0f} s"]
    print("\n" + "\n".join(lines))
    if args.save:
        save_results("ingest", lines, quick=args.quick)
    return 0


def _notes() -> str:
    return ("Each case up to --repeat-max observations ran --repeat times on fresh files; the fastest run is shown "
            "(the machine is shared: slower runs are other load, not the engine). "
            "obs/s: whole run (add calls + final flush); @50k: the 10% of the run ending at 50k stored; "
            "last10%: the run's last tenth. close: flush + index snapshots. reopen: constructor on the closed "
            "files; 1st q: the first semantic_search after it (emem_ros builds its text catalog there). "
            "B/obs: the memory's folder (SQLite + WAL + index snapshots + emem_ros's operation log) / n. "
            "peak MB: the case process's max RSS; engine MB: peak minus RSS before the engine opened "
            "(the stream's columns and the interpreter). emem: batches of 512, HNSW capacity preset to n, "
            "entity extraction on its defaults (no LLM: nothing extracted). emem_ros: batches of 2048, "
            "no timer threads, operation log on.")


if __name__ == "__main__":
    sys.exit(main())
