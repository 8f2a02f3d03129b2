"""Each tool is declared once (ToolDef) and everything else follows from the declaration."""

from __future__ import annotations

import inspect

import pytest

from emem_ros import Memory
from emem_ros.agent.tools import AGENT_TOOLS
from emem_ros.tools.specs import TOOL_SPECS

DECLARED_ALL = (*TOOL_SPECS, *AGENT_TOOLS)
DECLARED = tuple(t for t in DECLARED_ALL if t.llm)


@pytest.mark.parametrize("tool", DECLARED_ALL, ids=lambda t: t.name)
def test_the_schema_is_the_signature_of_what_runs(tool):
    """The LLM's parameters are the function's keyword arguments; required ones have no default."""
    params = tool.signature.parameters
    assert list(params) == list(tool.properties), tool.name
    required = [name for name, p in params.items() if p.default is inspect.Parameter.empty]
    assert required == tool.required, tool.name
    assert set(tool.time_params) <= set(params)
    assert all(schema.get("description") for schema in tool.properties.values()), tool.name
    assert tool.kind in ("query", "action")
    assert tool.cache is None or tool.kind == "query", "an action is never answered from cache"


def test_the_facade_methods_are_derived_from_the_declarations(make_memory):
    memory = make_memory()
    facade = [t for t in TOOL_SPECS if t.facade]
    assert {t.name for t in facade} >= {"semantic_search", "locate", "body_status", "store_specific_memory"}
    for tool in facade:
        method = getattr(Memory, tool.name)
        assert method.__doc__ == tool.description
        assert list(inspect.signature(getattr(memory, tool.name)).parameters) == list(tool.properties)
    memory.add("red mug on the table", x=1.0, y=2.0, layer_name="detections", source_type="perception")
    text = memory.locate("red mug")
    typed = memory.tools.locate("red mug")  # the same question again: answered from the query cache
    assert text == str(typed).split("\nNote: answered from memory cache")[0] and typed.found
    # the eMEM episode actions keep returning ids, not the LLM's sentence
    assert memory.start_episode("tidy").startswith("ep-")


def test_registry_definitions_are_the_declarations(make_memory):
    memory = make_memory()
    offered = {d["function"]["name"]: d["function"] for d in memory.get_tool_definitions()}
    for tool in DECLARED:
        assert offered[tool.name]["parameters"] == tool.parameters
        assert offered[tool.name]["description"] == tool.description


def test_a_tool_kept_from_llms_is_callable_but_not_offered(make_memory):
    from dataclasses import replace

    memory = make_memory()
    hidden = replace(next(t for t in TOOL_SPECS if t.name == "locate"), name="locate_quietly", llm=False)
    memory.register_tool(hidden)
    assert "locate_quietly" not in {d["function"]["name"] for d in memory.get_tool_definitions()}
    assert memory.dispatch_tool_call("locate_quietly", {"concept": "mug"}).startswith("Error: there is no tool")
    assert memory.tools.call("locate_quietly", "mug").concept == "mug"


def test_forget_is_kept_from_llms_unless_allowed(make_memory):
    memory = make_memory()
    assert "forget" not in {d["function"]["name"] for d in memory.get_tool_definitions()}
    assert memory.dispatch_tool_call("forget", {"match": "mug"}).startswith("Error: there is no tool")
    allowed = make_memory("allowed.db", allow_llm_forget=True)
    allowed.add("red mug", x=1.0, y=1.0)
    allowed.flush()
    assert "forget" in {d["function"]["name"] for d in allowed.get_tool_definitions()}
    assert "would forget 1" in allowed.dispatch_tool_call("forget", {"match": "mug", "dry_run": True})
    assert allowed.store.counts()["observations"] == 1
