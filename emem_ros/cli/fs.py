"""``emem fs DB ls|cat|write|log|diff|restore``: the developer's view of a memory's MemFS.

The developer acts as ``system``: every path is visible (session-private
``@`` folders included), and ``write`` puts files into ``/raw/artifacts/``,
which agents can read but not change.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "fs", help="the planners' filesystem (MemFS): ls, cat, write (to /raw/artifacts), log, diff, restore",
        description="Browse and manage the MemFS of a memory file as the system (the developer).")
    parser.add_argument("db", help="memory file (.db)")
    actions = parser.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("ls", help="list a folder")
    ls.add_argument("path", nargs="?", default="/")
    ls.add_argument("--depth", type=int, default=1)
    cat = actions.add_parser("cat", help="print a file")
    cat.add_argument("path")
    write = actions.add_parser("write", help="copy a local text file into /raw/artifacts/ (read-only for agents)")
    write.add_argument("source", help="local file, or - for standard input")
    write.add_argument("name", nargs="?", help="name under /raw/artifacts/ (default: the source's name)")
    write.add_argument("--description", default="", help="what the file is (agents see it in fs_ls)")
    log = actions.add_parser("log", help="history of a path (or of everything)")
    log.add_argument("path", nargs="?")
    log.add_argument("--limit", type=int, default=20)
    diff = actions.add_parser("diff", help="unified diff of a file between two versions")
    diff.add_argument("path")
    diff.add_argument("v1", type=int)
    diff.add_argument("v2", type=int, nargs="?")
    restore = actions.add_parser("restore", help="put a file back at an earlier version (a new version)")
    restore.add_argument("path")
    restore.add_argument("version", type=int)
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from emem_ros.cli.common import open_memory
    from emem_ros.core.errors import InvalidInputError
    from emem_ros.memfs import tools as fs_tools
    from emem_ros.memfs.layout import AGENTS_MD

    memory = open_memory(args.db, now="wall")
    try:
        system = memory.fs.system
        if args.action == "ls":
            listing = system.ls(args.path, args.depth)
            base = listing.path.rstrip("/").count("/") if listing.path != "/" else 0
            print(f"{listing.path}:")
            for entry in listing.entries:
                print(fs_tools._entry_line(entry, base))
            if listing.omitted:
                print(f"... and {listing.omitted} more")
        elif args.action == "cat":
            sys.stdout.write(system.text(args.path))
        elif args.action == "write":
            if args.source == "-":
                content = sys.stdin.read()
                name = args.name
            else:
                source = Path(args.source)
                if not source.is_file():
                    raise InvalidInputError(f"no file at {source}")
                content = source.read_bytes()  # check_text decodes it and refuses binary
                name = args.name or source.name
            if not name:
                raise InvalidInputError("give a name for the file read from standard input")
            target = f"/raw/artifacts/{name}"
            if target == AGENTS_MD:
                raise InvalidInputError("pick another name")
            result = system.write(target, content, args.description or None)
            print(f"wrote {target} (version {result.versions.get(target)})")
        elif args.action == "log":
            for entry in system.log(args.path, args.limit):
                print(f"op {entry.op_id} {fs_tools._when(entry.stamp)} {entry.agent}: {entry.op} {entry.path}"
                      f"{' -> ' + entry.dest if entry.dest else ''} {entry.summary}"
                      f"{f' [undone by op {entry.undone_by}]' if entry.undone_by else ''}")
        elif args.action == "diff":
            sys.stdout.write(system.diff(args.path, args.v1, args.v2))
        elif args.action == "restore":
            result = system.restore(args.path, args.version)
            print(f"restored {args.path} to version {args.version} (now version {result.versions.get(args.path)})")
        return 0
    finally:
        memory.close()
