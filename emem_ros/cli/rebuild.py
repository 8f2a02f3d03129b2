"""``emem rebuild DB``: regenerate a memory file and its indexes from its operation log."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Optional

from emem_ros.core.errors import EmemError

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "rebuild", help="regenerate the memory file and every index from its operation log",
        description="Replay DB.log/ (from its newest checkpoint, if any) into a fresh file that replaces DB, "
                    "then rebuild the vector and place indexes from it.")
    parser.add_argument("db", help="memory file (.db); its log is the folder DB.log beside it")
    parser.add_argument("--keep-old", dest="keep_old", action=argparse.BooleanOptionalAction, default=True,
                        help="keep the replaced file as DB.before-rebuild (default: keep)")
    parser.add_argument("--indexes", action=argparse.BooleanOptionalAction, default=True,
                        help="rebuild the vector and place indexes now rather than on the next open "
                             "(needs the embedder that built the file; default: now)")
    parser.add_argument("--ollama-host", default=None, help="Ollama server for a memory built with an Ollama embedder")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from emem_ros.storage.rebuild import rebuild_from_log

    path = Path(args.db)
    report = rebuild_from_log(path, keep_old=args.keep_old)
    start = f"the checkpoint at seq {report.base_seq}" if report.base_seq else "an empty file"
    lines = [
        f"rebuilt {path} from {start} + {report.records} log record(s); now at seq {report.last_seq}",
        f"log: {report.log_bytes / 1e6:.2f} MB; replay took {report.seconds:.2f} s",
        f"old file kept as {report.old_file}" if report.old_file else "old file removed",
    ]
    if args.indexes:
        lines.append(_rebuild_indexes(path, args.ollama_host))
    else:
        lines.append("indexes: rebuilt on the next open")
    print("\n".join(lines), file=sys.stdout)
    return 0


def _rebuild_indexes(path: Path, ollama_host: Optional[str]) -> str:
    """Open the rebuilt file once: the store rebuilds every derived index from SQLite and saves it."""
    from emem_ros.cli.common import open_memory

    try:
        memory = open_memory(path, ollama_host=ollama_host)
    except EmemError as exc:
        log.warning("indexes not rebuilt now (%s); they are rebuilt on the next open", exc)
        return f"indexes: not rebuilt now ({exc}); they are rebuilt on the next open"
    try:
        opened = memory.store.open_report
        sizes = ", ".join(f"{name} {info['size']}" for name, info in opened.items() if isinstance(info, dict))
    finally:
        memory.close()
    return f"indexes rebuilt: {sizes}"
