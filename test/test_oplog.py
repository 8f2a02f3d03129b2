"""The operation log: written before commit, redone after a crash, replayed by rebuild."""

from __future__ import annotations

import sqlite3

import pytest

from emem_ros import Memory, MemoryConfig
from emem_ros.embeddings import HashingEmbeddingProvider
from emem_ros.storage.oplog import LogCorruptError, OpLog
from emem_ros.storage.rebuild import rebuild_from_log
from test.support.streams import answers, patrol


def open_memory(path, **overrides):
    settings = {"flush_interval": 0.0, "index_save_interval": 0.0}
    settings.update(overrides)
    return Memory(config=MemoryConfig(db_path=str(path), **settings),
                  embedding_provider=HashingEmbeddingProvider())


@pytest.fixture
def built(tmp_path):
    path = tmp_path / "robot.db"
    memory = open_memory(path)
    memory.start_episode("patrol")
    patrol(memory, 1500)
    memory.end_episode(consolidate=False, result="done", success=True)
    memory.flush()
    before = answers(memory)
    memory.close()
    return path, before


def test_every_transaction_is_logged_with_its_sequence(built):
    path, _ = built
    log = OpLog(path.with_name(path.name + ".log"))
    seqs = [r.seq for r in log.records()]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 3
    db_seq = sqlite3.connect(path).execute("SELECT value FROM meta WHERE key='log_seq'").fetchone()[0]
    assert int(db_seq) == seqs[-1]


def test_rebuild_from_log_gives_identical_answers(built):
    path, before = built
    report = rebuild_from_log(path)
    assert report.records > 0 and report.old_file is not None and report.old_file.exists()
    memory = open_memory(path)
    assert answers(memory) == before
    episode = memory.store.get_episode(1)
    assert (episode.name, episode.result, episode.success) == ("patrol", "done", True)
    memory.close()


def test_torn_tail_is_cut_and_only_that_record_is_lost(built):
    path, before = built
    memory = open_memory(path)
    memory.add("written just before the crash", x=1, y=1, timestamp=5_000_000.0)
    memory.flush()
    memory.close()
    log_dir = path.with_name(path.name + ".log")
    segment = sorted(log_dir.glob("*.seg"))[-1]
    good_size = segment.stat().st_size
    with open(segment, "ab") as handle:  # a record whose append was cut short by a crash
        handle.write(b"\x40\x00\x00\x00\x11\x22\x33\x44\x99\x00\x00\x00\x00\x00\x00\x00partial")
    memory = open_memory(path)
    assert memory.store.oplog.torn_bytes_cut == 23
    assert segment.stat().st_size == good_size
    memory.add("after the crash", x=2, y=2, timestamp=5_000_001.0)
    memory.flush()
    memory.close()
    texts = {r.seq: r for r in OpLog(log_dir).records()}
    assert max(texts) == len(texts)  # contiguous: the torn record left no gap or garbage
    rebuild_from_log(path, keep_old=False)
    memory = open_memory(path)
    stored = {r[0] for r in memory.store.reader().execute("SELECT text FROM texts")}
    assert {"written just before the crash", "after the crash"} <= stored
    memory.close()


def test_crash_between_log_append_and_commit_is_redone_on_open(built):
    path, before = built
    memory = open_memory(path)
    memory.close()
    log = OpLog(path.with_name(path.name + ".log"))
    next_id = before["counts"]["observations"] + 1
    log.append([
        ("INSERT INTO texts(text, embedding) VALUES(?, ?)", ["logged but never committed", None], False),
        ("INSERT INTO observations(id, text_id, stamp, layer, source_type, tier) VALUES(?, "
         "(SELECT id FROM texts WHERE text='logged but never committed'), ?, 'notes', 'manual', 'short_term')",
         [next_id, 6_000_000.0], False),
    ])
    log.close()
    memory = open_memory(path)
    assert memory.store.redone == 1
    assert memory.get_observation(f"obs-{next_id}").text == "logged but never committed"
    memory.close()


def test_checkpoint_prunes_old_segments_and_rebuild_still_works(tmp_path):
    path = tmp_path / "small-segments.db"
    memory = open_memory(path, log_segment_bytes=4096, log_keep_segments=2)
    patrol(memory, 3000)
    memory.flush()
    segments_before = len(memory.store.oplog.segments())
    assert segments_before > 4
    seq = memory.store.checkpoint_log()
    assert len(memory.store.oplog.segments()) <= 3
    for i in range(20):
        memory.add(f"after checkpoint {i}", x=i, y=0, timestamp=7_000_000.0 + i)
    memory.flush()
    before = answers(memory)
    memory.close()
    report = rebuild_from_log(path)
    assert report.base_seq == seq
    memory = open_memory(path)
    assert answers(memory) == before
    memory.close()


def test_damage_inside_the_log_is_a_clear_error(built):
    path, _ = built
    log_dir = path.with_name(path.name + ".log")
    small = open_memory(path, log_segment_bytes=2048)
    patrol(small, 400, start=8_000_000.0)
    small.close()
    segments = sorted(log_dir.glob("*.seg"))
    assert len(segments) >= 2
    data = bytearray(segments[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    segments[0].write_bytes(bytes(data))
    with pytest.raises(LogCorruptError, match="checksum|decoded"):
        rebuild_from_log(path)
    assert path.exists()  # the live file is untouched by a failed rebuild
