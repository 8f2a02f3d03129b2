"""``emem mcp DB``: an MCP client over stdio lists every tool and calls them."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from emem_ros import Memory, MemoryConfig
from emem_ros.embeddings import HashingEmbeddingProvider
from emem_ros.tools.specs import ACTIONS, TOOLS

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 30.0


@pytest.fixture
def small_memory(tmp_path) -> tuple[Path, set[str]]:
    """A hashing-embedder memory (it records model 'hashing-384', so the CLI picks the same embedder)."""
    path = tmp_path / "robot.db"
    memory = Memory(config=MemoryConfig(db_path=str(path), flush_interval=0.0, index_save_interval=0.0),
                    embedding_provider=HashingEmbeddingProvider(), get_current_time=lambda: 1_000_100.0)
    memory.add("a red mug on the kitchen table", x=1.0, y=2.0, timestamp=1_000_000.0, layer_name="scene",
               source_type="perception")
    memory.add("a sofa facing the tv", x=-3.0, y=0.5, timestamp=1_000_050.0, layer_name="scene",
               source_type="perception")
    memory.flush()
    names = {d["function"]["name"] for d in memory.get_tool_definitions()}
    memory.close()
    return path, names


def run_session(db: Path, script):
    """Start `emem mcp DB` as a subprocess, run ``script(session)`` as a client, return its result."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "emem_ros.cli.main", "mcp", str(db)],
                                   cwd=str(ROOT))

    async def main():
        with anyio.fail_after(TIMEOUT):
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=TIMEOUT) as session:
                    await session.initialize()
                    return await script(session)

    return anyio.run(main)


def texts(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def test_mcp_client_lists_every_tool_and_calls_them(small_memory):
    db, registered = small_memory

    async def script(session):
        listed = await session.list_tools()
        stored = await session.call_tool("store_specific_memory",
                                         {"text": "the charging dock is behind the blue door", "x": 4.0, "y": -1.0})
        found = await session.call_tool("semantic_search", {"query": "charging dock blue door", "n_results": 3})
        bad = await session.call_tool("semantic_search", {"n_results": 3})  # no query
        unknown = await session.call_tool("teleport", {"x": 1})
        return listed, stored, found, bad, unknown

    listed, stored, found, bad, unknown = run_session(db, script)
    served = {tool.name: tool for tool in listed.tools}
    assert {t.name for t in TOOLS + ACTIONS} <= set(served)  # all ten tools and the write actions
    assert set(served) == registered  # exactly the registry: nothing hard-coded, nothing missing
    assert served["semantic_search"].input_schema["properties"]["query"]["type"] == "string"
    assert "query" in served["semantic_search"].input_schema.get("required", [])
    assert not stored.is_error and "stored" in texts(stored).lower()
    assert not found.is_error and "charging dock is behind the blue door" in texts(found)
    assert bad.is_error and texts(bad).startswith("Error:") and "query" in texts(bad)
    assert unknown.is_error and "teleport" in texts(unknown)


def test_what_an_mcp_client_stored_is_on_disk_when_it_is_answered(small_memory):
    db, _ = small_memory

    async def script(session):
        return await session.call_tool("store_specific_memory", {"text": "keys are in the top drawer"})

    assert not run_session(db, script).is_error
    memory = Memory(config=MemoryConfig(db_path=str(db), flush_interval=0.0, index_save_interval=0.0),
                    embedding_provider=HashingEmbeddingProvider())
    try:
        stored = {r[0] for r in memory.store.reader().execute("SELECT text FROM texts")}
    finally:
        memory.close()
    assert "keys are in the top drawer" in stored


def test_the_tool_list_follows_the_registry_and_actions_are_flushed(make_memory):
    from emem_ros.agent.mcp_server import call, tool_specs
    from emem_ros.tools.registry import ToolSpec

    memory = make_memory()
    before = {spec["name"] for spec in tool_specs(memory)}
    memory.register_tool(ToolSpec(name="dock_status", description="Is the robot docked?",
                                  parameters={"type": "object", "properties": {}}, handler=lambda: "docked"))
    specs = {spec["name"]: spec for spec in tool_specs(memory)}
    assert set(specs) == before | {"dock_status"}
    assert specs["dock_status"]["input_schema"] == {"type": "object", "properties": {}}
    assert call(memory, "dock_status", None) == ("docked", False)
    text, is_error = call(memory, "store_specific_memory", {"text": "the mop is in the closet"})
    assert not is_error and memory.pending == 0  # on disk before the client hears back
    assert call(memory, "semantic_search", {"query": ""})[1] is True
