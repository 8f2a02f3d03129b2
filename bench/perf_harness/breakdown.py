#!/usr/bin/env python3
"""Thread CPU ms per call spent inside each tool's main functions (inclusive of their callees).

    python breakdown.py N TOOLS ROUNDS [ROOT]     # MEMO=off: linkage memo off; KERNEL=off: no C kernel

Wraps the functions named in TARGETS with thread-time counters, runs ROUNDS rounds of every argument set
of each tool on the memory ``bench_tools.py --reuse $REUSE`` built, and prints the totals per call.
"""

from __future__ import annotations

import collections
import functools
import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any

TARGETS = """
emem_ros.tools.api MemoryTools.call
emem_ros.tools.env ToolEnv.prepare
emem_ros.tools.perception ranked_hits
emem_ros.tools.perception nearby_hits
emem_ros.tools.perception _places_near
emem_ros.tools.perception area_gists
emem_ros.tools.perception _rank_many
emem_ros.tools.perception _group_hit
emem_ros.tools.perception _representatives
emem_ros.tools.perception timeline
emem_ros.tools.ranking TextRanker.rank
emem_ros.tools.ranking TextRanker._keyword
emem_ros.tools.ranking _grow
emem_ros.tools.ranking _score_exactly
emem_ros.tools.ranking GistRanker.rank
emem_ros.tools.ranking GistRanker._allowed
emem_ros.tools.ranking GistRanker._read_gists
emem_ros.tools.ranking _gist_vectors
emem_ros.tools.ranking fuse
emem_ros.tools.ranking text_hits_by_key
emem_ros.tools.hybrid KeywordIndex.plan
emem_ros.tools.hybrid KeywordIndex.run
emem_ros.tools.aggregate AreaIndex.build
emem_ros.tools.aggregate Aggregator.representatives
emem_ros.tools.aggregate Aggregator.get_many
emem_ros.tools.locate _locate
emem_ros.tools.locate _relevance
emem_ros.tools.locate _Evidence.load
emem_ros.tools.locate _layer_kinds
emem_ros.tools.locate _evidence
emem_ros.tools.locate _recency
emem_ros.tools.placement measured_placements
emem_ros.tools.placement explained
emem_ros.tools.clusters linked_labels
emem_ros.tools.clusters kernel_labels
emem_ros.tools.clusters tree_labels
emem_ros.tools.clusters Linker.components
emem_ros.tools.knowledge entities_near
emem_ros.tools.body body_status
emem_ros.tools.context current_position
emem_ros.memfs.notes pinned_near
emem_ros.tools.perception _scan_window
emem_ros.tools.ranking text_hits
emem_ros.storage.place_cache PlaceCache.near
emem_ros.storage.place_cache PlaceCache.nearest
emem_ros.storage.place_cache PlaceCache.of_texts
emem_ros.tools.results SearchResult.__str__
emem_ros.tools.results LocateResult.__str__
emem_ros.tools.results RecallResult.__str__
emem_ros.tools.results ContextResult.__str__
"""

spent: collections.Counter[str] = collections.Counter()
calls: collections.Counter[str] = collections.Counter()


def wrap(module_name: str, qualname: str) -> None:
    """Count thread time in ``module.qualname``; module-level names imported elsewhere are patched too."""
    owner: Any = importlib.import_module(module_name)
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    held = owner.__dict__[parts[-1]]
    kind = staticmethod if isinstance(held, staticmethod) else classmethod if isinstance(held, classmethod) else None
    raw = held.__func__ if kind is not None else held

    @functools.wraps(raw)
    def counted(*args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return raw(*args, **kwargs)
        finally:
            spent[qualname] += time.thread_time() - t0
            calls[qualname] += 1

    setattr(owner, parts[-1], kind(counted) if kind is not None else counted)
    if len(parts) == 1:
        for module in list(sys.modules.values()):
            if module is not None and getattr(module, parts[0], None) is raw:
                setattr(module, parts[0], counted)


def main() -> None:
    n, tools, rounds = int(float(sys.argv[1])), sys.argv[2].split(","), int(sys.argv[3])
    root = Path(sys.argv[4]) if len(sys.argv) > 4 else Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(root / "bench"), str(root)]
    import bench_tools as bt

    reuse = Path(os.environ.get("REUSE", "/tmp/perf-bt"))
    memory, stream, provider, _, _ = bt.load("emem_ros", n, reuse / f"emem_ros-{n}", reuse / "graph.json", reuse=True)
    arg_sets = bt.calls(stream)
    provider.precompute(bt.query_strings(arg_sets))
    from emem_ros.tools import clusters

    if os.environ.get("MEMO") == "off":
        clusters.LABELS = clusters.LabelMemo(entries=0)
    if os.environ.get("KERNEL") == "off":
        clusters.KERNEL = None
    for line in TARGETS.strip().splitlines():
        module_name, qualname = line.split()
        try:
            wrap(module_name, qualname)
        except (AttributeError, KeyError, ImportError) as exc:
            print("skip", line, exc, file=sys.stderr)
    for tool in tools:
        method = getattr(memory, tool)
        for kwargs in arg_sets[tool]:
            method(**kwargs)
        spent.clear()
        calls.clear()
        t0, made = time.thread_time(), 0
        for _ in range(rounds):
            for kwargs in arg_sets[tool]:
                method(**kwargs)
                made += 1
        print(f"== {tool}: {(time.thread_time() - t0) / made * 1000:.3f} ms/call mean over {made}")
        for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
            print(f"   {name:40} {seconds / made * 1000:7.3f} ms/call  ({calls[name] / made:.1f} calls)")
    memory.close()


if __name__ == "__main__":
    main()
