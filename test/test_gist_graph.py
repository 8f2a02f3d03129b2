"""The gists' vector graph holds the recent past; older gists stay found (issue 26, ``storage/gist_graph.py``).

A graph of every gist grew the node by ~2 MB per patrol day. With ``gist_graph_hours`` it holds the gists
that ended within that many hours of the newest, reuses the slots of the ones that leave, and a time filter
over an older stretch is answered from SQLite as it was from the graph.
"""

from __future__ import annotations

import numpy as np
import pytest

from emem_ros.forgetting import scrub
from emem_ros.tools import ranking
from test.support.patrol import age_past_window, open_memory, patrol_into

HOURS = 1.0
GAP = 3 * 3600.0  # between patrols: each leaves the previous one behind the horizon


def _patrols(memory, clock, count: int) -> list[tuple[float, float]]:
    """``count`` patrols, each consolidated; their (start, end) robot times."""
    spans = []
    for seed in range(count):
        start = clock.now
        patrol_into(memory, clock, 2500, seed=seed)
        spans.append((start, clock.now))
        age_past_window(memory, clock)
        memory.consolidate_time_window()
        clock.now += GAP
    return spans


def _held(memory) -> list[int]:
    conn = memory.store.reader()
    every = np.asarray([r[0] for r in conn.execute("SELECT id FROM gists ORDER BY id")], dtype=np.int64)
    held, _ = memory.store.vectors["gists"].held_vectors(every)
    return every[held].tolist()


def _recent(memory) -> list[int]:
    conn = memory.store.reader()
    newest = conn.execute("SELECT MAX(time_end) FROM gists").fetchone()[0]
    return [r[0] for r in conn.execute("SELECT id FROM gists WHERE time_end >= ? AND embedding IS NOT NULL"
                                       " ORDER BY id", (newest - HOURS * 3600,))]


def test_the_graph_holds_the_recent_gists_and_reuses_the_slots_of_old_ones(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, gist_graph_hours=HOURS)
    graph = memory.store.vectors["gists"]
    slots = []
    for _ in range(4):
        _patrols(memory, clock, 1)
        slots.append(graph._index.get_current_count())
    total = memory.store.reader().execute("SELECT COUNT(*) FROM gists").fetchone()[0]
    recent = _recent(memory)
    assert 0 < len(recent) < total / 3, "four patrols, the graph holds the last one"
    assert _held(memory) == recent == sorted(graph.labels()[np.isin(graph.labels(), recent)].tolist())
    assert len(graph) == len(recent)
    assert slots[-1] <= max(slots[:2]), f"slots of gists that left are reused, not added to: {slots}"
    memory.close()

    again = open_memory(tmp_path / "m.db", clock, gist_graph_hours=HOURS)  # a restart holds the same
    assert _held(again) == recent and len(again.store.vectors["gists"]) == len(recent)
    again.close()
    # A file whose graph held every gist (gist_graph_hours 0, or before there was a horizon): the old ones
    # leave at open, their slots stay until a forget pass (which erased something) compacts the graph.
    every = open_memory(tmp_path / "m.db", clock, gist_graph_hours=0)
    assert len(every.store.vectors["gists"]) == total
    every.close()
    upgraded = open_memory(tmp_path / "m.db", clock, gist_graph_hours=HOURS)
    assert _held(upgraded) == recent and upgraded.store.vectors["gists"]._index.get_current_count() == total
    scrub.compact_vectors(upgraded.store, {"gists"}, scrub.LockTimer())  # the forget pass's step
    assert _held(upgraded) == recent and upgraded.store.vectors["gists"]._index.get_current_count() == len(recent)
    upgraded.close()


@pytest.mark.parametrize("exact_limit", [ranking.EXACT_LIMIT, 4], ids=["scored-exactly", "graph-and-sqlite"])
def test_a_time_filter_behind_the_horizon_answers_as_a_graph_of_every_gist(tmp_path, clock, monkeypatch,
                                                                          exact_limit):
    """Up to EXACT_LIMIT gists pass the filter: all scored exactly; more: the graph's, plus the newest
    EXACT_LIMIT of those behind the horizon scored from SQLite."""
    monkeypatch.setattr(ranking, "EXACT_LIMIT", exact_limit)
    start = clock.now
    bounded = open_memory(tmp_path / "bounded.db", clock, gist_graph_hours=HOURS)
    spans = _patrols(bounded, clock, 3)
    clock.now = start
    every = open_memory(tmp_path / "every.db", clock, gist_graph_hours=0)
    assert _patrols(every, clock, 3) == spans
    first_start, first_end = spans[0]
    first = [r[0] for r in bounded.store.reader().execute(
        "SELECT id FROM gists WHERE time_end <= ?", (first_end,))]
    assert first and not set(first) & set(_held(bounded)), "the first patrol's gists left the graph"
    assert len(every.store.vectors["gists"]) > len(bounded.store.vectors["gists"])
    for query in ("a kitchen with a fridge", "sofa", "office desk and chair"):
        answers = [m.tools.call("search_gists", query=query, n_results=5, time_after=first_start, time_before=first_end)
                   for m in (bounded, every)]
        ids = [[h.id for h in a.hits] for a in answers]
        assert ids[0] and ids[0] == ids[1], query
        assert [round(h.score or 0, 4) for h in answers[0].hits] == [round(h.score or 0, 4) for h in answers[1].hits]
    # unfiltered, a name still finds an old gist by its words
    old_text = bounded.store.get_gists([first[0]])[0].text.split(":")[0]
    assert any(h.stamp is not None and h.stamp <= first_end
               for h in bounded.tools.call("search_gists", query=old_text, n_results=50).hits)
    bounded.close()
    every.close()
