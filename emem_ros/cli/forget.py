"""``emem forget DB ...`` (erase, with proof) and ``emem forget-log DB`` (the audit trail).

Criteria combine (all must hold): ``--id obs-12`` (repeatable), ``--match
"red jacket"`` (exact words, any case), ``--similar-to TEXT
--min-similarity 0.8``, ``--entity ent-3|NAME``, ``--x --y --radius``,
``--since/--until``, ``--layer``. ``--dry-run`` lists what would go.
"""

from __future__ import annotations

import argparse
import getpass
import json
import time

from emem_ros.cli.common import NOW_CHOICES


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "forget", help="erase observations (and all that derives from them) from a memory and its files",
        description="Forget what the criteria select (all must hold), from SQLite, its FTS and vector indexes, "
                    "places, gists, entities, the operation log, the cold store and the dead letters. "
                    "The audit trail (emem forget-log) records ids and counts, never content.")
    parser.add_argument("db", help="memory file (.db)")
    parser.add_argument("--id", dest="ids", action="append", default=None, help="an observation id (repeatable)")
    parser.add_argument("--match", default=None, help="exact words, case-insensitive, e.g. \"red jacket\"")
    parser.add_argument("--similar-to", dest="similar_to", default=None, help="text to select by meaning")
    parser.add_argument("--min-similarity", dest="min_similarity", type=float, default=None,
                        help="cosine similarity at least this (with --similar-to; default 0.8)")
    parser.add_argument("--entity", default=None, help="an entity id (ent-3) or name")
    parser.add_argument("--x", type=float, default=None)
    parser.add_argument("--y", type=float, default=None)
    parser.add_argument("--radius", type=float, default=None, help="metres around (--x, --y)")
    parser.add_argument("--since", default=None, help="from this time (relative, ISO-8601 or epoch seconds)")
    parser.add_argument("--until", default=None, help="up to this time")
    parser.add_argument("--layer", default=None)
    parser.add_argument("--reason", default="", help="why (kept in the audit trail: do not quote the content)")
    parser.add_argument("--dry-run", dest="dry_run", action="store_true", help="list what would go; change nothing")
    parser.add_argument("--now", default="latest", help=f"the clock for relative times: {NOW_CHOICES}")
    parser.add_argument("--ollama-host", default=None, help="Ollama server for a memory built with an Ollama embedder")
    parser.set_defaults(func=handler)

    log_parser = subparsers.add_parser(
        "forget-log", help="list every forget and retention run of a memory (never what was forgotten)",
        description="The audit trail: when, who, why, the selector (free text withheld), counts.")
    log_parser.add_argument("db", help="memory file (.db)")
    log_parser.add_argument("--json", action="store_true", help="one JSON object a line, ids included")
    log_parser.add_argument("--limit", type=int, default=0, help="only the newest N entries")
    log_parser.set_defaults(func=log_handler)


def handler(args: argparse.Namespace) -> int:
    from pathlib import Path

    from emem_ros.cli.common import open_memory

    memory = open_memory(Path(args.db), now=args.now, ollama_host=args.ollama_host)
    try:
        report = memory.forget(ids=args.ids, match=args.match, similar_to=args.similar_to,
                               min_similarity=args.min_similarity, entity=args.entity, x=args.x, y=args.y,
                               radius=args.radius, since=args.since, until=args.until, layer=args.layer,
                               reason=args.reason, who=f"cli:{_user()}", dry_run=args.dry_run)
    finally:
        memory.close()
    print(report)
    if args.dry_run and report.ids:
        print("\n".join(report.ids))
    return 0


def log_handler(args: argparse.Namespace) -> int:
    import sqlite3
    from pathlib import Path

    from emem_ros.core.errors import StoreError
    from emem_ros.forgetting.audit import entries

    db = Path(args.db)
    if not db.is_file():
        raise StoreError(f"no memory file at {db}")
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        has = conn.execute("SELECT 1 FROM sqlite_master WHERE name='forget_log'").fetchone()
        found = entries(conn, args.limit) if has else []
    finally:
        conn.close()
    if not found:
        print("nothing was ever forgotten from this memory")
        return 0
    for e in found:
        if args.json:
            print(json.dumps({"id": e.id, "at": e.at, "who": e.who, "reason": e.reason, "kind": e.kind,
                              "selector": e.selector, "counts": e.counts, "ids": e.ids}))
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.at))
        counts = ", ".join(f"{k} {v}" for k, v in sorted(e.counts.items())
                           if isinstance(v, int) and not isinstance(v, bool) and k not in ("transactions",
                                                                                           "log_base_seq"))
        print(f"#{e.id} {when} UTC {e.kind} by {e.who}" + (f" ({e.reason})" if e.reason else "")
              + f": selector {json.dumps(e.selector, sort_keys=True)}; {counts}")
    return 0


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in a container
        return "unknown"
