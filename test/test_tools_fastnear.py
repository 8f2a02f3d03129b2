"""Memos of the "what is near here" path (issue 15, item 4): never stale, dropped by the commits they must be.

``clusters.LABELS`` keeps linkage labels by the points' bytes; ``obs_memo`` keeps a few columns of
observation rows until a commit may have changed them. Each test asserts that what a write, a forget or
an archival changes shows in the answer or drops the memo.
"""

from __future__ import annotations

import numpy as np
import pytest

from emem_ros.storage.events import Commit
from emem_ros.tools import clusters
from emem_ros.tools.clusters import LABELS, LabelMemo, Linker, _linked_labels, linked_labels
from emem_ros.tools.obs_memo import ObservationKinds, ObservationRefs, may_change


def test_remembered_labels_are_the_computed_ones_and_cannot_be_changed():
    rng = np.random.default_rng(7)
    LABELS.clear()
    for _ in range(30):
        points = rng.uniform(0, 12, (int(rng.integers(65, 400)), 2)).round(2)
        first = linked_labels(points, 1.0)
        again = linked_labels(points.copy(), 1.0)  # equal bytes: the remembered array itself
        assert again is first
        assert np.array_equal(first, _linked_labels(points, 1.0))
        assert np.array_equal(Linker(points).components(2.5), _linked_labels(points, 2.5))
        with pytest.raises(ValueError):
            first[0] = 99
    moved = points.copy()
    moved[0] += 0.5  # one place moved (a new sighting shifts its centroid): another key, computed afresh
    assert np.array_equal(linked_labels(moved, 1.0), _linked_labels(moved, 1.0))


def test_the_label_memo_is_bounded_by_entries_and_bytes():
    memo = LabelMemo(entries=4, max_bytes=1 << 20)
    rng = np.random.default_rng(3)
    keys = []
    for _ in range(10):
        points = rng.uniform(0, 5, (100, 2))
        key = memo.key(points, 1.0)
        memo.put(key, _linked_labels(points, 1.0))
        keys.append(key)
    assert [memo.get(k) is not None for k in keys] == [False] * 6 + [True] * 4
    big = rng.uniform(0, 5, (20_000, 2))  # over a quarter of the byte budget: not kept
    memo.put(memo.key(big, 1.0), np.zeros(len(big), dtype=np.int64))
    assert memo.get(memo.key(big, 1.0)) is None
    assert memo._bytes <= memo.max_bytes


def _busy_room(memory, clock) -> dict[str, list[str]]:
    """Seventy things around the origin (so that linking runs on arrays and is remembered) and a red mug
    seen twice, 1.4 m apart: two things."""
    for i in range(70):
        angle = 2 * np.pi * i / 70
        memory.add(f"thing {i}", x=0.7 + 3.5 * np.cos(angle), y=3.5 * np.sin(angle), layer_name="detections",
                   timestamp=clock.now - 100 + i)
    left = memory.add("red mug", x=0.0, y=0.0, layer_name="detections", timestamp=clock.now - 20)
    right = memory.add("red mug", x=1.4, y=0.0, layer_name="detections", timestamp=clock.now - 10)
    memory.flush()
    return {"left": [left], "right": [right]}


def _mugs(answer: str) -> list[str]:
    return [line for line in answer.splitlines() if '"red mug"' in line]


def test_a_write_that_links_two_spots_and_a_forget_that_parts_them_show_in_the_answer(make_memory, clock):
    memory = make_memory(query_cache_enabled=False)
    _busy_room(memory, clock)
    ask = dict(x=0.7, y=0.0, radius=5.0, n_results=12)
    before = memory.spatial_query(**ask)
    assert len(_mugs(before)) == 2 and "×" not in "".join(_mugs(before))
    assert memory.spatial_query(**ask) == before  # the labels now come from the memo
    middle = memory.add("red mug", x=0.7, y=0.0, layer_name="detections", timestamp=clock.now - 5)
    memory.flush()
    linked = memory.spatial_query(**ask)
    assert len(_mugs(linked)) == 1 and "×3" in _mugs(linked)[0]  # one thing now, seen three times
    memory.forget(ids=[middle], reason="test")
    assert memory.spatial_query(**ask) == before


def test_archival_drops_the_episode_and_tier_memo_and_the_hit(make_memory, clock):
    memory = make_memory(query_cache_enabled=False)
    _busy_room(memory, clock)
    ask = dict(x=0.7, y=0.0, radius=5.0, n_results=12)
    before = memory.spatial_query(**ask)
    refs = memory.tools.env.obs_refs
    assert refs._known  # the hits' newest observations are remembered
    with memory.store.write() as conn:  # archival's own statement shape, announced as a reshaping
        conn.execute("UPDATE observations SET tier=?, tier_since=?, text_id=NULL, metadata=NULL"
                     " WHERE text_id = (SELECT id FROM texts WHERE text = 'red mug')", ("archived", clock.now))
        memory.store.announce(reshaped=True)
    assert not refs._known
    after = memory.spatial_query(**ask)
    assert _mugs(before) and not _mugs(after)


@pytest.mark.parametrize("sql, refs_drop, kinds_drop", [
    ("UPDATE observations SET gist_id=? WHERE id=?", False, False),           # consolidation links a gist
    ("UPDATE observations SET gist_id = NULL WHERE gist_id = ?", False, False),
    ("UPDATE observations SET gist_id=?, tier=?, tier_since=? WHERE id IN (?,?)", True, False),
    ("UPDATE observations SET tier=?, tier_since=?, text_id=NULL, metadata=NULL WHERE id < ?", True, True),
    ("update main.observations set metadata = json_set(metadata, '$.ray', ?) where id = ?", False, True),
    ('UPDATE OR IGNORE observations SET "episode_id" = ? WHERE id = ?', True, False),
    ("UPDATE observations SET (tier, gist_id) = (?, ?) WHERE id = ?", True, True),  # a shape not read: assume so
    ("INSERT INTO observations(text_id, stamp) VALUES (?, ?)", False, False),  # new rows leave old ones
    ("INSERT OR REPLACE INTO observations(id, text_id) VALUES (?, ?)", True, True),
    ("DELETE FROM observations WHERE id = ?", True, True),
    ("UPDATE gists SET tier = ? WHERE id = ?", False, False),
])
def test_which_statements_drop_which_observation_memo(sql, refs_drop, kinds_drop):
    commit = Commit(statements=[(sql, (), None)])
    assert may_change(commit, ObservationRefs.COLUMNS) is refs_drop
    assert may_change(commit, ObservationKinds.COLUMNS) is kinds_drop


@pytest.mark.parametrize("commit", [Commit(statements=None), Commit(statements=[], reshaped=True),
                                    Commit(statements=[], rewritten=True),
                                    Commit(statements=[], removed_places=(3,)),
                                    Commit(statements=[], removed_texts=((1, "red mug"),))])
def test_unknown_transactions_archival_and_forget_drop_both_memos(make_memory, clock, commit):
    memory = make_memory()
    memory.add("cup", x=1.0, y=1.0, timestamp=clock.now, layer_name="detections",
               metadata={"position_source": "odometry", "view_range": 4.5})
    memory.flush()
    conn = memory.store.reader()
    for memo in (ObservationRefs(), ObservationKinds()):
        assert memo.get(conn, [1]) and memo._known
        memo.on_commit(commit)
        assert not memo._known


def test_the_kinds_memo_follows_a_rewritten_metadata(make_memory, clock):
    memory = make_memory()
    memory.add("cup", x=1.0, y=1.0, timestamp=clock.now, layer_name="detections",
               metadata={"position_source": "odometry", "view_range": 4.5})
    memory.flush()
    kinds = memory.tools.env.obs_kinds
    conn = memory.store.reader()
    assert kinds.get(conn, [1]) == {1: ("odometry", None, 4.5)}
    with memory.store.write() as w:
        w.execute("UPDATE observations SET metadata = json_set(metadata, '$.view_range', 2.0) WHERE id = 1")
    assert kinds.get(conn, [1]) == {1: ("odometry", None, 2.0)}


def test_linking_is_not_recomputed_for_the_same_places(monkeypatch, make_memory, clock):
    memory = make_memory(query_cache_enabled=False)
    _busy_room(memory, clock)
    LABELS.clear()
    made = []
    real = clusters._linked_labels
    monkeypatch.setattr(clusters, "_linked_labels", lambda *a, **k: made.append(1) or real(*a, **k))
    first = memory.spatial_query(x=0.7, y=0.0, radius=5.0, n_results=12)
    linked = len(made)
    assert linked >= 1
    assert memory.spatial_query(x=0.7, y=0.0, radius=5.0, n_results=12) == first
    assert len(made) == linked
