"""The memory's tools over the Model Context Protocol, so any MCP-capable agent can use it.

The tool list is read from the memory's registry on every ``tools/list``
(never a fixed list): tools registered later (the experience ledger's,
stats) are served as soon as they exist. Calls go through
``memory.dispatch_tool_call``, so a bad call comes back as an error text the
agent can act on, never as a crash. The memory is flushed before the answer,
so what an agent stored is on disk when it hears "stored".

Uses the low-level server of the ``mcp`` package (2.x API) on stdio: while
serving, the package points fd 1 away from the wire, and our logging goes
to stderr.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from emem_ros.tools.host import ToolHost

log = logging.getLogger(__name__)

SERVER_NAME = "emem_ros"
INSTRUCTIONS = (
    "A robot's spatio-temporal memory: what it saw, where and when, its episodes and experiences. "
    "Query tools read; action tools (store_specific_memory, start_episode, end_episode, ...) write. "
    "Times accept epoch seconds, ISO dates or relative forms like '-10m'."
)


def tool_specs(memory: ToolHost) -> list[dict[str, Any]]:
    """The registry's current tools as MCP tool descriptions (name, description, inputSchema)."""
    out = []
    for definition in memory.get_tool_definitions(include_actions=True):
        function = definition["function"]
        schema = dict(function.get("parameters") or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        out.append({"name": function["name"], "description": function.get("description", ""),
                    "input_schema": schema})
    return out


def call(memory: ToolHost, name: str, arguments: Optional[dict[str, Any]]) -> tuple[str, bool]:
    """Run one call; returns (answer text, is_error). Never raises for a bad call."""
    text = memory.dispatch_tool_call(name, arguments or {})
    if not text.startswith("Error:"):  # a write is on disk before the agent hears of it (a no-op after reads)
        try:
            memory.flush()
        except Exception as exc:  # the answer must say the write is not on disk yet
            log.exception("flush after %s failed", name)
            return f"Error: {name} ran but storing its result failed: {exc}", True
    return text, text.startswith("Error:")


def build_server(memory: ToolHost) -> Any:
    """An ``mcp`` low-level Server serving ``memory``; calls run one at a time in a worker thread."""
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server

    limiter = anyio.CapacityLimiter(1)  # one call at a time: the memory's writer is single anyway

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        specs = await anyio.to_thread.run_sync(tool_specs, memory, limiter=limiter)
        return types.ListToolsResult(tools=[types.Tool(**spec) for spec in specs])

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text, is_error = await anyio.to_thread.run_sync(call, memory, params.name, params.arguments,
                                                        limiter=limiter)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)

    from emem_ros import __version__

    return Server(SERVER_NAME, version=str(__version__), instructions=INSTRUCTIONS,
                  on_list_tools=on_list_tools, on_call_tool=on_call_tool)


def serve_stdio(memory: ToolHost) -> None:
    """Serve until the client closes stdin."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(memory)

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)
