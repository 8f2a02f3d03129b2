"""Forget, with proof: a canary text and a canary vector, put everywhere the memory keeps things, then forgotten.

After ``forget`` no file under the memory (db, -wal, -shm, .idx/, .log/,
.cold/, dead letters) holds the canary's UTF-8 bytes, its unique word, or
its float32 vector; the same after ``emem rebuild`` and after reopening;
an export made afterwards does not contain it; other answers are unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from emem_ros import Memory, MemoryConfig
from emem_ros.embeddings import HashingEmbeddingProvider
from emem_ros.ingest.dead_letter import write_dead_letters
from emem_ros.storage.rebuild import rebuild_from_log
from emem_ros.storage.store import NewObservation
from test.support.forget_scan import holders, sqlite_merged, vector_needles

CANARY = "a man in a red jacket qzxcanary4711 waves at the door"
UNIQUE = b"qzxcanary4711"
ARCHIVED_CANARY = "an old note about qzxarchived0815 in a red jacket"
ARCHIVED_UNIQUE = b"qzxarchived0815"
EXPERIENCE_CANARY = "asked the man in the red jacket qzxledger9 to step aside"
LEDGER_UNIQUE = b"qzxledger9"


def canary_vector(dim: int) -> np.ndarray:
    rng = np.random.default_rng(4711)
    vector = rng.standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _config(db: Path, **extra) -> MemoryConfig:
    settings = dict(db_path=str(db), flush_interval=0.0, index_save_interval=0.0, consolidation_window=60.0,
                    consolidation_min_samples=2, archive_after_seconds=60.0, log_segment_bytes=4096)
    settings.update(extra)
    return MemoryConfig(**settings)


def _fill(memory: Memory, clock, vector: np.ndarray) -> None:
    """Ordinary things, the canary added with its own vector, an archived canary, a ledger record, dead letters."""
    t0 = clock.now - 7200
    for i in range(30):
        memory.add("red mug", x=1.0, y=1.0, timestamp=t0 + i, layer_name="detections")
        memory.add("blue chair", x=6.0, y=6.0, timestamp=t0 + i, layer_name="detections")
        memory.add(ARCHIVED_CANARY if i == 3 else "a kitchen with a table", x=1.2, y=1.1, timestamp=t0 + i,
                   layer_name="scene")
    memory.flush()
    clock.advance(120)
    memory.consolidate_time_window()
    clock.advance(120)
    memory.archive()  # the first batch, with ARCHIVED_CANARY, is in the cold store now
    t1 = clock.now - 100
    for i in range(5):
        memory.add(CANARY, x=2.0, y=2.0, timestamp=t1 + i, layer_name="scene", embedding=vector)
        memory.add("red mug", x=1.0, y=1.0, timestamp=t1 + i, layer_name="detections")
        memory.add("blue chair", x=6.0, y=6.1, timestamp=t1 + i, layer_name="detections")
    memory.store_specific_memory(text=CANARY)
    memory.record_experience(EXPERIENCE_CANARY, result="he moved", success=True)
    memory.record_experience("charge the battery", result="charged", success=True)
    memory.flush()
    clock.advance(120)
    memory.consolidate_time_window()
    memory.extract_entities(final=True)
    write_dead_letters(memory.dead_letter_path, [
        (NewObservation(id=999_999, text=CANARY, stamp=t1, layer="scene", source_type="camera", position=None, frame_id="map"),
         "set aside"),
        (NewObservation(id=999_998, text="an unrelated dead letter", stamp=t1, layer="scene",
                        source_type="camera", position=None, frame_id="map"), "set aside")])
    memory.store.checkpoint_log()  # a base copy that holds the canary


def _answers(memory: Memory) -> dict[str, str]:
    """Answers about other things (by place and by meaning), without the summaries (one quoted the canary)."""
    search = memory.semantic_search("blue chair", n_results=5, layer="detections").splitlines()
    return {"locate": memory.locate("blue chair"), "locate_mug": memory.locate("red mug"),
            "search": "\n".join(line for line in search if "summary of" not in line and "result" not in line)}


@pytest.mark.parametrize("segment_bytes", [4096])
def test_a_forgotten_canary_is_in_no_file_after_forget_rebuild_reopen_and_export(tmp_path, clock, segment_bytes):
    db = tmp_path / "memory.db"
    provider = HashingEmbeddingProvider()
    vector = canary_vector(provider.dim)
    memory = Memory(config=_config(db, log_segment_bytes=segment_bytes), embedding_provider=provider,
                    get_current_time=clock)
    _fill(memory, clock, vector)
    export_before = tmp_path / "before.jsonl"
    memory.export_to(export_before)
    assert UNIQUE in export_before.read_bytes()
    memory.save()
    needles = [CANARY.encode(), UNIQUE, ARCHIVED_UNIQUE, LEDGER_UNIQUE, *vector_needles(vector)]
    before = holders(db, needles)
    assert any(".log" in k for k in before) and any(".cold" in k for k in before), sorted(before)
    assert any(".idx" in k for k in before) and any("deadletter" in k for k in before), before
    other = _answers(memory)
    assert "obs-" in other["search"] and "blue chair" in other["locate"], other
    total_before = memory.store.counts()["observations"]

    dry = memory.forget(match="RED   Jacket", dry_run=True)
    assert dry.observations == 7 and dry.archived == 1 and dry.experiences_redacted == 1
    assert sqlite_merged(holders(db, needles)) == sqlite_merged(before)  # a dry run changes nothing

    report = memory.forget(match="red jacket", reason="person asked", who="test")
    assert report.observations == 7 and report.cold_records == 1 and report.dead_letters == 1
    assert report.experiences_redacted == 1 and report.wal_truncated
    assert holders(db, needles) == {}
    assert _answers(memory) == other
    for question in ("man in a red jacket", "qzxcanary4711", "qzxarchived0815"):
        answer = memory.semantic_search(question, n_results=10) + memory.search_gists(question)
        assert "qzx" not in answer.replace(question, "") and "in a red jacket" not in answer.replace(question, "")
    assert "blue chair" in memory.search_gists("blue chair").lower()  # the gist was re-summarised, not lost
    assert memory.ledger.count() == 2  # the redacted record keeps its place (and id)

    export_after = tmp_path / "after.jsonl"
    memory.export_to(export_after)
    assert not any(n in export_after.read_bytes() for n in needles[:4])
    memory.close()
    assert holders(db, needles) == {}

    rebuild_from_log(db, keep_old=True)
    assert holders(db, needles) == {}
    reopened = Memory(config=_config(db), embedding_provider=provider, get_current_time=clock)
    try:
        assert _answers(reopened) == other
        assert reopened.store.counts()["observations"] == total_before - report.observations
        entry = reopened.forget_log()[-1]
        assert entry.who == "test" and entry.reason == "person asked" and entry.selector == {"match": "[withheld]"}
        assert "red" not in json.dumps(entry.selector) and entry.counts["observations"] == 7
    finally:
        reopened.close()
    assert holders(db, needles) == {}


def memory_counts_after(report, before_total: int) -> int:
    return before_total - report.observations


def test_a_canary_replayed_from_a_bag_is_forgotten_from_every_file(tmp_path, clock):
    pytest.importorskip("rosbags")
    from emem_ros.replay import ReplayOptions, replay_bag
    from emem_ros.ros.intake import IntakeConfig
    from emem_ros.ros.params import LayerSpec, NodeParams
    from test.support.bags import BagBuilder

    builder = BagBuilder()
    builder.topic("/odom", "nav_msgs/msg/Odometry")
    builder.topic("/scene", "std_msgs/msg/String")
    for i in range(101):
        builder.add("/odom", i / 10, builder.odometry(i / 10, i / 100, 0.0))
    for i in range(10):
        builder.add("/scene", i + 0.05, builder.string(CANARY if i % 3 == 0 else f"a hallway with door {i}"))
    bag = builder.write(tmp_path / "bag")
    db = tmp_path / "replayed.db"
    memory_config = MemoryConfig(db_path="unused.db", flush_interval=0.0, index_save_interval=0.0,
                                 log_segment_bytes=4096)
    params = NodeParams(memory=memory_config, embedding_backend="hashing", embedding_model="",
                        consolidation_period=0.0,
                        layers=[LayerSpec(name="scene", topic="/scene", msg_type="std_msgs/msg/String",
                                          intake=IntakeConfig())])
    replay_bag(bag, params, ReplayOptions(db_path=str(db), progress=False))
    needles = [CANARY.encode(), UNIQUE]
    assert holders(db, needles), "the replay stored the canary"
    memory = Memory(config=_config(db), embedding_provider=HashingEmbeddingProvider(), get_current_time=clock)
    try:
        door = memory.semantic_search("hallway with door 4", n_results=3)
        assert memory.forget(match="qzxcanary4711").observations >= 4
        assert holders(db, needles) == {}
        assert memory.semantic_search("hallway with door 4", n_results=3) == door
    finally:
        memory.close()
    rebuild_from_log(db, keep_old=False)
    assert holders(db, needles) == {}
