"""Every tool, any arguments a fuzzer can produce: a plain answer or a plain error, never "unexpectedly".

Arguments are drawn from each tool's own JSON schema (so new tools are
fuzzed without touching this file): for each property a mix of values of
its type, of the wrong type, out of range (ids beyond 2^63, coordinates
beyond ±1,000 km, NaN, 1e308, huge integers), time words and junk text.

Timing: hypothesis's own ``deadline`` measures wall time per example and
fails at random on a loaded machine (this one is shared), so it is off;
instead each call's CPU time on the calling thread must stay under 1 s,
which no machine load changes and which any pathological input (a scan of
everything, a billion results) would blow. The memory holds 10,000
observations with gists, entities and episodes; ``max_examples`` keeps the
run to a few seconds.
"""

from __future__ import annotations

import math
import time

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from emem_ros import Memory, MemoryConfig  # noqa: E402
from emem_ros.core.errors import EmemError  # noqa: E402
from emem_ros.embeddings import HashingEmbeddingProvider  # noqa: E402

N_OBSERVATIONS = 10_000
START = 1_763_000_000.0
CPU_SECONDS = 1.0

HUGE_INTS = st.sampled_from([2**63, 2**63 - 1, -(2**63) - 1, 10**30, -(10**30), 2**64, 10**19])
HUGE_FLOATS = st.sampled_from([1e308, -1e308, 1e19, 1e6 + 1, -1e6 - 1, 4e6 + 1, 5e-324, math.inf, -math.inf,
                               math.nan])
TIME_WORDS = st.sampled_from(["today", "yesterday", "this morning", "this afternoon", "this evening", "last night",
                              "last hour", "since 9:00", "at 14:30", "-10m", "now", "10 minutes ago", "teatime",
                              "25:00", "at 13 pm", "9999-12-31T23:59:59Z", "0001-01-01", "-1e308s",
                              "last 1e300 minutes", "ep-3", "obs-99999999999999999999", "ep-18446744073709551616"])
JUNK = st.one_of(st.none(), st.booleans(), st.text(max_size=30), HUGE_INTS, HUGE_FLOATS,
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def value_for(schema: dict) -> st.SearchStrategy:
    """Values a caller might send for one property: mostly of its type, often absurd, sometimes anything."""
    kinds = schema.get("type", "string")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    options: list[st.SearchStrategy] = [JUNK, TIME_WORDS]
    for kind in kinds:
        if kind in ("number", "integer"):
            options += [st.integers(min_value=-(2**70), max_value=2**70), st.integers(-5, 200),
                        st.floats(allow_nan=True, allow_infinity=True), HUGE_FLOATS, HUGE_INTS,
                        st.floats(-50.0, 50.0).map(str)]
        elif kind == "string":
            options += [st.text(max_size=40), st.sampled_from(["red mug", "kitchen", "chair", "ep-1", "ep-0",
                                                               "obs-1", "gist-1", "ent-1", " ", "\x00", "é" * 5000])]
        elif kind == "array":
            options += [st.lists(st.one_of(st.text(max_size=10), st.integers(), st.floats()), max_size=4),
                        st.text(max_size=20)]
        elif kind == "object":
            options += [st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.floats(), st.text(max_size=8)),
                                        max_size=3), st.text(max_size=20)]
        elif kind == "boolean":
            options += [st.booleans(), st.sampled_from(["yes", "no", "maybe", 2])]
    enum = schema.get("enum")
    if enum:
        options.append(st.sampled_from(enum))
    return st.one_of(options)


def arguments_for(parameters: dict) -> st.SearchStrategy:
    properties = parameters.get("properties", {})
    return st.fixed_dictionaries({}, optional={name: value_for(schema) for name, schema in properties.items()})


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    clock = [START]
    config = MemoryConfig(db_path=str(folder / "memory.db"), flush_interval=0.0, index_save_interval=0.0,
                          consolidation_window=600.0, archive_after_seconds=1e6)
    memory = Memory(config=config, embedding_provider=HashingEmbeddingProvider(), get_current_time=lambda: clock[0])
    labels = ["red mug", "chair", "table", "person near the door", "laptop on the desk", "fire extinguisher"]
    for i in range(N_OBSERVATIONS):
        if i % 2000 == 0:
            if memory.active_episode_id:
                memory.end_episode(consolidate=False)
            memory.start_episode(f"patrol round {i // 2000 + 1}")
        clock[0] = START + i * 0.5
        if i % 50 == 0:
            memory.add_body_state(f"battery {100 - i / 200:.0f}%", "battery", value=100 - i / 200)
        else:
            memory.add(labels[i % len(labels)], x=(i % 40) * 0.5, y=(i % 13) * 0.7, layer_name="detections",
                       source_type="perception")
    memory.end_episode(consolidate=False)
    memory.flush()
    memory.maintenance(timeout=120)  # gists and entities for the tools that read them
    for definition in memory.get_tool_definitions():  # warm: first calls build catalogs
        memory.dispatch_tool_call(definition["function"]["name"], {})
    yield memory
    memory.close()


def tool_calls(memory_tools: list[dict]) -> st.SearchStrategy:
    return st.one_of([st.tuples(st.just(d["function"]["name"]), arguments_for(d["function"]["parameters"]))
                      for d in memory_tools])


DEFINITIONS = None


def definitions() -> list[dict]:
    """The schemas of every tool an LLM is offered (a memory's own, read once without data)."""
    global DEFINITIONS
    if DEFINITIONS is None:
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            with Memory(config=MemoryConfig(db_path=f"{folder}/m.db", flush_interval=0.0, index_save_interval=0.0),
                        embedding_provider=HashingEmbeddingProvider()) as empty:
                DEFINITIONS = empty.get_tool_definitions()
    return DEFINITIONS


FUZZ = settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", 400)), deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


@FUZZ
@given(call=tool_calls(definitions()))
def test_any_tool_call_gets_a_plain_answer_quickly(memory, call):
    name, arguments = call
    started = time.thread_time()
    answer = memory.dispatch_tool_call(name, arguments)
    cpu = time.thread_time() - started
    assert isinstance(answer, str) and answer
    assert "unexpectedly" not in answer, (name, arguments, answer)
    assert cpu < CPU_SECONDS, (name, arguments, cpu)


@FUZZ
@given(call=tool_calls(definitions()))
def test_typed_calls_raise_only_plain_errors(memory, call):
    name, arguments = call
    try:
        result = memory.tools.call(name, **arguments)
    except EmemError as exc:
        assert str(exc)
    except TypeError as exc:  # Python's own: a required argument left out (LLM calls get a sentence instead)
        assert str(exc).startswith("missing a required argument"), exc
    else:
        assert str(result)


def test_the_issue_examples_get_the_validation_sentence(memory):
    answer = memory.dispatch_tool_call("episode_summary", {"episode_id": 10**30})
    assert answer.startswith("Error:") and "beyond what the memory can hold" in answer
    answer = memory.dispatch_tool_call("spatial_query", {"x": 1e308, "y": 1, "radius": 1e308})
    assert answer == "Error: spatial_query: 'x' must be at most 1,000,000; got 1e+308"
    with pytest.raises(EmemError, match="'radius' must be at most 4,000,000"):
        memory.spatial_query(x=1, y=1, radius=1e308)
    with pytest.raises(EmemError, match="'n_results' must be a whole number"):
        memory.semantic_search(query="mug", n_results=2**64)
