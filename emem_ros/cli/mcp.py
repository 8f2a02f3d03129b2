"""``emem mcp DB``: serve a memory's tools to any MCP client over stdio.

stdout is the protocol wire: nothing else may be printed there. Logging
goes to stderr (``emem`` configures it so), and the ``mcp`` package points
fd 1 away from the wire while it serves.
"""

from __future__ import annotations

import argparse
import logging
import time

from emem_ros.cli.common import NOW_CHOICES

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mcp", help="serve the memory's tools over the Model Context Protocol (stdio)",
        description="Serve every tool and action of a memory file to an MCP client on stdin/stdout.")
    parser.add_argument("db", help="memory file (.db)")
    parser.add_argument("--now", default="wall",
                        help=f"the memory's clock for relative times: {NOW_CHOICES}; 'wall' keeps ticking "
                             "(default: wall)")
    parser.add_argument("--ollama-host", default=None, help="Ollama server for a memory built with an Ollama embedder")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError as exc:
        from emem_ros.core.errors import EmemError

        raise EmemError(f"the 'mcp' package is needed for this command (pip install 'emem_ros[mcp]'): {exc}") from exc
    from emem_ros.agent.mcp_server import serve_stdio
    from emem_ros.cli.common import open_memory

    memory = open_memory(args.db, now=args.now, ollama_host=args.ollama_host)
    if args.now == "wall":
        memory.set_clock(time.time)  # a live server: "the last 10 minutes" moves with the clock
    log.info("serving %s over MCP (stdio)", args.db)
    try:
        serve_stdio(memory)
    finally:
        memory.close()
    return 0
