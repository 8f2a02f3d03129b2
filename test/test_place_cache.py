"""The places mirror answers exactly what SQLite answers: after loading, after new writes, after
archival deletes places, past its change log, when too big to mirror, and with a writer racing."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from emem_ros.storage.place_cache import PlaceCache
from emem_ros.tools.aggregate import _place_rows_near_sql
from test.support.patrol import age_past_window, memory_adder, multi_room_patrol, open_memory

EVIDENCE_SQL = ("SELECT text_id, layer, count, sx, sy, sz, first_stamp, last_stamp, last_obs_id FROM places"
                " WHERE text_id IN ({marks}){extra}")


def _patrol(memory, clock, n: int, seed: int = 11) -> None:
    info = multi_room_patrol(memory_adder(memory), n, start=clock.now, seed=seed)
    memory.flush()
    clock.now = info.end + 1


def _queries(memory, rng: random.Random, count: int = 60):
    texts = [r[0] for r in memory.store.reader().execute("SELECT id FROM texts")]
    layers = [r[0] for r in memory.store.reader().execute("SELECT DISTINCT layer FROM places")]
    for _ in range(count):
        center = (rng.uniform(-1, 16), rng.uniform(-1, 11), rng.choice([0.0, 0.8]))
        yield (rng.sample(texts, min(len(texts), rng.choice([1, 3, 12]))), center, rng.choice([0.4, 1.5, 3.0, 7.0]),
               rng.sample(layers, rng.randint(1, len(layers))), rng.random() < 0.3)


def _assert_mirror_matches_sql(memory, seed: int) -> None:
    store = memory.store
    for texts, center, radius, layers, three_d in _queries(memory, random.Random(seed)):
        assert store.place_cache.near(texts, center, radius, layers, three_d).rows() == \
            _place_rows_near_sql(store, texts, center, radius, layers, three_d)
    ids = [r[0] for r in store.reader().execute("SELECT id FROM places")]
    wanted = random.Random(seed).sample(ids, min(len(ids), 50)) + [10 ** 9]  # and one that does not exist
    expected = store.reader().execute(
        f"SELECT id, text_id, layer, count, sx, sy, sz, first_stamp, last_stamp, last_obs_id FROM places"
        f" WHERE id IN ({','.join('?' * len(wanted))})", wanted).fetchall()
    assert store.place_cache.by_id(wanted).rows() == expected


def test_mirror_matches_sql_after_load_and_after_more_writes(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    _patrol(memory, clock, 1500)
    _assert_mirror_matches_sql(memory, seed=1)  # loads the mirror
    _patrol(memory, clock, 1500, seed=5)  # the same cells again (updates) and new ones (appends)
    memory.add("a brand new thing", x=40.0, y=40.0, timestamp=clock.now, layer_name="detections")
    memory.flush()
    assert memory.store.place_cache.changes.seq > 0
    _assert_mirror_matches_sql(memory, seed=2)
    memory.close()


def test_locate_evidence_order_matches_the_sql_plan(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    _patrol(memory, clock, 1500)
    store = memory.store
    texts = [r[0] for r in store.reader().execute("SELECT id FROM texts")][:6]
    middle = clock.now - 200
    for layer, after, before in [(None, None, None), ("detections", None, None), (None, middle, None),
                                 ("objects3d", None, middle), ("nope", None, None)]:
        extra, params = "", list(texts)
        if layer:
            extra, params = extra + " AND layer = ?", params + [layer]
        if after is not None:
            extra, params = extra + " AND last_stamp >= ?", params + [after]
        if before is not None:
            extra, params = extra + " AND first_stamp <= ?", params + [before]
        expected = store.reader().execute(EVIDENCE_SQL.format(marks=",".join("?" * len(texts)), extra=extra),
                                          params).fetchall()
        got = store.place_cache.of_texts(texts, layer, after, before)
        assert [r[1:] for r in got.rows()] == [(t, l, c, sx, sy, sz, f, la, o)
                                               for t, l, c, sx, sy, sz, f, la, o in expected]
    memory.close()


def test_archival_deleting_places_resets_the_mirror(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, archive_after_seconds=0)
    t0 = clock.now - 3 * 86400
    for i in range(40):
        memory.add(("red mug", "table")[i % 2], x=1.0 + (i % 3), y=1.0, timestamp=t0 + i, layer_name="detections")
    memory.flush()
    mug = memory.store.reader().execute("SELECT id FROM texts WHERE text = 'red mug'").fetchone()[0]
    assert len(memory.store.place_cache.near([mug], (2.0, 1.0, 0.0), 5.0, ["detections"]))  # mirrored
    age_past_window(memory, clock)
    memory.consolidate_time_window()
    memory.add("table", x=5.0, y=5.0, timestamp=clock.now, layer_name="detections")  # keeps 'table' alive
    memory.flush()
    clock.now += 1
    memory.archive()
    assert memory.store.reader().execute("SELECT COUNT(*) FROM places WHERE text_id = ?", (mug,)).fetchone()[0] == 0
    assert len(memory.store.place_cache.near([mug], (2.0, 1.0, 0.0), 5.0, ["detections"])) == 0
    _assert_mirror_matches_sql(memory, seed=3)
    memory.close()


def test_a_mirror_behind_its_change_log_or_too_big_still_answers_right(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    _patrol(memory, clock, 800)
    store = memory.store
    _assert_mirror_matches_sql(memory, seed=4)
    store.place_cache.changes._capacity = 5  # forget all but the last few changed cells
    _patrol(memory, clock, 800, seed=6)
    _assert_mirror_matches_sql(memory, seed=5)
    store.place_cache = small = PlaceCache(store.reader, store.cell_size, max_rows=10)
    store.commits.subscribe(small.on_commit)
    _assert_mirror_matches_sql(memory, seed=6)
    assert not small.enabled  # answered by SQLite
    memory.close()


def test_queries_racing_a_writer_end_exact(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    _patrol(memory, clock, 600)
    store = memory.store
    texts = [r[0] for r in store.reader().execute("SELECT id FROM texts")]
    layers = [r[0] for r in store.reader().execute("SELECT DISTINCT layer FROM places")]
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        rng = random.Random(threading.get_ident())
        try:
            while not stop.is_set():
                store.place_cache.near(rng.sample(texts, 4), (rng.uniform(0, 15), rng.uniform(0, 10), 0.0), 2.0,
                                       layers)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for seed in (7, 8, 9):
            _patrol(memory, clock, 400, seed=seed)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors
    _assert_mirror_matches_sql(memory, seed=7)
    memory.close()


@pytest.mark.parametrize("seed", [0, 1])
def test_nearby_hits_on_arrays_equal_the_place_by_place_path(tmp_path, clock, monkeypatch, seed):
    from emem_ros.tools import perception
    from emem_ros.tools.filters import Filters

    memory = open_memory(tmp_path / "m.db", clock)
    _patrol(memory, clock, 3000, seed=seed)
    env = memory.tools.env
    env.prepare()
    rng = random.Random(seed)
    for _ in range(25):
        f = Filters(center=(rng.uniform(0, 15), rng.uniform(0, 10), 0.0), radius=rng.choice([2.0, 4.0, 8.0]),
                    after=rng.choice([None, clock.now - 300]))
        n = rng.choice([3, 10, 30])
        monkeypatch.setattr(perception, "SMALL", 0)
        on_arrays = [str(h) for h in perception.nearby_hits(env, f, n)]
        monkeypatch.setattr(perception, "SMALL", 10 ** 9)
        assert [str(h) for h in perception.nearby_hits(env, f, n)] == on_arrays
    memory.close()


def test_linked_labels_match_scipy_connected_components():
    from scipy.spatial import cKDTree

    from emem_ros.tools.clusters import _connected, components, linked_labels

    rng = np.random.default_rng(5)
    for _ in range(60):
        n = int(rng.integers(2, 600))
        points = np.column_stack([rng.uniform(0, rng.uniform(1, 60), n), rng.uniform(0, 5, n),
                                  rng.integers(0, 4, n) * 1e9])
        pairs = cKDTree(points).query_pairs(1.0, output_type="ndarray")
        expected = _connected(pairs, n) if len(pairs) else np.arange(n)
        assert np.array_equal(linked_labels(points, 1.0), expected)
    chain = np.column_stack([np.arange(400) * 0.9, np.zeros(400)])  # more rounds than propagation allows
    assert np.array_equal(components(chain, 1.0), np.zeros(400))


def _assert_grid_matches_rtree(memory, seed: int) -> int:
    """``PlaceCache.nearest`` gives the rows of the R-tree's k nearest (ties included) whenever it answers."""
    store = memory.store
    rng = random.Random(seed)
    cell = store.cell_size
    answered = 0
    for _ in range(150):
        if rng.random() < 0.4:  # on cell corners and edges, where box distances tie
            center = (rng.randint(-4, 34) * cell, rng.randint(-4, 24) * cell + rng.choice([0.0, cell / 2]), 0.0)
        else:
            center = (rng.uniform(-3, 18), rng.uniform(-3, 13), 0.0)
        for k in (1, 8, 64, 256, 1024):
            got = store.place_cache.nearest(center, k)
            if got is None:
                continue
            answered += 1
            assert got.rows() == store.place_cache.by_id(store.place_ids_nearest(center, k).tolist()).rows()
    return answered


def test_grid_nearest_equals_the_rtree_after_load_writes_and_archival(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, archive_after_seconds=0)
    _patrol(memory, clock, 1500)
    assert _assert_grid_matches_rtree(memory, seed=1) > 300  # builds the grid
    _patrol(memory, clock, 1500, seed=5)  # appends extend the grid
    memory.add("a brand new thing", x=40.0, y=40.0, timestamp=clock.now, layer_name="detections")
    memory.flush()
    assert _assert_grid_matches_rtree(memory, seed=2) > 300
    age_past_window(memory, clock)
    memory.consolidate_time_window()
    clock.now += 1
    memory.archive()  # deletes places: the mirror and its grid are read again
    _assert_grid_matches_rtree(memory, seed=3)
    memory.close()
