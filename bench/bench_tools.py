#!/usr/bin/env python3
"""The ten retrieval tools: emem_ros vs the peer ``emem`` 0.3.0, same data, same calls, one run.

Both memories get the realistic robot stream of bench/robot_streams.py
(patrol rounds as episodes) through the deterministic
``HashingEmbeddingProvider``. emem_ros then consolidates what is older than
its window (gists) and extracts entities (detections); emem 0.3.0 makes no
entities without an LLM and its own consolidation takes minutes at this
size, so the same gists and entities are copied into it (``add_gist``,
``add_entity``): the two engines answer over the same graph.

Every tool is called through the eMEM-style facade (``memory.<tool>(...)``,
which returns the text an LLM reads) with the same arguments in both; each
tool cycles through a few argument sets (below). Query embeddings are
excluded: every query string is embedded before the clock starts and both
engines' providers answer it from that table. emem_ros's query cache (an
agent-side answer cache) is switched off: the engine is measured, not the
cache. Each engine runs in its own subprocess.

    python bench/bench_tools.py            # 10k and 100k both, 1M emem_ros (~15 min)
    python bench/bench_tools.py --quick    # 2k both (make bench)
    python bench/bench_tools.py --save     # also write bench/results/tools-<date>.txt
    python bench/bench_tools.py --ours-only 1e6 --sizes "" --skip-peer --reuse /tmp/bt
                                           # build the 1M memory once, reuse it on later runs
    python bench/bench_tools.py ... --clock cpu            # time by thread CPU time (a loaded machine)
    python bench/bench_tools.py ... --dump-answers /tmp/a  # every answer in full, to diff two versions
    python bench/bench_tools.py ... --no-label-memo   # every call links its places afresh (a planner's new questions)
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from engines import OURS, PEER, adder, flush, machine_info, open_ours, open_peer, save_results  # noqa: E402
from robot_streams import CachedProvider, make_stream  # noqa: E402

TOOL_NAMES = ("semantic_search", "spatial_query", "temporal_query", "episode_summary", "get_current_context",
              "search_gists", "entity_query", "locate", "recall", "body_status")

QUERIES = ["red mug", "where is the refrigerator", "a person near the door", "laptop on the desk",
           "fire extinguisher", "something to sit on"]


def calls(stream) -> dict[str, list[dict[str, Any]]]:
    """Argument sets per tool (identical for both engines)."""
    centres = [(r.origin[0] + 3.0, r.origin[1] + 3.0) for r in stream.rooms[::4]]
    cx, cy = centres[1]
    return {
        "semantic_search": [{"query": q} for q in QUERIES[:4]] + [
            {"query": "red mug", "layer": "detections"},
            {"query": "a person near the door", "time_after": "-1h"},
            {"query": "chair", "near_x": cx, "near_y": cy, "spatial_radius": 4.0}],
        "spatial_query": [{"x": x, "y": y, "radius": 2.0} for x, y in centres] + [
            {"x": cx, "y": cy, "radius": 5.0, "layer": "detections"},
            {"x": cx, "y": cy, "radius": 3.0, "time_after": "-30m"}],
        "temporal_query": [{"last_n_minutes": 5}, {"last_n_minutes": 30, "layer": "scene"},
                           {"time_after": "-3h", "time_before": "-2h"}, {"time_after": "-2h", "order": "oldest"},
                           {"last_n_minutes": 10, "near_x": cx, "near_y": cy, "spatial_radius": 3.0}],
        "episode_summary": [{"last_n": 1}, {"last_n": 3}, {"task_name": "patrol round 2"}],
        "get_current_context": [{}, {"radius": 5.0, "include_recent_minutes": 10}],
        "search_gists": [{"query": "kitchen"}, {"query": "a red mug on the table"},
                         {"query": "an office with a laptop", "time_after": "-3h"}],
        "entity_query": [{"name": "chair"}, {"name": "refrigerator"},
                         {"near_x": cx, "near_y": cy, "spatial_radius": 5.0},
                         {"name": "red mug", "last_seen_after": "-1h"}],
        "locate": [{"concept": q} for q in QUERIES],
        "recall": [{"query": q} for q in QUERIES[:4]],
        "body_status": [{}, {"layers": ["battery"]}],
    }


def query_strings(arg_sets: dict[str, list[dict[str, Any]]]) -> list[str]:
    out = []
    for sets in arg_sets.values():
        for kwargs in sets:
            for key in ("query", "concept"):
                if key in kwargs:
                    out.append(kwargs[key])
    return sorted(set(out))


# ---------------------------------------------------------------------- loading (child process)
def load(engine: str, n: int, folder: Path, export: Path, reuse: bool = False):
    from emem_ros.embeddings import HashingEmbeddingProvider

    stream = make_stream(n)
    provider = CachedProvider(HashingEmbeddingProvider())
    clock = [float(stream.stamp[0])]
    ready = folder / "ready.json"
    if reuse and ready.exists():  # built by an earlier run: open it as it was left
        clock[0] = float(stream.stamp[-1]) + 30.0
        if engine == OURS:
            memory = open_ours(folder, provider, lambda: clock[0], query_cache_enabled=False)
        else:
            memory = open_peer(folder, provider, lambda: clock[0], capacity=n + 20_000)
        return memory, stream, provider, clock, {**json.loads(ready.read_text()), "reused": True}
    if engine == OURS:
        memory = open_ours(folder, provider, lambda: clock[0], query_cache_enabled=False)
    else:
        memory = open_peer(folder, provider, lambda: clock[0], capacity=n + 20_000)
    add = adder(engine, memory)
    starts = dict(stream.episodes)
    peer_ids: list[str] = []
    t0 = time.perf_counter()
    for i, row in enumerate(stream.rows()):
        if i in starts:
            clock[0] = row[4]
            if memory.active_episode_id:
                memory.end_episode(consolidate=False)
            memory.start_episode(starts[i])
        got = add(*row)
        if engine == PEER:
            peer_ids.append(got)
    clock[0] = float(stream.stamp[-1])
    memory.end_episode(consolidate=False)
    flush(engine, memory)
    info: dict[str, Any] = {"ingest_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    if engine == OURS:
        # Consolidate everything (as if the window had passed), then query "30 s after the last observation".
        config = memory.config
        clock[0] = float(stream.stamp[-1]) + config.consolidation_window + config.consolidation_time_gap + 1.0
        memory.consolidate_time_window()
        memory.extract_entities(final=True)
        _export(memory, export)
    else:
        _import(memory, export, peer_ids)
    clock[0] = float(stream.stamp[-1]) + 30.0
    info["graph_s"] = time.perf_counter() - t0
    if reuse:
        if engine == OURS:
            memory.save()
        ready.write_text(json.dumps(info))
    return memory, stream, provider, clock, info


def _export(memory, path: Path) -> None:
    """Our gists (with their sources as stream rows: observation id = row + 1) and entities, as JSON."""
    conn = memory.store.reader()
    sources: dict[int, list[int]] = {}
    for obs_id, gist_id in conn.execute("SELECT id, gist_id FROM observations WHERE gist_id IS NOT NULL"):
        sources.setdefault(gist_id, []).append(obs_id - 1)
    gists = [{"text": text, "c": [cx, cy, cz or 0.0], "radius": radius, "t0": t0, "t1": t1, "count": count,
              "layers": json.loads(layers or "[]"), "rows": sources.get(gid, [])}
             for gid, text, cx, cy, cz, radius, t0, t1, count, layers in conn.execute(
                 "SELECT id, text, cx, cy, cz, radius, time_start, time_end, source_count, layers FROM gists")
             if cx is not None]
    entities = [{"name": name, "type": etype, "c": [x, y, z or 0.0], "first": first, "last": last,
                 "count": sightings, "conf": conf, "layer": layer}
                for name, etype, x, y, z, first, last, sightings, conf, layer in conn.execute(
                    "SELECT name, entity_type, x, y, z, first_seen, last_seen, sightings, confidence, layer"
                    " FROM entities") if x is not None]
    path.write_text(json.dumps({"gists": gists, "entities": entities}))


def _import(memory, path: Path, peer_ids: list[str]) -> None:
    import numpy as np
    from emem.types import EntityNode, GistNode

    data = json.loads(path.read_text())
    store = memory.store
    for g in data["gists"]:
        layers = g["layers"]
        store.add_gist(GistNode(text=g["text"], center_position=np.array(g["c"]), radius=g["radius"],
                                time_start=g["t0"], time_end=g["t1"], source_observation_count=g["count"],
                                source_observation_ids=[peer_ids[r] for r in g["rows"]],
                                layer_name=layers[0] if len(layers) == 1 else None))
    for e in data["entities"]:
        store.add_entity(EntityNode(name=e["name"], coordinates=np.array(e["c"]), last_seen=e["last"],
                                    first_seen=e["first"], observation_count=e["count"], confidence=e["conf"],
                                    entity_type=e["type"], layer_name=e["layer"] or "default"))


# ---------------------------------------------------------------------- timing (child process)
def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    engine, n = spec["engine"], spec["n"]
    memory, stream, provider, clock, info = load(engine, n, Path(spec["folder"]), Path(spec["export"]),
                                                 reuse=spec.get("reuse", False))
    arg_sets = calls(stream)
    provider.precompute(query_strings(arg_sets))
    if spec.get("no_label_memo") and engine == OURS:
        # The bench repeats each question, so remembered linkage labels would always hit.
        from emem_ros.tools import clusters

        clusters.LABELS = clusters.LabelMemo(entries=0)
    budget, max_samples = spec["budget"], spec["samples"]
    timings: dict[str, list[float]] = {}
    answers: dict[str, str] = {}
    by_args: dict[str, list] = {}
    tools = spec.get("only") or TOOL_NAMES
    for tool in tools:
        method = getattr(memory, tool)
        sets = arg_sets[tool]
        for kwargs in sets:  # warm-up: first calls build caches (catalog, FTS vocabulary, SQLite pages)
            answers.setdefault(tool, method(**kwargs))
        samples: list[float] = []
        per_set: list[list[float]] = [[] for _ in sets]
        started = time.perf_counter()
        clock = time.thread_time if spec.get("clock") == "cpu" else time.perf_counter
        while len(samples) < max_samples and (time.perf_counter() - started < budget or len(samples) < 2 * len(sets)):
            for k, kwargs in enumerate(sets):
                t0 = clock()
                method(**kwargs)
                took = clock() - t0
                samples.append(took)
                per_set[k].append(took)
        timings[tool] = samples
        by_args[tool] = [(json.dumps(kwargs), statistics.median(s) * 1000) for kwargs, s in zip(sets, per_set)]
    if spec.get("dump"):  # every answer in full, to compare two versions of the code on one memory
        full = {f"{tool} {json.dumps(kwargs)}": getattr(memory, tool)(**kwargs) for tool in tools
                for kwargs in arg_sets[tool]}
        Path(spec["dump"]).parent.mkdir(parents=True, exist_ok=True)
        Path(spec["dump"]).write_text(json.dumps(full, indent=1, sort_keys=True))
    if spec.get("profile"):
        _profile(memory, arg_sets, Path(spec["profile"]), f"{engine}-{n}", tools)
    counts = {}
    if engine == OURS:
        counts = {k: v for k, v in memory.store.counts().items() if k in ("gists", "entities", "episodes")}
    memory.close()
    return {"engine": engine, "n": n, **info, "counts": counts,
            "stats": {t: _stats(s) for t, s in timings.items()},
            "answers": {t: a[:300] for t, a in answers.items()}, "by_args": by_args}


def _profile(memory, arg_sets: dict[str, list[dict[str, Any]]], out: Path, label: str, tools, rounds: int = 40) -> None:
    """cProfile of each tool's calls (after the timed ones): where the time goes, one text file per tool."""
    import cProfile
    import io
    import pstats

    out.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        method = getattr(memory, tool)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(rounds):
            for kwargs in arg_sets[tool]:
                method(**kwargs)
        profiler.disable()
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(45)
        (out / f"{label}-{tool}.txt").write_text(text.getvalue())


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": statistics.median(ordered) * 1000, "p95": ordered[min(len(ordered) - 1,
                                                                          int(0.95 * len(ordered)))] * 1000,
            "n": len(ordered)}


def child(spec_json: str) -> int:
    logging.basicConfig(level=logging.ERROR)
    result = run_child(json.loads(spec_json))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------------- the parent
def run_case(engine: str, n: int, tmp: Path, args) -> dict[str, Any]:
    if args.reuse:
        tmp = Path(args.reuse)
    folder = tmp / f"{engine}-{n}"
    folder.mkdir(parents=True, exist_ok=bool(args.reuse))
    spec = {"engine": engine, "n": n, "folder": str(folder), "export": str(tmp / f"graph-{n}.json"),
            "budget": args.budget, "samples": args.samples, "reuse": bool(args.reuse), "profile": args.profile,
            "only": [t for t in (args.only or "").split(",") if t],
            "dump": args.dump_answers and f"{args.dump_answers}-{engine}-{n}.json", "clock": args.clock,
            "no_label_memo": args.no_label_memo}
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                              text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"engine": engine, "n": n, "error": f"over {args.timeout:.0f} s"}
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"engine": engine, "n": n, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    if not args.reuse:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return json.loads(lines[-1][7:])


def table(results: list[dict[str, Any]]) -> list[str]:
    ok = [r for r in results if "stats" in r]
    sizes = sorted({r["n"] for r in ok})
    lines = []
    for n in sizes:
        ours = next((r for r in ok if r["n"] == n and r["engine"] == OURS), None)
        peer = next((r for r in ok if r["n"] == n and r["engine"] == PEER), None)
        head = f"n = {n:,} observations"
        if ours is not None:
            head += (f"  (emem_ros: load {ours['ingest_s']:.1f} s + consolidation {ours['graph_s']:.1f} s; "
                     f"{ours['counts'].get('gists', 0)} gists, {ours['counts'].get('entities', 0)} entities, "
                     f"{ours['counts'].get('episodes', 0)} episodes)")
        lines += ["", head,
                  f"{'tool':22}{'emem_ros p50':>13}{'p95':>9}{'emem p50':>11}{'p95':>10}{'p50 ratio':>11}"
                  f"{'samples':>13}"]
        for tool in TOOL_NAMES:
            o = ours["stats"].get(tool) if ours else None
            p = peer["stats"].get(tool) if peer else None
            if o is None and p is None:
                continue
            ratio = f"{p['p50'] / o['p50']:.1f}x" if o and p else ""
            lines.append(
                f"{tool:22}{_ms(o, 'p50'):>13}{_ms(o, 'p95'):>9}{_ms(p, 'p50'):>11}{_ms(p, 'p95'):>10}{ratio:>11}"
                f"{(str(o['n']) if o else '-') + '/' + (str(p['n']) if p else '-'):>13}")
    for r in results:
        if "error" in r:
            lines.append(f"ERROR {r['engine']} n={r['n']}: {r['error']}")
    return lines


def _ms(stats: Optional[dict[str, float]], key: str) -> str:
    if stats is None:
        return "-"
    value = stats[key]
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", type=str, default=None, help="comma-separated sizes for both engines")
    parser.add_argument("--ours-only", type=str, default=None, help="comma-separated sizes for emem_ros alone")
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--budget", type=float, default=10.0, help="seconds of calls per tool (at least 2 rounds)")
    parser.add_argument("--samples", type=int, default=300, help="at most this many calls per tool")
    parser.add_argument("--timeout", type=float, default=2400.0)
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--reuse", type=str, default=None,
                        help="keep each memory in this folder and reuse it when a previous run built it")
    parser.add_argument("--by-args", action="store_true", help="print the p50 of each argument set")
    parser.add_argument("--show-answers", action="store_true", help="print each engine's first answer per tool")
    parser.add_argument("--profile", type=str, default=None, help="also write a cProfile per tool to this folder")
    parser.add_argument("--only", type=str, default=None, help="comma-separated tools to time (default: all ten)")
    parser.add_argument("--dump-answers", type=str, default=None,
                        help="write every answer in full to <this>-<engine>-<n>.json")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="time calls by the wall clock (default) or by this thread's CPU time (a loaded machine)")
    parser.add_argument("--no-label-memo", action="store_true",
                        help="switch the linkage memo (tools.clusters.LABELS) off: every call links afresh")
    parser.add_argument("--child", type=str, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.quick:
        args.budget = min(args.budget, 2.0)
    both = [int(float(s)) for s in (args.sizes if args.sizes is not None
                                    else ("2000" if args.quick else "10000,50000,100000")).split(",") if s]
    ours_only = [int(float(s)) for s in (args.ours_only if args.ours_only is not None
                                         else ("" if args.quick else "1000000")).split(",") if s]
    header = f"bench_tools ({'quick' if args.quick else 'full'}) on {machine_info()}"
    if args.clock == "cpu":
        header += "; timed by thread CPU time"
    print(header, flush=True)
    results = []
    total = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-tools-") as tmp:
        plan = [(OURS, n) for n in both + ours_only]
        if not args.skip_peer:
            plan += [(PEER, n) for n in both]  # after ours: emem imports the graph ours exported
        for engine, n in plan:
            t0 = time.perf_counter()
            result = run_case(engine, n, Path(tmp), args)
            results.append(result)
            print(f"  {engine:9} n={n:>9,}: {result.get('error', 'done')} [{time.perf_counter() - t0:.0f} s]",
                  flush=True)
    lines = [header, "", "Latency per tool call in ms (facade call, text answer; query embedding excluded):"]
    lines += table(results)
    lines += ["", "Ratio = emem p50 / emem_ros p50 (same data, same arguments, same run). Arguments per tool: "
              "see calls() in bench/bench_tools.py.", f"total bench time {time.perf_counter() - total:.0f} s"]
    print("\n" + "\n".join(lines))
    if args.by_args:
        for r in results:
            for tool, rows in r.get("by_args", {}).items():
                for kwargs, p50 in rows:
                    print(f"  {r['engine']:9} n={r['n']:>8} {tool:20} {p50:9.2f} ms  {kwargs}")
    if args.show_answers:
        for r in results:
            for tool, text in r.get("answers", {}).items():
                print(f"--- {r['engine']} n={r['n']} {tool}:\n{text}")
    if args.save:
        save_results("tools", lines, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
