"""Reboot, crash and damage: yesterday must still be there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from emem_ros import Memory, MemoryConfig
from emem_ros.core.errors import EmbeddingMismatchError, StoreError
from emem_ros.embeddings import HashingEmbeddingProvider
from test.support.streams import answers, patrol


def open_memory(path: Path, **overrides) -> Memory:
    settings = {"flush_interval": 0.0, "index_save_interval": 0.0}
    settings.update(overrides)
    return Memory(config=MemoryConfig(db_path=str(path), **settings),
                  embedding_provider=HashingEmbeddingProvider())


@pytest.fixture
def built(tmp_path) -> tuple[Path, dict]:
    path = tmp_path / "robot.db"
    memory = open_memory(path)
    patrol(memory, 2000)
    memory.flush()
    before = answers(memory)
    memory.close()
    return path, before


def test_reopen_gives_identical_answers(built):
    path, before = built
    memory = open_memory(path)
    report = memory.store.open_report
    assert report["texts"]["loaded"] and report["texts"]["caught_up"] == 0
    assert report["places"]["loaded"] and report["places"]["caught_up"] == 0
    assert answers(memory) == before
    new_id = memory.add("after reboot", x=0, y=0, timestamp=2_000_000.0)
    memory.flush()
    assert int(new_id.split("-")[1]) == before["counts"]["observations"] + 1  # ids never reused
    memory.close()


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate", "empty"])
def test_damaged_index_files_are_rebuilt_not_fatal(built, damage):
    path, before = built
    folder = path.with_name(path.name + ".idx")
    targets = sorted(folder.glob("texts.*.hnsw")) + sorted(folder.glob("places.*.npz"))
    assert len(targets) == 2
    for target in targets:
        if damage == "delete":
            target.unlink()
        elif damage == "garbage":
            target.write_bytes(os.urandom(4096))
        elif damage == "truncate":
            data = target.read_bytes()
            target.write_bytes(data[: len(data) // 3])
        else:
            target.write_bytes(b"")
    memory = open_memory(path)
    report = memory.store.open_report
    assert not report["texts"]["loaded"] and report["texts"]["caught_up"] == report["texts"]["size"] > 0
    assert not report["places"]["loaded"] and report["places"]["caught_up"] == report["places"]["size"] > 0
    assert answers(memory) == before
    memory.close()
    assert open_memory(path).store.open_report["texts"]["loaded"]  # the rebuilt index was saved


def test_stale_index_is_caught_up_from_sqlite(built):
    path, before = built
    folder = path.with_name(path.name + ".idx")
    stale = {p: p.read_bytes() for p in folder.iterdir()}
    memory = open_memory(path)
    for i in range(50):
        memory.add(f"new thing {i}", x=20.0 + i, y=20.0, timestamp=3_000_000.0 + i)
    memory.close()
    for p in folder.iterdir():
        p.unlink()
    for p, data in stale.items():  # as if the process died before saving the snapshots
        p.write_bytes(data)
    memory = open_memory(path)
    assert memory.store.open_report["texts"]["caught_up"] == 50
    assert memory.store.open_report["places"]["caught_up"] == 50
    labels, sims = memory.store.vectors["texts"].search(memory.embed_query("new thing 7"), 1)
    text = memory.store.reader().execute("SELECT text FROM texts WHERE id=?", (int(labels[0]),)).fetchone()[0]
    assert text == "new thing 7"
    memory.close()


def test_other_embedding_model_is_a_clear_error_or_a_rebuild(built):
    path, before = built
    with pytest.raises(EmbeddingMismatchError, match="rebuild_on_model_change"):
        Memory(config=MemoryConfig(db_path=str(path), flush_interval=0, index_save_interval=0),
               embedding_provider=HashingEmbeddingProvider(dim=64))
    memory = Memory(config=MemoryConfig(db_path=str(path), flush_interval=0, index_save_interval=0,
                                        rebuild_on_model_change=True),
                    embedding_provider=HashingEmbeddingProvider(dim=64))
    assert memory.store.meta("embedding_dim") == "64"
    assert memory.store.counts() == before["counts"]
    labels, _ = memory.store.vectors["texts"].search(memory.embed_query("red mug"), 1)
    text = memory.store.reader().execute("SELECT text FROM texts WHERE id=?", (int(labels[0]),)).fetchone()[0]
    assert text == "red mug"
    memory.close()


def test_newer_schema_is_refused(built):
    import sqlite3

    path, _ = built
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        open_memory(path)


def test_bad_paths_are_plain_errors(tmp_path, monkeypatch):
    with pytest.raises(StoreError, match="does not exist"):
        open_memory(tmp_path / "no" / "such" / "folder" / "m.db")
    (tmp_path / "adir").mkdir()
    with pytest.raises(StoreError, match="is a folder"):
        open_memory(tmp_path / "adir")
    not_db = tmp_path / "notes.db"
    not_db.write_text("this is not a database, just notes\n" * 100)
    with pytest.raises(StoreError, match="cannot open memory"):
        open_memory(not_db)
    assert not_db.read_text().startswith("this is not a database")  # untouched
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0:  # root ignores permission bits: make access() tell the truth it would tell a user
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p).startswith(str(ro)) and mode & os.W_OK else real_access(p, mode, **kw))
    with pytest.raises(StoreError, match="not writable"):
        open_memory(ro / "m.db")


CHILD = textwrap.dedent(
    """
    import sys
    from emem_ros import Memory, MemoryConfig
    from emem_ros.embeddings import HashingEmbeddingProvider
    from test.support.streams import LABELS
    path, report = sys.argv[1], sys.argv[2]
    memory = Memory(config=MemoryConfig(db_path=path, flush_interval=0, index_save_interval=0.2,
                                        flush_batch_size=64),
                    embedding_provider=HashingEmbeddingProvider())
    i = 0
    with open(report, "a") as out:
        while True:
            for _ in range(37):
                memory.add(f"{LABELS[i % len(LABELS)]} {i % 500}", x=(i % 300) * 0.1, y=(i // 300) * 0.1,
                           timestamp=1_000_000.0 + i, layer_name="detections", source_type="perception")
                i += 1
            memory.flush()
            out.write(f"{i}\\n")
            out.flush()
    """
)


def test_sigkill_mid_stream_loses_no_flushed_observation(tmp_path):
    path, report = tmp_path / "crash.db", tmp_path / "flushed.txt"
    report.write_text("")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(report)], env=env,
                             cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = report.read_text().split()
            if len(lines) >= 60:
                break
            assert child.poll() is None, "the writer died on its own"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(10)
    flushed = int(report.read_text().split()[-1])
    assert flushed >= 60 * 37
    memory = open_memory(path)
    stored = memory.store.counts()["observations"]
    assert stored >= flushed  # every flushed observation survived (a later flush may have landed too)
    ids = [r[0] for r in memory.store.reader().execute("SELECT id FROM observations ORDER BY id")]
    assert ids == list(range(1, stored + 1))  # no holes
    # Derived indexes agree with SQLite after the catch-up.
    n_texts = memory.store.reader().execute("SELECT COUNT(*) FROM texts WHERE embedding IS NOT NULL").fetchone()[0]
    assert len(memory.store.vectors["texts"]) == n_texts
    assert len(memory.store.places) == memory.store.counts()["places"]
    # Searchable three ways: by meaning, by place, by time.
    last_text = memory.store.reader().execute(
        "SELECT t.text, o.x, o.y, o.stamp FROM observations o JOIN texts t ON t.id=o.text_id"
        " WHERE o.id=?", (flushed,)).fetchone()
    # By meaning: the index holds SQLite's vector for every text, and a nearest-neighbour scan of what the
    # index holds finds the last flushed text. (Not hnswlib's approximate graph search: with the hashing
    # embedder many short texts tie exactly, and which of them the graph reaches depends on insertion order,
    # i.e. on when the kill landed relative to the snapshots; that is hnswlib's recall, not durability.)
    index = memory.store.vectors["texts"]
    rows = memory.store.reader().execute("SELECT id, embedding FROM texts WHERE embedding IS NOT NULL").fetchall()
    text_ids = np.array([r[0] for r in rows], dtype=np.int64)
    assert set(index.labels().tolist()) == set(text_ids.tolist())
    stored_vectors = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
    held = index.vectors_of(text_ids)
    assert np.allclose(held, stored_vectors / np.linalg.norm(stored_vectors, axis=1, keepdims=True), atol=1e-5)
    query = memory.embed_query(last_text[0])
    best = held @ (query / np.linalg.norm(query))
    assert best.max() > 0.99
    last_id = memory.store.reader().execute("SELECT text_id FROM observations WHERE id=?", (flushed,)).fetchone()[0]
    assert best[text_ids.tolist().index(last_id)] > 0.99
    near = memory.store.places_within((last_text[1], last_text[2], 0.0), 0.3)
    assert last_text[0] in {p.text for p in near}
    at_time = memory.store.query_observations("o.stamp = ?", (last_text[3],))
    assert [o.text for o in at_time] == [last_text[0]]
    memory.close()
