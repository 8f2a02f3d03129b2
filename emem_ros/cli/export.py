"""``emem export DB OUT.jsonl[.gz]``: write a memory, or a time range / an episode of it, to a file.

The file holds observations (with their tier, episode, position, value and
metadata), texts with their vectors, episodes, gists, entities with their
edges, and experiences; ``emem import`` merges it into any memory built with
the same embedding model. Relative times resolve against ``--now`` (by
default the newest observation's time).
"""

from __future__ import annotations

import argparse

from emem_ros.cli.common import NOW_CHOICES


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "export", help="write a memory (or a time range / an episode of it) to a JSON-lines file",
        description="Export DB to OUT (JSON lines; gzip-compressed when OUT ends in .gz), losslessly: "
                    "observations, texts and their embeddings, episodes, gists, entities and their edges, "
                    "experiences.")
    parser.add_argument("db", help="memory file (.db)")
    parser.add_argument("out", help="export file: .jsonl or .jsonl.gz")
    parser.add_argument("--since", default=None, help="only from this time (e.g. --since=-2h, ISO-8601, epoch seconds)")
    parser.add_argument("--until", default=None, help="only up to this time")
    parser.add_argument("--episode", default=None, help="only this episode and its subtasks, e.g. ep-3")
    parser.add_argument("--now", default="latest", help=f"the clock for relative times: {NOW_CHOICES}")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from pathlib import Path

    from emem_ros.agent.transfer import export_file
    from emem_ros.cli.common import resolve_now
    from emem_ros.core.errors import InvalidInputError, StoreError
    from emem_ros.core.timeexpr import parse_time
    from emem_ros.core.types import NodeKind, parse_id

    db = Path(args.db)
    if not db.is_file():
        raise StoreError(f"no memory file at {db}")
    now = resolve_now(db, args.now) if args.since or args.until else 0.0
    episode = None
    if args.episode:
        try:
            kind, episode = parse_id(args.episode)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        if kind is not NodeKind.EPISODE:
            raise InvalidInputError(f"--episode needs an episode id such as ep-3, got {args.episode!r}")
    report = export_file(db, args.out, parse_time(args.since, now), parse_time(args.until, now), episode)
    print(report)
    return 0
