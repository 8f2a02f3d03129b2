"""The operation log's record format: exact round trips, the old format still read, compactness."""

from __future__ import annotations

import random
import struct
import zlib

import pytest

from emem_ros import Memory, MemoryConfig
from emem_ros.embeddings import HashingEmbeddingProvider
from emem_ros.storage import logcodec
from emem_ros.storage.oplog import FRAME, MAGIC_V1, MAGIC_V2, LogCorruptError, OpLog
from emem_ros.storage.rebuild import rebuild_from_log
from test.support.streams import answers, patrol


def open_memory(path, **overrides):
    settings = {"flush_interval": 0.0, "index_save_interval": 0.0}
    settings.update(overrides)
    return Memory(config=MemoryConfig(db_path=str(path), **settings),
                  embedding_provider=HashingEmbeddingProvider())


def typed(value):
    """A value with its exact type and bits, so 1 != 1.0 != True and NaN == NaN."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, (list, tuple)):
        return ("list", [typed(v) for v in value])
    if isinstance(value, dict):
        return ("dict", {k: typed(v) for k, v in value.items()})
    return (type(value).__name__, value)


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 2 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 7, 2**62, -(2**63), 2**63 - 1, 2**70, rng.randint(-10**9, 10**9)])
    if kind == 3:
        return rng.choice([0.0, -0.0, 1.0, float("nan"), float("inf"), -float("inf"), 1e-310, rng.uniform(-1e6, 1e6)])
    if kind == 4:
        return rng.choice(["", "red mug", "ünïcödé ☕", "x" * 3000, "quote \" and \\ backslash"])
    if kind == 5:
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 3, 64, 1536])))
    if kind == 6:
        return rng.random()
    if kind == 7:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": random_value(rng, depth + 1) for i in range(rng.randrange(3))}


def random_statements(rng: random.Random) -> list:
    statements = []
    for _ in range(rng.randrange(1, 6)):
        shape = rng.randrange(4)
        if shape == 0:
            statements.append(("UPDATE t SET a=? WHERE b=?", [random_value(rng, 1) for _ in range(3)], False))
        elif shape == 1:
            statements.append(("INSERT INTO t VALUES(:a)", {"a": random_value(rng, 1)}, False))
        elif shape == 2:  # uniform rows: stored by column; each column one kind, some with gaps
            width, n = rng.randrange(1, 6), rng.randrange(0, 40)
            kinds = [rng.randrange(6) for _ in range(width)]
            rows = [[_column_value(rng, k, i) for k in kinds] for i in range(n)]
            statements.append(("INSERT INTO t VALUES(?,?)", rows, True))
        else:  # ragged rows: stored as a list
            rows = [[random_value(rng, 1) for _ in range(rng.randrange(1, 4))] for _ in range(rng.randrange(1, 5))]
            statements.append(("INSERT INTO u VALUES(?)", rows, True))
    return statements


def _column_value(rng, kind, i):
    if kind == 0:
        return 1_000_000.0 + i * 0.5 if rng.random() > 0.1 else None
    if kind == 1:
        return 5 + i if rng.random() > 0.2 else None
    if kind == 2:
        return rng.choice([2**63 - 1, -(2**63), 0])
    if kind == 3:
        return rng.choice(["detections", "scene", None])
    if kind == 4:
        return rng.choice([b"\x00\x01" * 32, None])
    return rng.choice([1, 1.0, True, None, "1"])  # mixed kinds in one column


def test_v2_round_trips_every_value_exactly():
    rng = random.Random(42)
    for _ in range(300):
        statements = random_statements(rng)
        decoded = logcodec.decode_v2(logcodec.encode_v2(statements))
        assert [(s, typed(p), m) for s, p, m in decoded] == [(s, typed(p), m) for s, p, m in statements]


def test_large_records_are_compressed_and_small_ones_are_not():
    small = [("INSERT INTO meta(key, value) VALUES(?, ?)", ["k", "v"], False)]
    assert logcodec.encode_v2(small)[0] == 0  # zlib's start-up costs more than it saves here
    rows = [[i, 1_000_000.0 + i, "detections", 0.5] for i in range(500)]
    big = logcodec.encode_v2([("INSERT INTO o VALUES(?,?,?,?)", rows, True)])
    assert big[0] == 1 and len(big) < 500 * 4


def test_damaged_payload_with_a_valid_checksum_is_a_clear_error(tmp_path):
    log = OpLog(tmp_path / "x.log")
    log.append([("INSERT INTO t VALUES(?)", [1], False)])
    log.close()
    segment = next((tmp_path / "x.log").glob("*.seg"))
    payload = b"\x00garbage that is no record"
    segment.write_bytes(MAGIC_V2 + FRAME.pack(len(payload), zlib.crc32(payload), 1) + payload
                        + FRAME.pack(len(payload), zlib.crc32(payload), 2) + payload)
    with pytest.raises(LogCorruptError, match="seq 1 .*cannot be decoded"):
        list(OpLog(tmp_path / "x.log").records())


def _rewrite_as_v1(log_dir) -> int:
    """Turn every segment into the old format (as a log written before v2 would be)."""
    count = 0
    for segment in sorted(log_dir.glob("*.seg")):
        data = segment.read_bytes()
        assert data.startswith(MAGIC_V2)
        out, pos = bytearray(MAGIC_V1), len(MAGIC_V2)
        while pos < len(data):
            length, _crc, seq = FRAME.unpack_from(data, pos)
            payload = logcodec.encode_v1(logcodec.decode_v2(data[pos + FRAME.size: pos + FRAME.size + length]))
            out += FRAME.pack(len(payload), zlib.crc32(payload), seq) + payload
            pos += FRAME.size + length
            count += 1
        segment.write_bytes(bytes(out))
    return count


def test_an_old_format_log_still_reads_appends_go_to_a_new_segment_and_rebuild_uses_both(tmp_path):
    path = tmp_path / "old.db"
    memory = open_memory(path)
    patrol(memory, 600)
    memory.flush()
    memory.close()
    log_dir = path.with_name(path.name + ".log")
    assert _rewrite_as_v1(log_dir) > 2
    memory = open_memory(path)  # an old log: reads, then writes new records in the new format
    patrol(memory, 600, start=2_000_000.0, seed=3)
    memory.flush()
    before = answers(memory)
    memory.close()
    magics = [s.read_bytes()[:8] for s in sorted(log_dir.glob("*.seg"))]
    assert magics == [MAGIC_V1, MAGIC_V2]
    rebuild_from_log(path, keep_old=False)
    memory = open_memory(path)
    assert answers(memory) == before
    memory.close()


def test_a_torn_tail_in_an_old_format_segment_is_cut(tmp_path):
    path = tmp_path / "torn.db"
    memory = open_memory(path)
    patrol(memory, 300)
    memory.close()
    log_dir = path.with_name(path.name + ".log")
    _rewrite_as_v1(log_dir)
    segment = next(log_dir.glob("*.seg"))
    good = segment.stat().st_size
    last_seq = max(r.seq for r in OpLog(log_dir).records())
    with open(segment, "ab") as handle:
        handle.write(FRAME.pack(500, 0, last_seq + 1) + b"cut short")
    log = OpLog(log_dir)
    assert log.torn_bytes_cut == FRAME.size + len(b"cut short") and segment.stat().st_size == good
    assert log.last_seq == last_seq


def test_an_empty_old_format_segment_is_replaced_not_appended_to(tmp_path):
    folder = tmp_path / "e.log"
    folder.mkdir()
    (folder / "000000000001.seg").write_bytes(MAGIC_V1)
    log = OpLog(folder)
    log.append([("INSERT INTO t VALUES(?)", [1.5], False)])
    log.close()
    assert (folder / "000000000001.seg").read_bytes()[:8] == MAGIC_V2
    assert [(r.seq, r.statements) for r in OpLog(folder).records()] == [(1, [("INSERT INTO t VALUES(?)", [1.5], False)])]


def test_v2_log_is_much_smaller_than_v1_for_the_same_writes(tmp_path):
    path = tmp_path / "size.db"
    memory = open_memory(path)
    patrol(memory, 5000)
    memory.close()
    records = list(OpLog(path.with_name(path.name + ".log")).records())
    v1 = sum(FRAME.size + len(logcodec.encode_v1(r.statements)) for r in records)
    v2 = sum(FRAME.size + len(logcodec.encode_v2(r.statements)) for r in records)
    assert v2 < 0.75 * v1


def test_a_failed_append_leaves_no_half_record_behind(tmp_path, monkeypatch):
    from emem_ros.storage import oplog as oplog_module

    log = OpLog(tmp_path / "f.log")
    log.append([("INSERT INTO t VALUES(?)", [1], False)])

    def half_then_fail(fd, parts):
        import os

        os.write(fd, bytes(parts[0])[:5])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(oplog_module, "_writev", half_then_fail)
    with pytest.raises(OSError, match="No space"):
        log.append([("INSERT INTO t VALUES(?)", [2], False)])
    monkeypatch.undo()
    log.append([("INSERT INTO t VALUES(?)", [3], False)])
    log.close()
    reopened = OpLog(tmp_path / "f.log")
    assert reopened.torn_bytes_cut == 0
    assert [(r.seq, r.statements[0][1]) for r in reopened.records()] == [(1, [1]), (2, [3])]


def test_the_hot_statements_are_in_the_known_sql_table():
    """A change to one of these strings silently doubles small records: keep the table in step."""
    from emem_ros.agent import ledger

    assert ledger._INSERT_SQL in logcodec.KNOWN_SQL and ledger._FTS_SQL in logcodec.KNOWN_SQL
    sample = [("INSERT INTO texts(text, embedding) VALUES(?, ?)", ["mug", None], False)]
    assert len(logcodec.encode_v2(sample)) < 30


def test_the_small_record_path_writes_the_same_bytes_as_the_general_one(monkeypatch):
    rng = random.Random(1)
    cases = []
    for _ in range(1500):
        statements = []
        for _ in range(rng.randrange(1, 4)):
            sql = rng.choice(logcodec.KNOWN_SQL + ("SELECT ? || ?",))
            params = [rng.choice(["", "abc", "ü" * rng.randrange(50), "x" * rng.randrange(700)])
                      for _ in range(rng.randrange(0, 4))]
            statements.append((sql, params, False))
        cases.append((statements, logcodec._encode_small(statements)))
    monkeypatch.setattr(logcodec, "_encode_small", lambda statements: None)
    assert sum(small is not None for _, small in cases) > 500  # the fast path is really taken
    for statements, small in cases:
        general = logcodec.encode_v2(statements)
        assert small is None or small == general
        assert logcodec.decode_v2(general) == statements


def test_logs_with_the_numbered_experience_insert_still_replay(tmp_path):
    """Older logs hold the ledger insert with ?1/?2 placeholders (deprecated in Python 3.12, refused in
    3.14 when bound from a list); replaying one runs the plain-"?" statement to the same effect."""
    import sqlite3
    import warnings

    from emem_ros.storage.oplog import Record, apply_record

    legacy = logcodec.KNOWN_SQL[6]
    assert "?1" in legacy and "?2" in legacy and logcodec.LEGACY_SQL[legacy] == logcodec.KNOWN_SQL[-1]
    memory = Memory(config=MemoryConfig(db_path=str(tmp_path / "m.db"), flush_interval=0.0),
                    embedding_provider=HashingEmbeddingProvider())
    memory.close()
    conn = sqlite3.connect(tmp_path / "m.db")
    content = ('{"goal":"fetch the mug","action":"went to the kitchen","result":"door closed",'
               '"reflection":"open the door first","tags":[],"stamp":5.0}')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_record(conn, Record(1, [(legacy, ["exp-1", content], False)]))
    assert conn.execute("SELECT id, goal, result, stamp FROM experiences").fetchall() == [
        ("exp-1", "fetch the mug", "door closed", 5.0)]
    conn.close()
