"""``emem stats DB``: what a memory holds, what recurs in it, and its size on disk.

Reads the file directly (no embedding model is loaded); ``--json`` prints
the numbers for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "stats", help="counts, most seen things, co-occurrence patterns, experience success rate, disk use",
        description="Observations per tier and layer, episodes, gists, entities and experiences; the most seen "
                    "texts and entities; entity pairs seen together at least --min-support times; the success "
                    "rate of recorded experiences; bytes on disk (file, WAL, indexes, log, cold store).")
    parser.add_argument("db", help="memory file (.db)")
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON")
    parser.add_argument("--top", type=int, default=5, help="how many most-seen items and patterns (default 5)")
    parser.add_argument("--min-support", type=float, default=2.0, dest="min_support",
                        help="visits two entities must share to count as a pattern (default 2)")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from emem_ros.agent.stats import stats_of_file
    from emem_ros.core.errors import InvalidInputError

    if args.top < 1:
        raise InvalidInputError(f"--top must be at least 1, got {args.top}")
    if not args.min_support > 0:
        raise InvalidInputError(f"--min-support must be positive, got {args.min_support}")
    stats = stats_of_file(args.db, top_n=args.top, min_support=args.min_support)
    if args.json:
        json.dump(stats.to_dict(), sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        print(stats)
    return 0
