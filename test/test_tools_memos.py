"""The tools' per-memory memos (decoded vectors, document frequencies, metadata kinds, lazy keyword
lists) give what reading SQLite afresh gives, including after the writes that invalidate them."""

from __future__ import annotations

import sqlite3

import numpy as np

from emem_ros.storage import codec
from emem_ros.storage.events import Commit
from emem_ros.tools.hybrid import KeywordIndex
from emem_ros.tools.obs_memo import ObservationKinds
from emem_ros.tools.ranking import _gist_vectors
from test.support.patrol import age_past_window, open_memory


def _fts(tmp_path, texts: list[str]) -> sqlite3.Connection:
    conn = sqlite3.connect(str(tmp_path / "fts.db"))
    conn.execute("CREATE TABLE texts(id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("CREATE VIRTUAL TABLE texts_fts USING fts5(text, content='texts', content_rowid='id',"
                 " tokenize='porter unicode61')")
    for text in texts:
        _insert(conn, text)
    return conn


def _insert(conn: sqlite3.Connection, text: str) -> int:
    rowid = conn.execute("INSERT INTO texts(text) VALUES(?)", (text,)).lastrowid
    conn.execute("INSERT INTO texts_fts(rowid, text) VALUES(?, ?)", (rowid, text))
    conn.commit()
    return int(rowid)


def test_keyword_stream_yields_the_search_list_in_order(tmp_path):
    texts = [f"red mug {i}" if i % 3 else f"blue mug on a red table {i}" for i in range(60)]
    texts += [f"mug {i}" for i in range(40)] + [f"red {i}" for i in range(30)]
    conn = _fts(tmp_path, texts)
    index = KeywordIndex("texts_fts")
    for query in ("red mug", "mug", "red table", "blue mug table", "nothing here"):
        for limit in (1, 5, 17, 64, 500):
            assert list(index.stream(conn, query, limit)) == index.search(conn, query, limit), (query, limit)


def test_remembered_document_frequencies_follow_inserts_and_forget_deletes(tmp_path):
    conn = _fts(tmp_path, ["red mug"] * 3 + ["green chair"])
    memo, plain = KeywordIndex("texts_fts", content="texts"), KeywordIndex("texts_fts")
    assert memo._document_frequency(conn, ["mug", "chair"]) == {"mug": 3, "chair": 1}
    _insert(conn, "another mug")  # the top id moves: read again
    assert memo._document_frequency(conn, ["mug", "chair"]) == plain._document_frequency(conn, ["mug", "chair"]) \
        == {"mug": 4, "chair": 1}
    conn.execute("INSERT INTO texts_fts(texts_fts, rowid, text) VALUES('delete', 1, 'red mug')")
    conn.execute("DELETE FROM texts WHERE id = 1")
    conn.commit()
    assert memo._document_frequency(conn, ["mug", "chair"])["mug"] == 4  # the top id did not move
    memo.forget()  # what ToolEnv does on a commit that deletes texts
    assert memo._document_frequency(conn, ["mug", "chair"]) == {"mug": 3, "chair": 1}


def test_archival_commit_makes_keyword_plans_see_the_deleted_texts(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, archive_after_seconds=0)
    t0 = clock.now - 3 * 86400
    for i in range(30):
        memory.add("red mug" if i % 2 else "red table", x=1.0, y=1.0, timestamp=t0 + i, layer_name="detections")
    memory.flush()
    env = memory.tools.env
    conn = memory.store.reader()
    before = env.texts.keywords.plan(conn, "red mug")
    assert before is not None and before.every is not None
    age_past_window(memory, clock)
    memory.consolidate_time_window()
    memory.add("sofa", x=5.0, y=5.0, timestamp=clock.now, layer_name="detections")  # hot: the top text id stays
    memory.flush()
    assert env.texts.keywords._document_frequency(conn, ["red", "mug"]) == {"red": 2, "mug": 1}
    clock.now += 1
    assert memory.archive().texts_removed == 2
    assert conn.execute("SELECT MAX(id) FROM texts").fetchone()[0] == 3
    fresh = KeywordIndex("texts_fts")._document_frequency(conn, ["red", "mug"])
    assert fresh == {"red": 0, "mug": 0}
    assert env.texts.keywords._document_frequency(conn, ["red", "mug"]) == fresh
    assert env.texts.keywords.plan(conn, "red mug") == KeywordIndex("texts_fts").plan(conn, "red mug")


def test_gist_vectors_are_the_stored_blobs_from_the_graph_or_from_sqlite(tmp_path, clock):
    """Filtered gist search scores with the graph's copy of each vector; one the graph does not hold is read
    from SQLite. Both equal the stored blob (unit length)."""
    memory = open_memory(tmp_path / "m.db", clock)
    t0 = clock.now - 3 * 86400
    dim = memory.store.dim
    for round_ in range(2):
        for i in range(40):
            memory.add(f"thing {i % 5} round {round_}", x=float(i % 4), y=1.0, timestamp=t0 + round_ * 5000 + i,
                       layer_name="detections")
        memory.flush()
        age_past_window(memory, clock)
        memory.consolidate_time_window()
        conn = memory.store.reader()
        rows = conn.execute("SELECT id, embedding FROM gists ORDER BY id").fetchall()
        ids = [r[0] for r in rows]
        stored = np.stack([codec.blob_to_vector(r[1], dim) for r in rows])
        assert ids and np.allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-5)
        index = memory.store.vectors["gists"]
        got = _gist_vectors(conn, index, ids, dim)
        assert np.allclose(got, stored, atol=1e-6) and float(np.abs(got).sum()) > 0
        assert np.allclose(_gist_vectors(conn, index, ids[::2], dim), stored[::2], atol=1e-6)
    index.remove(ids[:2])  # no longer in the graph: read from SQLite, the same
    assert index.held_vectors(np.asarray(ids))[0].tolist() == [False, False] + [True] * (len(ids) - 2)
    assert np.allclose(_gist_vectors(conn, index, ids, dim), stored, atol=1e-6)


def test_text_vectors_memo_equals_the_store_and_drops_a_rewritten_embedding(make_memory, clock):
    memory = make_memory()
    for i in range(12):
        memory.add(f"object {i}", x=1.0, y=float(i), timestamp=clock.now + i)
    memory.flush()
    store, env = memory.store, memory.tools.env
    ids = [r[0] for r in store.reader().execute("SELECT id FROM texts ORDER BY id")] + [10_000]
    assert np.array_equal(env.text_vectors.get(ids), store.text_vectors(ids))
    assert np.array_equal(env.text_vectors.get(ids[:3]), store.text_vectors(ids[:3]))  # from the memo now
    new = np.full(store.dim, 1.0 / np.sqrt(store.dim), dtype=np.float32)
    with store.write() as conn:  # a re-embedding rewrites one vector
        conn.execute("UPDATE texts SET embedding=? WHERE id=?", (codec.vector_to_blob(new), ids[0]))
    assert np.array_equal(env.text_vectors.get(ids[:1])[0], new)
    assert np.array_equal(env.text_vectors.get(ids), store.text_vectors(ids))


def test_observation_kinds_are_the_json_values_and_a_reshaping_commit_drops_them(make_memory, clock):
    memory = make_memory()
    memory.add("cup", x=1.0, y=1.0, timestamp=clock.now, layer_name="detections",
               metadata={"position_source": "odometry", "view_range": 4.5, "ray": [1.0, 0.0]})
    memory.add("door", x=2.0, y=1.0, timestamp=clock.now + 1, layer_name="scene")
    memory.flush()
    conn = memory.store.reader()
    kinds = ObservationKinds()
    got = kinds.get(conn, [1, 2, 99])
    assert got == {1: ("odometry", "array", 4.5), 2: (None, None, None)}
    assert kinds.get(conn, [2, 1]) == {2: (None, None, None), 1: ("odometry", "array", 4.5)}
    kinds.on_commit(Commit(statements=[("UPDATE observations SET gist_id=? WHERE id=?", (1, 1), False)]))
    assert kinds._known  # linking to a gist leaves metadata alone
    kinds.on_commit(Commit(statements=[], reshaped=True))
    assert not kinds._known
    kinds.get(conn, [1])
    kinds.on_commit(Commit(statements=[("DELETE FROM observations WHERE id = ?", (1,), False)]))
    assert not kinds._known


def test_remembered_ranked_lists_equal_fresh_ones_after_inserts_and_deletes(tmp_path):
    conn = _fts(tmp_path, [f"red mug {i}" for i in range(20)] + [f"blue mug {i}" for i in range(10)])
    memo, plain = KeywordIndex("texts_fts", content="texts"), KeywordIndex("texts_fts")

    def same() -> None:
        for query in ("red mug", "mug", "blue", "red blue mug"):
            for limit in (3, 25, 200):
                assert memo.search(conn, query, limit) == plain.search(conn, query, limit), (query, limit)
                assert list(memo.stream(conn, query, limit)) == plain.search(conn, query, limit)

    same()
    same()  # now from the memo
    _insert(conn, "red mug red mug red mug")  # a better BM25 match arrives
    same()
    conn.execute("INSERT INTO texts_fts(texts_fts, rowid, text) VALUES('delete', 3, 'red mug 2')")
    conn.execute("DELETE FROM texts WHERE id = 3")
    conn.commit()
    assert 3 in memo.search(conn, "red mug", 200)  # remembered: only ``forget`` says rows went
    memo.forget()
    same()


def test_box_distance_is_the_per_axis_sum_bit_for_bit():
    import math
    import random

    from emem_ros.storage.place_grid import _box_distance

    def reference(x: float, y: float, cx: int, cy: int, cell: float) -> float:
        total = 0.0
        for q, c in ((x, cx), (y, cy)):
            low, high = c * cell, (c + 1) * cell
            gap = abs(high - q) if high < q else (abs(low - q) if q < low else 0.0)
            total += gap * gap
        return math.sqrt(total)

    rng = random.Random(4)
    for _ in range(20_000):
        cell = rng.choice([0.5, 0.25, 0.3, 1.0])
        x, y = rng.uniform(-80.0, 80.0), rng.uniform(-80.0, 80.0)
        cx, cy = math.floor(x / cell) + rng.randint(-6, 6), math.floor(y / cell) + rng.randint(-6, 6)
        if rng.random() < 0.2:
            x = cx * cell  # on a cell edge
        assert _box_distance(x, y, cx, cy, cell) == reference(x, y, cx, cy, cell)
