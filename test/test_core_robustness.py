"""Storing must survive bad observations, outages and odd numbers without losing or blocking anything."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from emem_ros import Memory, MemoryConfig
from emem_ros.core.errors import (
    EmbeddingMismatchError,
    EmbeddingRejectedError,
    EmbeddingUnavailableError,
    InvalidInputError,
    MemoryInUseError,
)
from emem_ros.embeddings import HashingEmbeddingProvider
from emem_ros.embeddings.base import check_embeddings
from emem_ros.indexes.snapshots import write_snapshot
from emem_ros.ingest.dead_letter import ADD_FIELDS, read_dead_letters

ROOT = Path(__file__).resolve().parents[1]


class Switchable(HashingEmbeddingProvider):
    """A real embedder that can be taken down (an Ollama server that stopped) and counts its calls."""

    def __init__(self, dim: int = 384) -> None:
        super().__init__(dim)
        self.down = False
        self.calls = 0
        self.texts: list[str] = []

    def embed(self, texts):
        self.calls += 1
        if self.down:
            raise ConnectionError("embedding server down")
        self.texts.extend(texts)
        return super().embed(texts)


def texts_of(memory: Memory) -> list[str]:
    return [o.text for o in memory.store.query_observations(order="o.id")]


def open_at(path: Path, provider=None, **overrides) -> Memory:
    settings = {"flush_interval": 0.0, "index_save_interval": 0.0}
    settings.update(overrides)
    return Memory(config=MemoryConfig(db_path=str(path), **settings),
                  embedding_provider=provider or HashingEmbeddingProvider(), get_current_time=lambda: 2e9)


# ---------------------------------------------------------------------- A1: one bad observation
def test_metadata_is_encoded_once_at_add(make_memory):
    memory = make_memory()
    memory.add("good before", x=1, y=1)
    with pytest.raises(InvalidInputError, match="keys"):
        memory.add("detection", x=1, y=1, metadata={1: "track id", "class_id": "cup"})
    meta = {"class_id": "cup"}
    memory.add("detection", x=1, y=1, metadata=meta)
    meta[2] = "changed after add"  # the caller reuses its dict
    meta["class_id"] = "bowl"
    memory.add("good after", x=2, y=2, metadata={"score": np.float32(0.5), "n": np.int64(3)})
    assert memory.flush() == 3
    stored = memory.store.query_observations(order="o.id")
    assert [o.text for o in stored] == ["good before", "detection", "good after"]
    assert stored[1].metadata == {"class_id": "cup"}
    assert stored[2].metadata == {"n": 3, "score": 0.5}  # numpy scalars stored as numbers, not strings


def test_absurd_coordinates_are_refused_at_add(make_memory):
    memory = make_memory()
    with pytest.raises(InvalidInputError, match="1e\\+06 m"):
        memory.add("bad pose", x=1e308, y=0.0)
    with pytest.raises(InvalidInputError, match="1e\\+06 m"):
        memory.add("bad pose", x=0.0, y=0.0, z=-2e6)
    memory.add("edge of the map", x=1e6, y=-1e6)
    assert memory.flush() == 1
    assert memory.store.query_observations()[0].position == (1e6, -1e6, 0.0)


def test_index_failure_after_commit_never_makes_the_batch_retry(make_memory, caplog):
    memory = make_memory()
    index = memory.store.vectors["texts"]
    real_add = index.add
    calls = {"n": 0}

    def failing_once(labels, vectors, parallel=False):
        calls["n"] += 1
        if calls["n"] == 1:
            raise MemoryError("simulated: hnswlib could not grow")
        return real_add(labels, vectors, parallel)

    index.add = failing_once
    memory.add("red mug", x=1, y=1)
    with caplog.at_level(logging.WARNING):
        assert memory.flush() == 1  # committed: the flush succeeded even though the index update did not
    assert memory.pending == 0
    assert "caught up from SQLite" in caplog.text
    assert len(index) == 1 and not memory.store.stale_indexes
    memory.add("blue door", x=2, y=2)
    assert memory.flush() == 1  # later flushes are not blocked
    assert "red mug" in memory.semantic_search("red mug")


def test_a_batch_retried_after_its_commit_is_skipped_not_refused(make_memory):
    memory = make_memory()
    memory.add("chair", x=0, y=0)
    batch = memory.recent_buffered()
    memory.flush()
    report = memory.store.write_observations(batch, memory.engine.embed_texts)
    assert (report.observations, report.skipped) == (0, 1)
    assert memory.store.counts()["observations"] == 1


def poison(memory: Memory, index: int) -> None:
    """Make a buffered observation unstorable, as a path that skips add()'s checks could."""
    observation = memory.engine.ingest.buffer._queue[index]
    observation.metadata_json = None
    observation.metadata = {1: "track id", "class_id": "cup"}  # sort_keys fails on mixed keys


def test_one_poison_observation_is_set_aside_and_the_rest_stored(make_memory, caplog):
    memory = make_memory()
    ids = [memory.add(f"thing {i}", x=i, y=0) for i in range(9)]
    poison(memory, 4)
    with caplog.at_level(logging.ERROR):
        assert memory.flush() == 8
    assert memory.pending == 0
    assert texts_of(memory) == [f"thing {i}" for i in range(9) if i != 4]
    assert memory.stats["dead_lettered"] == 1
    assert ids[4] in caplog.text and "deadletter" in caplog.text
    records = read_dead_letters(memory.dead_letter_path)
    assert [r["id"] for r in records] == [ids[4]]
    assert records[0]["text"] == "thing 4" and "TypeError" in records[0]["reason"]
    assert set(ADD_FIELDS) <= set(records[0])
    memory.add("after the poison", x=0, y=0)
    assert memory.flush() == 1


def test_an_outage_is_never_dead_lettered(make_memory):
    provider = Switchable()
    memory = make_memory(provider=provider)
    for i in range(6):
        memory.add(f"thing {i}", x=i, y=0)
    provider.down = True
    for _ in range(3):
        with pytest.raises(EmbeddingUnavailableError):
            memory.flush()
    assert memory.pending == 6 and memory.stats["dead_lettered"] == 0
    assert not memory.dead_letter_path.exists()
    provider.down = False
    assert memory.flush() == 6


def test_a_fault_that_hits_every_observation_keeps_them_all(make_memory, monkeypatch):
    memory = make_memory()
    for i in range(5):
        memory.add(f"thing {i}", x=i, y=0)

    def broken(*args, **kwargs):
        raise ValueError("a bug in the write path, not in the data")

    monkeypatch.setattr(memory.store, "write_observations", broken)
    with pytest.raises(ValueError):
        memory.flush()
    assert memory.pending == 5 and not memory.dead_letter_path.exists()
    monkeypatch.undo()
    assert memory.flush() == 5


class ZeroFor(HashingEmbeddingProvider):
    """Answers a zero vector for one text: a provider answer we must refuse."""

    def __init__(self, bad: str) -> None:
        super().__init__()
        self.bad = bad

    def embed(self, texts):
        out = super().embed(texts)
        out[[t == self.bad for t in texts]] = 0.0
        return out


def test_zero_vectors_are_refused(make_memory):
    memory = make_memory(provider=ZeroFor("blank thing"))
    with pytest.raises(InvalidInputError, match="zero vector"):
        memory.add("precomputed", x=0, y=0, embedding=np.zeros(384))
    with pytest.raises(EmbeddingRejectedError, match="zero-length"):
        check_embeddings(np.zeros((1, 0)), ["x"], 0)
    for text in ["chair", "blank thing", "table"]:
        memory.add(text, x=0, y=0)
    assert memory.flush() == 2  # the refused answer is about one text: it alone is set aside
    assert texts_of(memory) == ["chair", "table"]
    assert [r["text"] for r in read_dead_letters(memory.dead_letter_path)] == ["blank thing"]
    assert len(memory.store.vectors["texts"]) == 2


# ---------------------------------------------------------------------- A2: close with the embedder down
def test_close_with_the_embedder_down_loses_nothing(tmp_path):
    provider = Switchable()
    path = tmp_path / "m.db"
    memory = open_at(path, provider)
    memory.add("stored before", x=0, y=0, timestamp=1e9)
    memory.flush()
    provider.down = True
    for i in range(5):
        memory.add(f"buffered thing {i}", x=i, y=3, timestamp=1e9 + i, layer_name="detections")
    memory.add_body_state("battery 50%", "battery", timestamp=1e9 + 9, value=0.5)
    memory.close()  # does not raise, does not drop the buffer
    assert memory.stats["stored_without_vector"] == 5

    still_down = open_at(path, provider)  # the embedder is still down: the open works anyway
    assert len(texts_of(still_down)) == 7
    assert "buffered thing 2" in still_down.spatial_query(2, 3, radius=0.5)
    still_down.close()

    provider.down = False
    memory = open_at(path, provider)
    assert texts_of(memory) == ["stored before"] + [f"buffered thing {i}" for i in range(5)] + ["battery 50%"]
    assert not memory.store.vectors_pending and memory.store.meta("vectors_pending") is None
    for i in range(5):
        assert memory.tools.semantic_search(f"buffered thing {i}", n_results=1).hits[0].text == f"buffered thing {i}"
    assert len(memory.store.vectors["texts"]) == 6  # the body reading stays without a vector
    memory.close()


def test_vectors_missing_are_added_by_the_next_flush_that_embeds(tmp_path):
    provider = Switchable()
    path = tmp_path / "m.db"
    memory = open_at(path, provider)
    provider.down = True
    memory.add("lost keys", x=0, y=0)
    memory.close()
    memory = open_at(path, provider)  # still down at open: the flag stays
    assert memory.store.vectors_pending
    provider.down = False
    memory.add("found keys", x=1, y=1)
    memory.flush()
    assert not memory.store.vectors_pending
    assert memory.tools.semantic_search("lost keys", n_results=1).hits[0].text == "lost keys"
    memory.close()


def test_close_spills_to_the_dead_letter_file_when_nothing_can_be_stored(make_memory, monkeypatch):
    memory = make_memory()
    memory.add("kept somewhere", x=0, y=0)

    def disk_error(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(memory.store, "write_observations", disk_error)
    memory.close()
    assert [r["text"] for r in read_dead_letters(memory.dead_letter_path)] == ["kept somewhere"]
    assert "disk I/O error" in read_dead_letters(memory.dead_letter_path)[0]["reason"]


# ---------------------------------------------------------------------- A3: questions while storing fails
def test_questions_answer_from_what_is_stored_while_the_embedder_is_down(make_memory, clock):
    provider = Switchable()
    memory = make_memory(provider=provider)
    memory.add("red chair", x=1, y=1, timestamp=clock.now - 100)
    memory.add_body_state("battery 80%", "battery", timestamp=clock.now - 100, value=0.8)
    memory.flush()
    provider.down = True
    for i in range(12):
        memory.add(f"blue door {i}", x=5, y=5, timestamp=clock.now - 50)
    for name, args in [("spatial_query", {"x": 1, "y": 1, "radius": 2}), ("temporal_query", {"last_n_minutes": 60}),
                       ("body_status", {}), ("episode_summary", {})]:
        answer = memory.dispatch_tool_call(name, args)
        assert not answer.startswith("Error"), answer
        assert "12 observations are still waiting to be stored" in answer
    assert "red chair" in memory.dispatch_tool_call("spatial_query", {"x": 1, "y": 1, "radius": 2})
    assert "battery 80%" in memory.dispatch_tool_call("body_status", {})
    by_meaning = memory.dispatch_tool_call("semantic_search", {"query": "blue door"})
    assert "embedding model is unavailable" in by_meaning and "unexpectedly" not in by_meaning
    assert not memory.dispatch_tool_call("memory_stats", {}).startswith("Error")
    assert memory.pending == 12
    provider.down = False
    answer = memory.dispatch_tool_call("spatial_query", {"x": 5, "y": 5, "radius": 1})
    assert "blue door" in answer and "waiting" not in answer
    assert memory.pending == 0


def test_with_a_flush_timer_questions_do_not_wait_on_a_failing_embedder(make_memory):
    provider = Switchable()
    memory = make_memory(provider=provider, flush_interval=3600.0)  # the timer exists but will not fire here
    memory.add("red chair", x=1, y=1)
    memory.flush()
    provider.down = True
    memory.add("blue door", x=5, y=5)
    with pytest.raises(EmbeddingUnavailableError):
        memory.flush()  # an explicit flush still says it failed
    calls = provider.calls
    assert "red chair" in memory.dispatch_tool_call("spatial_query", {"x": 1, "y": 1, "radius": 2})
    assert provider.calls == calls  # the timer retries; the question did not call the embedder


def test_store_specific_memory_while_the_embedder_is_down_is_accepted_once(make_memory):
    provider = Switchable()
    memory = make_memory(provider=provider)
    provider.down = True
    answer = memory.dispatch_tool_call("store_specific_memory", {"text": "the charger is behind the sofa"})
    assert answer.startswith("Accepted obs-1") and "Do not store it again" in answer
    provider.down = False
    assert "charger is behind the sofa" in memory.semantic_search("where is the charger")
    assert texts_of(memory) == ["the charger is behind the sofa"]


def test_episodes_open_and_close_while_the_embedder_is_down(make_memory):
    provider = Switchable()
    memory = make_memory(provider=provider)
    memory.add("before any episode", x=0, y=0)
    provider.down = True
    first = memory.start_episode("fetch mug")
    memory.add("kitchen door", x=1, y=1)
    assert memory.end_episode(consolidate=False) == first
    second = memory.start_episode("patrol")
    memory.add("hallway", x=2, y=2)
    assert memory.pending == 3
    provider.down = False
    memory.flush()
    episodes = {o.text: o.episode_id for o in memory.store.query_observations()}
    assert episodes == {"before any episode": None, "kitchen door": first, "hallway": second}


# ---------------------------------------------------------------------- B6: numpy numbers
def test_numpy_scalars_are_numbers(make_memory):
    memory = make_memory()
    oid = memory.add("mug", x=np.float32(1.5), y=np.int64(2), z=np.float64(0.25), timestamp=np.int64(1000),
                     confidence=np.float32(0.5), value=np.float16(2.0))
    memory.add_body_state("battery", "battery", timestamp=np.float32(1024.0), value=np.float32(0.5))
    memory.flush()
    got = memory.get_observation(oid)
    assert (got.position, got.stamp, got.confidence, got.value) == ((1.5, 2.0, 0.25), 1000.0, 0.5, 2.0)
    assert all(type(v) is float for v in (*got.position, got.stamp, got.confidence, got.value))
    for bad in (dict(confidence=True), dict(x=True, y=1), dict(timestamp=np.bool_(True))):
        with pytest.raises(InvalidInputError):
            memory.add("mug", **{"x": 0, "y": 0, **bad})


# ---------------------------------------------------------------------- C2: snapshots that cannot be saved
def test_an_unwritable_index_folder_never_fails_close(tmp_path, caplog):
    path = tmp_path / "m.db"
    memory = open_at(path)
    for i in range(30):
        memory.add(f"thing {i}", x=i, y=0, timestamp=1e9 + i)
    memory.flush()
    index_dir = memory.store.index_dir
    index_dir.write_text("not a folder")  # mkdir and every snapshot write fail, as in a read-only folder
    with caplog.at_level(logging.WARNING):
        assert memory.store.save_indexes() is False
        memory.close()
    assert caplog.text.count("could not save") == 1  # warned once, not per index and per period
    index_dir.unlink()
    memory = open_at(path)
    assert not memory.store.open_report["texts"]["loaded"]  # rebuilt from SQLite
    assert memory.store.open_report["texts"]["size"] == 30
    assert memory.tools.semantic_search("thing 7", n_results=1).hits[0].text == "thing 7"
    memory.close()


def test_a_snapshot_writer_that_writes_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(OSError, match="writable"):
        write_snapshot(tmp_path, "texts", 1, "hnsw", lambda temp: None)


# ---------------------------------------------------------------------- C3: extreme but valid numbers
def test_extreme_times_get_plain_errors(make_memory):
    memory = make_memory()
    memory.add("red mug", x=1, y=1)
    for args in ({"time_after": 1e30}, {"time_before": -1e30}, {"time_after": "-99999999999999d"}):
        answer = memory.dispatch_tool_call("temporal_query", args)
        assert answer.startswith("Error") and "outside the years 0001-9999" in answer, answer
        assert "unexpectedly" not in answer
    assert "red mug" in memory.dispatch_tool_call("semantic_search",
                                                  {"query": "mug", "time_before": "9999-12-31T23:59:59Z"})
    with pytest.raises(InvalidInputError, match="timestamp"):
        memory.add("from the far future", x=0, y=0, timestamp=1e30)


# ---------------------------------------------------------------------- C4: interrupted re-embedding
class OtherModel(HashingEmbeddingProvider):
    """Same dimension, another model (other vectors): a re-embedding is needed."""

    def __init__(self, fail_on_call: int = 0) -> None:
        super().__init__()
        self.model_name = "other-model-384"
        self.fail_on_call = fail_on_call
        self.calls = 0
        self.embedded = 0

    def embed(self, texts):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise ConnectionError("killed half-way")
        self.embedded += len(texts)
        return np.roll(super().embed(texts), 7, axis=1)


def test_an_interrupted_reembedding_is_resumed_or_refused_never_mixed(tmp_path):
    path = tmp_path / "m.db"
    memory = open_at(path)
    for i in range(700):
        memory.add(f"object number {i}", x=i % 50, y=0, timestamp=1e9 + i)
    memory.close()
    with pytest.raises(EmbeddingUnavailableError, match="killed half-way"):
        open_at(path, OtherModel(fail_on_call=2), rebuild_on_model_change=True)  # 512 done, then dies
    with pytest.raises(EmbeddingMismatchError, match="stopped") as info:
        open_at(path)  # the old model would silently mix two vector spaces
    assert "other-model-384" in str(info.value)
    resumed = OtherModel()
    memory = open_at(path, resumed)  # the target model finishes the job, without the flag
    assert resumed.embedded == 700 - 512
    assert memory.store.meta("embedding_model") == "other-model-384"
    assert memory.store.meta("reembed_target") is None
    stored = memory.store.text_vectors(list(range(1, 701)))
    texts = [f"object number {i}" for i in range(700)]
    assert np.allclose(stored, OtherModel().embed(texts), atol=1e-6)
    index = memory.store.vectors["texts"]
    assert len(index) == 700
    in_index = np.asarray(index._index.get_items([651]))[0]  # the index was rebuilt in the new space too
    assert np.allclose(in_index / np.linalg.norm(in_index), memory.embed_query("object number 650"), atol=1e-5)
    memory.close()


# ---------------------------------------------------------------------- C6: one writing process
HOLDER = textwrap.dedent(
    """
    import sys
    from emem_ros import Memory, MemoryConfig
    from emem_ros.embeddings import HashingEmbeddingProvider
    memory = Memory(config=MemoryConfig(db_path=sys.argv[1], flush_interval=0, index_save_interval=0),
                    embedding_provider=HashingEmbeddingProvider())
    memory.add("written by the holder", x=0, y=0)
    memory.flush()
    print("ready", flush=True)
    sys.stdin.readline()
    memory.close()
    """
)


def test_a_second_process_cannot_open_a_memory_in_use(tmp_path):
    path = tmp_path / "shared.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(MemoryInUseError) as info:
            open_at(path)
        message = str(info.value)
        assert str(path) in message and f"process {child.pid}" in message and "ROS services" in message
    finally:
        child.communicate("done\n", timeout=30)
    assert child.returncode == 0
    memory = open_at(path)  # released at close
    assert texts_of(memory) == ["written by the holder"]
    memory.close()
    memory = open_at(path)  # and by our own close
    memory.close()


def test_a_failed_open_releases_the_lock(tmp_path):
    path = tmp_path / "m.db"
    first = open_at(path)
    with pytest.raises(MemoryInUseError, match="already open in this process"):
        open_at(path)
    first.close()
    with pytest.raises(EmbeddingMismatchError):
        open_at(path, HashingEmbeddingProvider(dim=64))
    open_at(path).close()
