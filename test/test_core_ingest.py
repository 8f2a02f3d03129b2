"""Ingestion through the facade: interning, positions, validation, episodes."""


import numpy as np
import pytest

from emem_ros.core.errors import (
    EmbeddingUnavailableError,
    EmemError,
    InvalidInputError,
    WorkingMemoryFullError,
)
from emem_ros.embeddings import HashingEmbeddingProvider


class CountingProvider(HashingEmbeddingProvider):
    """A real embedder that counts the texts it was asked to embed."""

    def __init__(self):
        super().__init__()
        self.embedded: list[str] = []

    def embed(self, texts):
        self.embedded.extend(texts)
        return super().embed(texts)


def test_repeated_texts_are_embedded_and_indexed_once(make_memory):
    provider = CountingProvider()
    memory = make_memory(provider=provider)
    labels = ["chair", "table", "red mug", "chair", "chair", "table"]
    for i in range(600):
        memory.add(labels[i % len(labels)], x=i * 0.01, y=0.0, timestamp=1000.0 + i,
                   layer_name="detections", source_type="perception")
    memory.flush()
    for i in range(300):  # a later batch repeats the same strings again
        memory.add(labels[i % len(labels)], x=1.0, y=1.0, timestamp=2000.0 + i, layer_name="detections")
    memory.flush()
    assert sorted(provider.embedded) == ["chair", "red mug", "table"]
    counts = memory.store.counts()
    assert counts["observations"] == 900
    assert counts["texts"] == 3
    assert len(memory.store.vectors["texts"]) == 3


def test_body_readings_get_no_vector(make_memory):
    provider = CountingProvider()
    memory = make_memory(provider=provider)
    for pct in range(100, 90, -1):
        memory.add_body_state(f"battery {pct}%", "battery", value=pct / 100)
    memory.flush()
    assert provider.embedded == []
    rows = memory.store.reader().execute(
        "SELECT source_type, value FROM observations ORDER BY id").fetchall()
    assert rows[0] == ("interoception", 1.0)
    assert len(rows) == 10


def test_unknown_position_is_stored_as_unknown_not_origin(make_memory):
    memory = make_memory()
    oid = memory.add("a sound from the left", layer_name="audio")
    memory.flush()
    observation = memory.get_observation(oid)
    assert observation.position is None and not observation.has_position
    row = memory.store.reader().execute("SELECT x, y, z FROM observations").fetchone()
    assert row == (None, None, None)
    assert memory.store.counts()["places"] == 0


def test_observation_round_trip(make_memory, clock):
    memory = make_memory()
    oid = memory.add("red mug on the table", x=1.5, y=-2.0, z=0.8, layer_name="detections",
                     source_type="perception", confidence=0.9, metadata={"class_id": "cup"})
    memory.flush()
    got = memory.get_observation(oid)
    assert got.text == "red mug on the table"
    assert got.position == (1.5, -2.0, 0.8)
    assert got.stamp == clock.now
    assert got.confidence == pytest.approx(0.9)
    assert got.metadata == {"class_id": "cup"}
    assert got.tier == "short_term"


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(text="chair", x=float("nan"), y=0.0), "finite"),
        (dict(text="chair", x=1.0, y=float("inf")), "finite"),
        (dict(text="chair", x=1.0, y=None), "both x and y"),
        (dict(text="chair", x="one", y=2.0), "numbers"),
        (dict(text="   "), "empty"),
        (dict(text=""), "empty"),
        (dict(text=42), "string"),
        (dict(text="x" * 5000), "max_text_length"),
        (dict(text="chair", source_type="telepathy"), "source_type"),
        (dict(text="chair", confidence=1.5), "confidence"),
        (dict(text="chair", timestamp=float("nan")), "timestamp"),
        (dict(text="chair", layer_name=""), "layer_name"),
        (dict(text="chair", metadata={"bad": float("nan")}), "JSON"),
        (dict(text="chair", metadata=["not", "a", "dict"]), "dict"),
        (dict(text="chair", embedding=np.ones(17)), "embedding"),
        (dict(text="chair", embedding=np.full(384, np.nan)), "embedding"),
    ],
)
def test_bad_input_is_rejected_clearly_and_loses_nothing(make_memory, kwargs, words):
    memory = make_memory()
    memory.add("kept before the bad call", x=0.0, y=0.0)
    memory.flush()
    with pytest.raises(InvalidInputError) as info:
        memory.add(**kwargs)
    assert words in str(info.value)
    assert memory.pending == 0
    memory.flush()
    texts = [r[0] for r in memory.store.reader().execute("SELECT text FROM texts")]
    assert texts == ["kept before the bad call"]


def test_given_embedding_is_used_instead_of_the_provider(make_memory):
    provider = CountingProvider()
    memory = make_memory(provider=provider)
    vector = np.zeros(384, dtype=np.float32)
    vector[7] = 3.0
    memory.add("precomputed", x=0, y=0, embedding=vector)
    memory.flush()
    assert provider.embedded == []
    labels, sims = memory.store.vectors["texts"].search(vector / 3.0, 1)
    assert sims[0] == pytest.approx(1.0, abs=1e-5)


def test_episodes_nest_and_chain(make_memory):
    memory = make_memory()
    first = memory.start_episode("fetch mug")
    memory.add("kitchen door", x=1, y=1)
    sub = memory.start_episode("open door", parent_episode_id=first, goal="door open")
    memory.add("door handle", x=1.1, y=1)
    assert memory.active_episode_id == sub
    assert memory.end_episode(consolidate=False, result="opened", success=True) == sub
    assert memory.active_episode_id == first
    assert memory.end_episode(consolidate=False) == first
    second = memory.start_episode("patrol")
    memory.end_episode(consolidate=False)
    store = memory.store
    sub_ep = store.get_episode(int(sub.split("-")[1]))
    assert sub_ep.parent_id == first and sub_ep.goal == "door open"
    assert sub_ep.result == "opened" and sub_ep.success is True and sub_ep.status == "completed"
    assert store.get_episode(int(second.split("-")[1])).previous_id == first
    episodes = dict(store.reader().execute("SELECT t.text, o.episode_id FROM observations o JOIN texts t ON t.id=o.text_id"))
    assert episodes == {"kitchen door": 1, "door handle": 2}
    assert memory.end_episode() is None
    with pytest.raises(InvalidInputError):
        memory.start_episode("x", parent_episode_id="obs-1")


def test_closed_memory_refuses_work(make_memory):
    memory = make_memory()
    memory.close()
    with pytest.raises(EmemError, match="closed"):
        memory.add("late", x=0, y=0)
    memory.close()  # twice is fine


class FlakyProvider(HashingEmbeddingProvider):
    def __init__(self, failures: int):
        super().__init__()
        self.failures = failures

    def embed(self, texts):
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("embedding service unavailable")
        return super().embed(texts)


def test_failed_flush_keeps_the_batch_for_retry(make_memory):
    memory = make_memory(provider=FlakyProvider(failures=1))
    ids = [memory.add(f"thing {i}", x=i, y=0) for i in range(5)]
    with pytest.raises(EmbeddingUnavailableError, match="unavailable"):
        memory.flush()
    assert memory.pending == 5
    assert memory.store.counts()["observations"] == 0
    assert memory.flush() == 5
    assert [o.text for o in memory.store.get_observations([int(i.split("-")[1]) for i in ids])] == [
        f"thing {i}" for i in range(5)]


def test_full_buffer_with_failing_flushes_refuses_loudly(make_memory):
    """add() raises only when it refuses an observation; an accepted one is never an error."""
    memory = make_memory(provider=FlakyProvider(failures=100), working_memory_size=4, flush_batch_size=4)
    ids = [memory.add(f"t{i}", x=0, y=0) for i in range(3)]
    # Reaches the batch size: the synchronous flush fails, but t3 was accepted, so add returns its id
    # (raising would make a retrying caller store it twice).
    ids.append(memory.add("t3", x=0, y=0))
    assert ids == ["obs-1", "obs-2", "obs-3", "obs-4"]
    assert memory.pending == 4
    with pytest.raises(WorkingMemoryFullError, match="full"):
        memory.add("t4", x=0, y=0)
    assert memory.pending == 4
    memory.embedder.failures = 0  # the embedder is back: everything accepted is stored, once
    assert memory.flush() == 4
    assert [o.text for o in memory.store.query_observations(order="o.id")] == ["t0", "t1", "t2", "t3"]


def test_timer_flushes_without_further_adds(make_memory):
    import time

    memory = make_memory(flush_interval=0.05)
    memory.add("lonely observation", x=0, y=0)
    deadline = time.monotonic() + 5
    while memory.store.counts()["observations"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert memory.store.counts()["observations"] == 1
    assert memory.pending == 0


def test_size_trigger_flushes_through_the_timer_thread(make_memory):
    import time

    memory = make_memory(flush_interval=30.0, flush_batch_size=8)
    for i in range(8):
        memory.add(f"item {i}", x=0, y=0)
    deadline = time.monotonic() + 5
    while memory.store.counts()["observations"] < 8 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert memory.store.counts()["observations"] == 8
