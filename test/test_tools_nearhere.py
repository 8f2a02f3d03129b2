"""The "what is near here" path kept exact while made cheaper (issue 15, item 4).

Each test compares a faster path with the plain one it replaced, so it fails if the two ever answer
differently.
"""

from __future__ import annotations

import numpy as np
import pytest

from emem_ros.memfs.notes import PER_ENTITY, SHARED, pinned_near
from emem_ros.memfs.records import NODE_COLUMNS, Node
from emem_ros.storage.place_cache import PlaceArrays
from emem_ros.tools.aggregate import place_of_row
from emem_ros.tools.clusters import Linker, components, group_places
from emem_ros.tools.perception import _distance, _rank_many, _Spot


def _places(rng: np.random.Generator, n: int, keys: int, shuffle: bool, dense: bool = False) -> PlaceArrays:
    """Random place rows of a few (text, layer) keys on a 0.5 m grid, sorted by key and cell unless shuffled.

    Dense: each key fills a rectangle of cells (a thing seen from everywhere in a room: one group per key,
    the usual case around a busy spot); otherwise cells are scattered (many groups per key).
    """
    rows = {}
    if dense:
        for t in range(1, keys + 1):
            x0, y0 = rng.integers(0, 8, 2).tolist()
            la = "scene" if t % 2 else "detections"
            for x in range(x0, x0 + int(rng.integers(1, 7))):
                for y in range(y0, y0 + int(rng.integers(1, 7))):
                    rows[(t, la, x, y)] = None
    text = rng.integers(1, keys + 1, 0 if dense else n)
    layer = np.where(rng.random(len(text)) < 0.3, "scene", "detections").astype(object)
    cx, cy = rng.integers(0, 14, len(text)), rng.integers(0, 14, len(text))
    for t, la, x, y in zip(text.tolist(), layer.tolist(), cx.tolist(), cy.tolist()):
        rows[(t, la, x, y)] = None  # one place per (text, layer, cell), as in the places table
    keys_sorted = sorted(rows)
    if shuffle:
        keys_sorted = [keys_sorted[i] for i in rng.permutation(len(keys_sorted))]
    k = len(keys_sorted)
    count = rng.integers(1, 9, k).astype(np.float64)
    spread = 0.25 if dense else 0.5  # dense: centroids mid-cell, neighbours within a metre
    x = np.array([key[2] for key in keys_sorted]) * 0.5 + 0.125 + rng.random(k) * spread * (not dense) \
        + rng.random(k) * 0.25 * dense
    y = np.array([key[3] for key in keys_sorted]) * 0.5 + 0.125 + rng.random(k) * spread * (not dense) \
        + rng.random(k) * 0.25 * dense
    first = rng.uniform(0, 100, k).round(1)
    last = first + rng.choice([0.0, 5.0, 10.0], k)  # equal stamps: "the first place with the latest" matters
    return PlaceArrays(np.arange(1, k + 1), np.array([key[0] for key in keys_sorted], np.int64),
                       np.array([key[1] for key in keys_sorted], object), count, x * count, y * count,
                       np.zeros(k), first, last, np.arange(100, 100 + k), np.array([key[2] for key in keys_sorted]),
                       np.array([key[3] for key in keys_sorted]), np.zeros(k, np.int64))


@pytest.mark.parametrize("seed", range(16))
def test_spots_ranked_on_arrays_match_the_place_by_place_groups(seed):
    """Scattered places (groups interleaved: scattered reductions) and dense ones (a group per key, each a
    run of rows: per-run reductions), in the cache's order or shuffled."""
    rng = np.random.default_rng(seed)
    dense = seed % 2 == 1
    places = _places(rng, int(rng.integers(70, 400)), int(rng.integers(3, 12)) if dense else int(rng.integers(1, 8)),
                     shuffle=seed % 4 == 3, dense=dense)
    center = (3.5, 3.5, 0.0)
    ranked, spots = _rank_many(places, center, False, bounds=True)
    groups = group_places([place_of_row(r) for r in places.rows()])
    expected = sorted((_distance(g.centroid, center, False), -g.last, i) for i, g in enumerate(groups))
    assert [r[:2] for r in ranked] == [r[:2] for r in expected]
    want = [_Spot.of_group(groups[i]) for _, _, i in expected]
    fields = ("text_id", "layer", "count", "centroid", "first", "last", "newest_obs_id", "bounds")
    assert [[getattr(s, f) for f in fields] for s in spots] == [[getattr(s, f) for f in fields] for s in want]


@pytest.mark.parametrize("n", [10, 64, 65, 300])
def test_one_linker_gives_the_components_of_each_link_distance(n):
    rng = np.random.default_rng(n)
    xy = rng.uniform(0, 12, (n, 2))
    linker = Linker(xy)
    for link in (1.0, 2.5, 0.3):
        assert np.array_equal(linker.components(link), components(xy, link))


def _pinned_one_by_one(store, entity_ids):
    """The per-entity reading pinned_near did before (one statement per entity, 20 rows each)."""
    conn, found = store.reader(), {}
    for entity in [e for e in entity_ids if e][:20]:
        for row in conn.execute(f"SELECT {NODE_COLUMNS} FROM fs_nodes WHERE entity_id = ? AND kind = 'file'"
                                " LIMIT 20", (entity,)):
            node = Node.from_row(row)
            if node.path.startswith(SHARED) and node.path not in found:
                found[node.path] = node
    return sorted(found)


def test_notes_of_several_entities_are_read_in_one_statement_with_the_same_answer(make_memory):
    memory = make_memory()
    for i in range(PER_ENTITY + 3):  # more than one entity's share
        memory.dispatch_tool_call("fs_write", {"path": f"/memory/mug/{i:02d}.md", "content": f"mug note {i}",
                                                "entity_id": "ent-1"})
    for i in range(3):
        memory.dispatch_tool_call("fs_write", {"path": f"/memory/door/{i}.md", "content": f"door {i}",
                                                "entity_id": "ent-2"})
    memory.dispatch_tool_call("fs_write", {"path": "/memory/other.md", "content": "x", "entity_id": "ent-3"})
    store = memory.store
    entities = ["ent-2", "ent-1", "", "ent-2", "ent-9"]
    conn = store.reader()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        notes = pinned_near(store, None, 0.0, entities, limit=100)
    finally:
        conn.set_trace_callback(None)
    assert sum("FROM fs_nodes" in s for s in statements) == 1
    assert sorted(n.path for n in notes) == _pinned_one_by_one(store, entities)
    assert len([n for n in notes if n.path.startswith("/memory/mug/")]) == PER_ENTITY
    assert not any(n.path == "/memory/other.md" for n in notes)


def test_a_switched_off_cache_is_passed_by_but_still_counts_the_call(make_memory):
    memory = make_memory(query_cache_enabled=False)
    memory.add("red mug", x=1.0, y=1.0, layer_name="detections")
    memory.flush()
    cache = memory.tools.cache
    before = cache.bypassed
    assert "red mug" in memory.spatial_query(x=1.0, y=1.0, radius=2.0)
    assert cache.bypassed == before + 1


def test_a_keyword_plan_reads_the_top_id_once_and_the_next_question_reads_it_again(make_memory):
    memory = make_memory()
    for i in range(5):
        memory.add(f"red mug number {i} on the table", x=1.0, y=1.0, layer_name="detections")
    memory.flush()
    keywords = memory.tools.env.texts.keywords
    conn = memory.store.reader()
    first = keywords.search(conn, "red table", 3)  # warm: vocabulary view, memo
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        assert keywords.search(conn, "red table", 3) == first
    finally:
        conn.set_trace_callback(None)
    assert sum("MAX(rowid)" in s for s in statements) == 1  # the plan's read serves its AND and OR passes
    memory.add("a red table by the sink", x=6.0, y=1.0, layer_name="detections")
    memory.flush()
    newest = memory.store.reader().execute("SELECT id FROM texts WHERE text = 'a red table by the sink'").fetchone()[0]
    assert newest in keywords.search(conn, "red table", 10)  # the memo moved with the top id


def test_body_readings_name_their_texts_from_the_store_memo(make_memory, clock):
    memory = make_memory()
    memory.add("battery 80%", layer_name="battery", source_type="interoception", value=0.8)
    memory.flush()
    first = memory.body_status()
    assert "80" in first
    conn = memory.store.reader()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        assert memory.body_status() == first
    finally:
        conn.set_trace_callback(None)
    assert not any("FROM texts WHERE id IN" in s for s in statements)
    memory.add("battery 75%", layer_name="battery", source_type="interoception", value=0.75)
    memory.flush()
    assert "75" in memory.body_status()  # a new reading's text is read once, then remembered


def test_a_hit_whose_observation_is_archived_afterwards_leaves_the_answer(make_memory):
    """The episode/tier memo (tools/obs_memo) is dropped by a commit that updates observations."""
    memory = make_memory(query_cache_enabled=False)
    memory.start_episode("look around")
    memory.add("red mug", x=1.0, y=1.0, layer_name="detections")
    memory.add("green chair", x=1.5, y=1.0, layer_name="detections")
    memory.end_episode(consolidate=False)
    memory.flush()
    before = memory.spatial_query(x=1.0, y=1.0, radius=2.0)
    assert "red mug" in before and "green chair" in before and "ep-" in before
    assert memory.spatial_query(x=1.0, y=1.0, radius=2.0) == before  # answered from the memo
    with memory.store.write() as conn:  # archived (its place stays): only the memo can know
        conn.execute("UPDATE observations SET tier = 'archived' WHERE text_id = (SELECT id FROM texts"
                     " WHERE text = 'red mug')")
    after = memory.spatial_query(x=1.0, y=1.0, radius=2.0)
    assert "red mug" not in after and "green chair" in after


def test_the_episode_memo_keeps_across_new_rows_and_drops_on_rewrites(make_memory):
    from emem_ros.storage.events import Commit
    from emem_ros.tools.obs_memo import ObservationRefs

    memory = make_memory()
    memory.add("red mug", x=1.0, y=1.0, layer_name="detections")
    memory.flush()
    conn = memory.store.reader()
    (obs,) = conn.execute("SELECT id FROM observations").fetchone()
    refs = ObservationRefs()
    first = refs.get(conn, [obs, 10**9])
    assert list(first) == [obs]  # a missing row is left out, as the SELECT leaves it out
    tier = first[obs][1]
    assert tier != "archived"
    with memory.store.write() as w:
        w.execute("UPDATE observations SET tier = 'archived' WHERE id = ?", (obs,))
    refs.on_commit(Commit(statements=[("INSERT INTO observations(text_id) VALUES (?)", (1,), None)]))
    assert refs.get(conn, [obs])[obs][1] == tier  # new rows leave remembered ones as they were
    refs.on_commit(Commit(statements=[("UPDATE observations SET tier = ? WHERE id = ?", ("archived", obs), None)]))
    assert refs.get(conn, [obs])[obs][1] == "archived"
    with memory.store.write() as w:
        w.execute("UPDATE observations SET tier = ? WHERE id = ?", (tier, obs))
    refs.on_commit(Commit(statements=None))  # a transaction nobody described: assume the worst
    assert refs.get(conn, [obs])[obs][1] == tier
