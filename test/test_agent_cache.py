"""The query cache: hits say so, near-duplicates hit, writes in scope invalidate, the rest does not."""

from __future__ import annotations

import json
import sqlite3

import pytest

from emem_ros.storage.events import Commit
from emem_ros.storage.store import MemoryStore
from emem_ros.tools.query_cache import CACHE_NOTE, cache_note_of
from emem_ros.tools.scopes import (
    ANY,
    BODY,
    LAYERSET,
    OBS_ANY,
    PERCEPTION,
    WriteScopes,
    layer_scope,
)
from test.support.scene import add_entity, add_gist

T0 = 1_763_800_000.0


class Ticker:
    """Wall clock of the cache in tests."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(make_memory, clock):
    clock.now = T0 + 100
    memory = make_memory()
    memory.add("red chair in the kitchen", 2.0, 3.0, timestamp=T0, layer_name="detections",
               source_type="perception")
    memory.add("coffee mug on the counter", 2.5, 2.0, timestamp=T0 + 1, layer_name="detections",
               source_type="perception")
    memory.add("the kitchen is bright", 3.0, 3.0, timestamp=T0 + 2, layer_name="scene", source_type="perception")
    memory.add_body_state("battery 80%", "battery", timestamp=T0 + 3, value=0.8)
    memory.flush()
    ticker = Ticker()
    memory.tools.cache.clock = ticker
    return memory, ticker


def cached(result) -> bool:
    return cache_note_of(result) is not None


def test_a_repeated_question_is_answered_from_cache_and_says_so(world):
    memory, ticker = world
    first = memory.tools.semantic_search("red chair")
    ticker.now += 12
    second = memory.tools.semantic_search("red chair")
    assert not cached(first) and cached(second)
    assert [h.id for h in second.hits] == [h.id for h in first.hits] and second.hits
    assert cache_note_of(second) == (f'{CACHE_NOTE}: same as "red chair" asked 12 s ago; nothing it depends on '
                                     f'was written since')
    text = memory.dispatch_tool_call("semantic_search", {"query": "red chair"})
    assert text.splitlines()[-1].startswith(f"Note: {CACHE_NOTE}")
    assert first.notes == []  # the caller's copy is never touched by later hits
    stats = memory.tools.cache.stats()
    assert (stats["hits"], stats["misses"]) == (2, 1) and stats["hit_rate"] == pytest.approx(2 / 3)


def test_a_close_paraphrase_hits_but_different_words_do_not(make_memory, world):
    memory, _ = world
    memory.tools.semantic_search("where is the red chair")
    assert cached(memory.tools.semantic_search("Where is the red chair?"))  # same words, case, punctuation
    # Same keywords, cosine 0.94 with the hashing embedder: a hit only when the threshold allows it.
    memory.tools.semantic_search("red chair in the kitchen")
    assert not cached(memory.tools.semantic_search("the red chair in the kitchen"))
    memory.tools.cache.threshold = 0.9
    assert cached(memory.tools.semantic_search("the red chair in the kitchen"))
    memory.tools.cache.threshold = 0.1
    memory.tools.semantic_search("open the kitchen door")
    assert not cached(memory.tools.semantic_search("close the kitchen door"))  # keywords differ


def test_other_arguments_or_another_tool_miss(world):
    memory, _ = world
    memory.tools.semantic_search("red chair", n_results=3)
    assert not cached(memory.tools.semantic_search("red chair", n_results=4))
    assert not cached(memory.tools.semantic_search("red chair", n_results=3, layer="scene"))
    assert not cached(memory.tools.locate("red chair"))
    assert cached(memory.tools.semantic_search("red chair", n_results=3))
    assert cached(memory.tools.semantic_search(query="red chair", n_results=3, layer=None))  # same call


def test_a_write_in_scope_invalidates_and_writes_elsewhere_do_not(world, clock):
    memory, _ = world
    tools = memory.tools
    tools.semantic_search("red chair")
    tools.semantic_search("bright", layer="scene")
    tools.search_gists("kitchen")
    tools.entity_query(name="chair")
    tools.find_experiences(query="mug")
    # A body reading, an experience: no perception answer changes.
    memory.add_body_state("battery 79%", "battery", timestamp=T0 + 5, value=0.79)
    memory.record_experience("fetch the mug", result="got it", success=True, timestamp=T0 + 6)
    assert cached(tools.semantic_search("red chair"))
    assert cached(tools.search_gists("kitchen")) and cached(tools.entity_query(name="chair"))
    assert not cached(tools.find_experiences(query="mug"))  # the ledger changed
    # A detection: unfiltered perception answers change, the scene layer's do not.
    memory.add("red chair by the door", 0.5, 0.5, timestamp=T0 + 7, layer_name="detections",
               source_type="perception")
    answer = tools.semantic_search("red chair")  # the buffered observation is flushed first
    assert not cached(answer) and any("by the door" in h.text for h in answer.hits)
    assert cached(tools.semantic_search("bright", layer="scene"))
    # Gists and entities invalidate their own tools.
    add_gist(memory, "the kitchen has a red chair", (2.0, 3.0, 0.0), 2.0, T0, T0 + 3)
    assert not cached(tools.search_gists("kitchen"))
    assert cached(tools.entity_query(name="chair"))
    add_entity(memory, "red chair", "furniture", (2.0, 3.0, 0.0), 3, T0, T0 + 7)
    assert not cached(tools.entity_query(name="chair"))
    stats = tools.cache.stats()
    assert stats["stale"] >= 4


def test_archival_and_consolidation_invalidate_observation_answers(make_memory, clock):
    clock.now = T0
    memory = make_memory(consolidation_window=60.0, archive_after_seconds=10.0, consolidation_min_samples=2)
    for i in range(6):
        memory.add("red chair", 2.0 + 0.01 * i, 3.0, timestamp=T0 + i, layer_name="detections",
                   source_type="perception")
    memory.flush()
    clock.now = T0 + 500
    memory.tools.semantic_search("red chair")
    assert cached(memory.tools.semantic_search("red chair"))
    assert memory.consolidate_time_window(timeout=30).gist_ids
    assert not cached(memory.tools.semantic_search("red chair"))  # rows promoted, a gist appeared
    clock.now += 100
    assert memory.archive(timeout=30).observations == 6
    answer = memory.tools.semantic_search("red chair")
    assert not cached(answer) and all(h.kind == "gist" for h in answer.hits)


def test_relative_windows_are_never_served_stale(world, clock):
    memory, _ = world
    memory.tools.temporal_query(time_after="-10m")
    assert cached(memory.tools.temporal_query(time_after="-10m"))  # same clock: the same window
    assert cached(memory.tools.temporal_query(time_after=clock.now - 600))  # the same window, given as a number
    clock.advance(30)
    assert not cached(memory.tools.temporal_query(time_after="-10m"))  # another window now
    memory.tools.temporal_query(last_n_minutes=5)
    clock.advance(1)
    assert not cached(memory.tools.temporal_query(last_n_minutes=5))


def test_a_cached_answer_is_rendered_at_the_current_clock(world, clock):
    memory, _ = world
    first = str(memory.tools.semantic_search("coffee mug"))
    clock.advance(3600)
    second = str(memory.tools.semantic_search("coffee mug"))
    assert "(2m ago)" in first and "(62m ago)" in second and CACHE_NOTE in second


def test_ttl_size_bound_and_switches(make_memory, world):
    memory, ticker = world
    cache = memory.tools.cache
    memory.tools.semantic_search("red chair")
    ticker.now += cache.ttl + 1
    assert not cached(memory.tools.semantic_search("red chair")) and cache.stats()["expired"] == 1
    cache.size = 2
    for query in ("coffee mug", "kitchen", "battery"):
        memory.tools.semantic_search(query)
    assert cache.stats()["entries"] == 2 and cache.stats()["evicted"] >= 1
    assert not cached(memory.tools.semantic_search("coffee mug"))  # the oldest went first
    memory.config.recency_weight = 0.5  # ranking then depends on the clock: no cache
    memory.tools.semantic_search("kitchen")
    assert not cached(memory.tools.semantic_search("kitchen"))
    off = make_memory("off.db", query_cache_enabled=False)
    off.add("red chair", 1.0, 1.0, layer_name="detections", source_type="perception")
    off.tools.semantic_search("red chair")
    assert not cached(off.tools.semantic_search("red chair"))
    assert off.tools.cache.stats()["hits"] == 0


def test_errors_are_not_cached_and_uncacheable_tools_stay_fresh(world):
    memory, _ = world
    for _ in range(2):
        assert memory.dispatch_tool_call("semantic_search", {"query": "chair", "episode_id": "ep-9"}).startswith(
            "Error:")
        assert CACHE_NOTE not in memory.dispatch_tool_call("body_status", {})
        assert CACHE_NOTE not in memory.dispatch_tool_call("get_current_context", {})
        assert CACHE_NOTE not in memory.dispatch_tool_call("memory_stats", {})


def test_hit_rate_is_in_memory_stats(world):
    memory, _ = world
    for _ in range(3):
        memory.tools.locate("coffee mug")
    stats = json.loads(json.dumps(memory.tools.memory_stats().to_dict()))
    assert stats["cache"]["hits"] == 2 and stats["cache"]["misses"] == 1
    assert stats["cache"]["hit_rate"] == pytest.approx(2 / 3)
    assert "hit rate 67%" in memory.dispatch_tool_call("memory_stats", {})


def test_a_write_by_another_process_invalidates_everything(world):
    memory, _ = world
    memory.tools.search_gists("kitchen")
    assert cached(memory.tools.search_gists("kitchen"))
    other = sqlite3.connect(memory.config.db_path)  # a writer that is not this memory
    with other:
        other.execute("INSERT INTO gists(text, time_start, time_end, source_count, created_at)"
                      " VALUES('the kitchen at night', 1, 2, 0, 3)")
        other.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'log_seq'")
    other.close()
    assert not cached(memory.tools.search_gists("kitchen"))
    assert cached(memory.tools.search_gists("kitchen"))  # noticed once, not on every call


def test_unknown_writes_invalidate_everything(make_memory):
    memory = make_memory(log_enabled=False)  # no statements to read: any commit counts as 'everything'
    memory.add("red chair", 1.0, 1.0, layer_name="detections", source_type="perception")
    memory.tools.search_gists("chair")
    memory.record_experience("fetch the mug")
    assert not cached(memory.tools.search_gists("chair"))


def test_scopes_are_read_from_the_statements():
    scopes = WriteScopes()
    insert = ("INSERT INTO observations(id, text_id, stamp, layer, source_type, x, y, z, frame_id, confidence,"
              " episode_id, tier, tier_since, value, metadata) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
    rows = [[1, 1, 0.0, "battery", "interoception"] + [None] * 10, [2, 2, 0.0, "scene", "perception"] + [None] * 10]
    touched = scopes.classify([(insert, rows, True), ("INSERT INTO texts(text, embedding) VALUES(?, ?)", ["a", None],
                                                      False), ("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                                                               ["log_seq", "3"], False)])
    assert touched == {layer_scope("battery"), layer_scope("scene"), BODY, PERCEPTION, LAYERSET}
    assert scopes.classify([(insert, [[3, 1, 0.0, "scene", "perception"] + [None] * 10], True)]) == {
        layer_scope("scene"), PERCEPTION}  # a layer seen before is no news
    assert scopes.classify([("UPDATE observations SET tier=? WHERE id=?", ["long_term", 1], False)]) == {OBS_ANY}
    literal = "INSERT INTO observations(id, text_id, stamp, layer, source_type) VALUES(?,NULL,?,?,?)"
    assert scopes.classify([(literal, [4, 0.0, "scene", "perception"], False)]) == {OBS_ANY}  # columns ≠ params
    assert scopes.classify([("DELETE FROM texts WHERE id IN (?)", [1], False)]) == {OBS_ANY}
    assert scopes.classify([("INSERT INTO edges(kind, src, dst, weight, updated) VALUES(?,?,?,?,?)", [], False)]) \
        == {"entities"}
    assert scopes.classify([("INSERT INTO robots(name) VALUES(?)", ["r2"], False)]) == {ANY}
    assert scopes.classify(None) == {ANY}
    before = scopes.snapshot([PERCEPTION])
    scopes.on_commit(Commit([(insert, rows[:1], True)]))
    assert scopes.unchanged(before)  # a body reading
    scopes.on_commit(Commit([(insert, rows[1:], True)]))
    assert not scopes.unchanged(before)


def test_the_store_reports_commits_to_subscribers(make_memory):
    memory = make_memory()
    seen = []
    memory.store.commits.subscribe(seen.append)
    memory.store.commits.subscribe(lambda commit: 1 / 0)  # a failing subscriber never fails the write
    memory.add("red chair", 1.0, 1.0, layer_name="detections", source_type="perception")
    memory.flush()
    assert seen and any("INSERT INTO observations" in sql for sql, _, _ in seen[-1].statements)
    assert seen[-1].touched_places  # the place rows the flush wrote
    assert isinstance(memory.store, MemoryStore) and memory.store.counts()["observations"] == 1



def test_a_write_during_the_answer_leaves_it_stale(world):
    memory, _ = world
    tool = memory.tools.get("semantic_search")
    bound = tool.signature.bind("red chair")
    bound.apply_defaults()

    def search_while_ingesting():
        answer = tool.run(memory.tools.env, "red chair")  # the tool without its cache
        memory.add("red chair by the window", 4.0, 4.0, layer_name="detections", source_type="perception")
        memory.flush()  # lands after the answer was computed from older data
        return answer

    memory.tools.cache.answer(tool, dict(bound.arguments), search_while_ingesting)
    assert not cached(memory.tools.cache.answer(tool, dict(bound.arguments),
                                                lambda: tool.run(memory.tools.env, "red chair")))
