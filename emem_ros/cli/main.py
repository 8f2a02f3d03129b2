"""``emem``: replay bags into a memory and look inside memory files.

Each subcommand lives in its own module with ``register(subparsers)``; the
module must import nothing heavy at import time (``emem --help`` stays fast
and works without the optional extras).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Optional, Sequence

from emem_ros.core.errors import EmemError

SUBCOMMANDS = ("replay", "query", "stats", "map", "rebuild", "export", "importer", "mcp", "sync", "fleet",
               "embeddings", "forget", "fs")
"""Modules under emem_ros.cli; a missing one is skipped so partial installs still run."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="emem", description="emem_ros: a spatio-temporal memory for robots")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"emem_ros.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"emem_ros.cli.{name}":
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except EmemError as exc:
        print(f"emem {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"emem {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `emem query ... | head`: the reader left; that is not an error of ours
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail on the closed pipe too."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (embedded): nothing left to flush into it
        pass
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
