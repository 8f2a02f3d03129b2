"""The tool-calling surface: definitions, dispatch, argument checks, plain-words errors, write actions."""

from __future__ import annotations

import json

import pytest

from emem_ros.tools import ToolSpec
from emem_ros.tools.results import SearchResult
from test.support.scene import scene_memory

TEN = ["semantic_search", "spatial_query", "temporal_query", "episode_summary", "get_current_context",
       "search_gists", "entity_query", "locate", "recall", "body_status"]
ACTIONS = ["store_specific_memory", "start_episode", "end_episode"]
AGENT = ["record_experience", "find_experiences", "memory_stats"]
AGENT_QUERIES = ["find_experiences", "memory_stats"]
FS = ["fs_ls", "fs_read", "fs_write", "fs_edit", "fs_mkdir", "fs_mv", "fs_rm", "fs_peek", "fs_search", "fs_log",
      "fs_undo", "fs_restore"]
FS_QUERIES = ["fs_ls", "fs_read", "fs_peek", "fs_search", "fs_log"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    # No query cache here: these tests compare repeated calls' answers (test_agent_cache.py tests the cache).
    memory, clock, scene = scene_memory(tmp_path_factory.mktemp("registry"), steps_per_room=60,
                                        query_cache_enabled=False)
    yield memory, clock, scene
    memory.close()


def test_definitions_have_the_openai_ollama_shape(world):
    memory, _, _ = world
    definitions = memory.get_tool_definitions()
    assert [d["function"]["name"] for d in definitions] == TEN + ACTIONS + AGENT + FS
    json.dumps(definitions)
    for definition in definitions:
        assert definition["type"] == "function"
        function = definition["function"]
        assert len(function["description"]) > 80
        params = function["parameters"]
        assert params["type"] == "object"
        assert set(params["required"]) <= set(params["properties"])
        for name, schema in params["properties"].items():
            assert schema.get("description"), (function["name"], name)
    assert [d["function"]["name"] for d in memory.get_tool_definitions(include_actions=False)] == TEN + AGENT_QUERIES + FS_QUERIES
    search = definitions[0]["function"]["parameters"]
    assert search["required"] == ["query"]
    assert search["properties"]["time_after"]["type"] == ["string", "number"]


def test_definitions_are_accepted_by_the_ollama_client_types(world):
    from ollama._types import Tool

    memory, _, _ = world
    for definition in memory.get_tool_definitions():
        Tool.model_validate(definition)


def test_dispatch_accepts_dicts_json_text_and_lenient_types(world):
    memory, clock, _ = world
    direct = memory.semantic_search("red chair", n_results=3)
    assert memory.dispatch_tool_call("semantic_search", {"query": "red chair", "n_results": 3}) == direct
    assert memory.dispatch_tool_call("semantic_search", '{"query": "red chair", "n_results": "3"}') == direct
    assert memory.dispatch_tool_call("semantic_search", {"query": "red chair", "n_results": 3.0}) == direct
    assert memory.dispatch_tool_call("semantic_search", {"query": "red chair", "n_results": 3, "layer": None}) \
        == direct
    numeric = memory.dispatch_tool_call("temporal_query", {"time_after": clock.now - 60, "time_before": clock.now})
    relative = memory.dispatch_tool_call("temporal_query", {"time_after": "-1m", "time_before": "now"})
    assert numeric == relative and not numeric.startswith("Error")
    assert memory.dispatch_tool_call("body_status", None).startswith("Body status:")
    assert memory.dispatch_tool_call("body_status", "") == memory.dispatch_tool_call("body_status", {})
    assert memory.dispatch_tool_call("body_status", {"layers": "battery"}) == memory.body_status(["battery"])
    assert memory.dispatch_tool_call("temporal_query", {"order": "OLDEST", "n_results": 2}) == \
        memory.temporal_query(order="oldest", n_results=2)


BAD_CALLS = [
    ("semantic_serch", {"query": "x"}, ["no tool named 'semantic_serch'", "Did you mean semantic_search"]),
    ("", {}, ["needs a tool name"]),
    (None, {}, ["needs a tool name"]),
    ("semantic_search", {"query": "x", "radius": 2}, ["no argument 'radius'", "spatial_radius"]),
    ("semantic_search", {}, ["needs 'query'", "Usage: semantic_search(query"]),
    ("spatial_query", {"x": 1}, ["needs 'y'"]),
    ("semantic_search", {"query": "x", "n_results": "ten"}, ["'n_results' must be a whole number"]),
    ("semantic_search", {"query": "x", "n_results": 2.5}, ["'n_results' must be a whole number"]),
    ("semantic_search", {"query": "x", "n_results": 0}, ["at least 1"]),
    ("semantic_search", {"query": "x", "near_x": "left", "near_y": 1}, ["'near_x' must be a number"]),
    ("semantic_search", {"query": "x", "near_x": 1.0}, ["both near_x and near_y"]),
    ("semantic_search", {"query": ["a"]}, ["'query' must be text"]),
    ("semantic_search", {"query": "x", "time_after": "yesterday-ish"}, ["time_after", "-10m"]),
    ("semantic_search", {"query": "x", "time_after": "-5 fortnights"}, ["time_after", "unknown time unit"]),
    ("semantic_search", {"query": "x", "time_after": "-1m", "time_before": "-1h"}, ["later than time_before"]),
    ("semantic_search", {"query": "x", "episode_id": "ep-99"}, ["no episode ep-99"]),
    ("semantic_search", {"query": "x", "episode_id": "episode three"}, ["not an episode id"]),
    ("semantic_search", {"query": "x", "episode_id": "gist-2"}, ["not an episode id"]),
    ("episode_summary", {"episode_id": "ep-99"}, ["no episode ep-99"]),
    ("spatial_query", {"x": 1, "y": 2, "radius": -1}, ["'radius' must be more than 0"]),
    ("temporal_query", {"order": "sideways"}, ["'order' must be one of newest, oldest"]),
    ("body_status", {"layers": 5}, ["'layers' must be a list"]),
    ("end_episode", {"success": "maybe"}, ["'success' must be true or false"]),
    ("store_specific_memory", {"text": "x", "metadata": "not json"}, ["'metadata' must be a JSON object"]),
    ("store_specific_memory", {"text": "x", "x": 1.0}, ["give both x and y"]),
    ("store_specific_memory", {"text": "   "}, ["text must be a non-empty string"]),
    ("start_episode", {"name": "sub", "parent_episode_id": "ep-77"}, ["no episode ep-77"]),
    ("semantic_search", "{not json", ["not valid JSON", '{"query": "..."}']),
    ("semantic_search", "[1, 2]", ["must be a JSON object"]),
    ("semantic_search", 42, ["must be a JSON object"]),
]


@pytest.mark.parametrize("name, arguments, phrases", BAD_CALLS)
def test_bad_calls_get_plain_words_errors_never_exceptions(world, name, arguments, phrases):
    memory, _, _ = world
    answer = memory.dispatch_tool_call(name, arguments)
    assert isinstance(answer, str) and answer.startswith("Error:"), answer
    for phrase in phrases:
        assert phrase in answer, (phrase, answer)


def test_a_failing_handler_becomes_an_error_string(world):
    memory, _, _ = world

    def explode(**_):
        raise RuntimeError("disk on fire")

    memory.register_tool(ToolSpec("explode", "Fails on purpose, for the test of failure handling.",
                                  {"type": "object", "properties": {}}, explode))
    try:
        answer = memory.dispatch_tool_call("explode", {})
        assert answer.startswith("Error: explode failed unexpectedly") and "disk on fire" in answer
    finally:
        memory.tools.registry.unregister("explode")


def test_other_modules_can_register_tools(world):
    memory, _, _ = world
    calls = []

    def lessons(topic: str, n_results: int = 3, since=None) -> str:
        calls.append((topic, n_results, since))
        return f"{n_results} lessons about {topic}"

    spec = ToolSpec(
        "find_lessons", "Find what was learned before about a topic, best first, from the experience ledger.",
        {"type": "object", "properties": {
            "topic": {"type": "string", "description": "What the lesson is about."},
            "n_results": {"type": "integer", "description": "How many.", "minimum": 1},
            "since": {"type": ["string", "number"], "description": "Only lessons after this time."}},
         "required": ["topic"]},
        lessons, time_params=frozenset({"since"}))
    memory.register_tool(spec)
    try:
        assert "find_lessons" in [d["function"]["name"] for d in memory.get_tool_definitions()]
        assert memory.dispatch_tool_call("find_lessons", {"topic": "mugs", "n_results": "2"}) == \
            "2 lessons about mugs"
        memory.dispatch_tool_call("find_lessons", {"topic": "mugs", "since": "-1h"})
        assert calls[-1][2] == pytest.approx(memory.now() - 3600)
        assert "needs 'topic'" in memory.dispatch_tool_call("find_lessons", {})
        with pytest.raises(ValueError, match="already registered"):
            memory.register_tool(spec)
        memory.register_tool(spec, replace=True)
        with pytest.raises(ValueError, match="required names unknown"):
            memory.register_tool(ToolSpec("broken", "x" * 20, {"type": "object", "properties": {},
                                                                "required": ["q"]}, lessons))
    finally:
        memory.tools.registry.unregister("find_lessons")


def test_tools_for_registration_are_named_callables(world):
    memory, _, _ = world
    pairs = memory.get_tools_for_registration()
    assert [d["function"]["name"] for _, d in pairs] == TEN + ACTIONS + AGENT + FS
    search, definition = pairs[0]
    assert search.__name__ == "semantic_search" and search.__doc__ == definition["function"]["description"]
    assert search(query="red chair", n_results=2) == memory.semantic_search("red chair", n_results=2)
    assert search(querry="red chair").startswith("Error:")


def test_facade_returns_text_and_tools_return_typed_results(world):
    memory, _, _ = world
    assert isinstance(memory.tools.semantic_search("red chair"), SearchResult)
    for name in TEN:
        method = getattr(memory, name)
        if name in ("semantic_search", "search_gists", "recall", "locate"):
            out = method("red chair")
        elif name == "spatial_query":
            out = method(2.0, 3.0)
        else:
            out = method()
        assert isinstance(out, str) and out


def test_store_specific_memory_is_searchable_at_once(make_memory, clock):
    memory = make_memory()
    answer = memory.dispatch_tool_call("store_specific_memory", {
        "text": "the charger is behind the sofa", "x": 4.0, "y": -1.0, "metadata": {"by": "planner"}})
    assert answer.startswith("Stored obs-") and "layer 'agent_notes'" in answer and "(4.0, -1.0)" in answer
    assert memory.pending == 0
    hit = memory.tools.semantic_search("charger sofa").hits[0]
    assert hit.text == "the charger is behind the sofa" and hit.layer == "agent_notes"
    observation = memory.get_observation(hit.id)
    assert observation.source_type == "manual" and observation.metadata == {"by": "planner"}
    assert memory.tools.locate("charger").position[:2] == (4.0, -1.0)
    note = memory.store_specific_memory("call alice at five", layer_name="reminders")
    assert "layer 'reminders'" in note and "(no position)" in note


def test_notes_cannot_go_into_body_layers(make_memory):
    memory = make_memory()
    memory.add_body_state("battery 80%", "battery", value=0.8)
    answer = memory.dispatch_tool_call("store_specific_memory", {"text": "hello", "layer_name": "battery"})
    assert answer.startswith("Error:") and "body readings" in answer


def test_episode_actions_through_dispatch(make_memory, clock):
    memory = make_memory()
    assert memory.dispatch_tool_call("end_episode", {}) == "No episode is active, so there was nothing to end."
    started = memory.dispatch_tool_call("start_episode", {"name": "fetch mug", "goal": "bring the mug"})
    assert started.startswith("Started episode ep-1 \"fetch mug\"")
    nested = memory.dispatch_tool_call("start_episode", {"name": "find mug", "parent_episode_id": "ep-1"})
    assert "ep-2" in nested and "subtask of ep-1" in nested
    memory.dispatch_tool_call("store_specific_memory", {"text": "the mug is on the counter"})
    clock.advance(10)
    ended = memory.dispatch_tool_call("end_episode", {"result": "found it", "success": "true",
                                                      "consolidate": False})
    assert ended == 'Ended episode ep-2 "find mug" (succeeded). Episode ep-1 is still active.'
    episode = memory.store.get_episode(2)
    assert episode.result == "found it" and episode.success is True and episode.parent_id == "ep-1"
    hit = memory.tools.semantic_search("mug counter").hits[0]
    assert hit.episode_id == "ep-2"
    assert memory.dispatch_tool_call("end_episode", {"success": False}).startswith('Ended episode ep-1 "fetch mug"'
                                                                                   " (failed).")
    assert memory.active_episode_id is None
