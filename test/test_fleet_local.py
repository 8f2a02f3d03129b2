"""Reading a robot's log beside its writer (emem_ros/fleet/local.py, oplog.iter_payloads, log holds)."""

from __future__ import annotations

import threading
import time

import pytest

from emem_ros.fleet.errors import FleetError
from emem_ros.fleet.local import LocalMemory
from emem_ros.storage.oplog import OpLog, lowest_hold, read_hold, set_hold
from test.support.patrol import open_memory


def _memory_with_records(tmp_path, clock, n=40, **overrides):
    path = tmp_path / "m.db"
    memory = open_memory(path, clock, flush_batch_size=5, **overrides)
    for i in range(n):
        memory.add(f"thing {i}", x=1.0, y=float(i), timestamp=clock.now + i, layer_name="detections")
    memory.flush()
    return path, memory


def test_reading_resumes_where_it_stopped_instead_of_rescanning(tmp_path, clock):
    path, memory = _memory_with_records(tmp_path, clock)
    memory.close()
    local = LocalMemory(path)
    first = list(local.records(0, 4))
    assert [r.seq for r in first] == [1, 2, 3, 4]
    segment = sorted((tmp_path / "m.db.log").glob("*.seg"))[0]
    raw = bytearray(segment.read_bytes())
    raw[30] ^= 0xFF  # damage record 1, already read
    segment.write_bytes(bytes(raw))
    rest = [r.seq for r in local.records(4, 10 ** 9)]  # resumes after record 4: record 1 is not read again
    assert rest[0] == 5 and rest == sorted(rest)
    # A fresh reader scans from the start and stops at the damage (in the last segment it looks like a torn
    # tail: the end of the log for now; the sync then finds the records it needs missing and says so).
    assert list(LocalMemory(path).records(0, 10 ** 9)) == []
    local.close()


def test_records_past_the_committed_position_are_not_read(tmp_path, clock):
    path, memory = _memory_with_records(tmp_path, clock)
    local = LocalMemory(path)
    state = local.state()
    assert state.log_seq == memory.store.oplog.last_seq
    seqs = [r.seq for r in local.records(0, state.log_seq - 2)]
    assert seqs[-1] == state.log_seq - 2
    assert local._position.seq == state.log_seq - 2
    memory.close()
    local.close()


def test_a_reader_beside_a_writing_memory_sees_only_whole_records(tmp_path, clock):
    path, memory = _memory_with_records(tmp_path, clock, n=10, log_segment_bytes=4096)
    stop = threading.Event()

    def write():
        i = 0
        while not stop.is_set():
            memory.add(f"item {i}", x=0.5, y=0.5, timestamp=clock.now + i, layer_name="detections")
            memory.flush()
            i += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        local = LocalMemory(path)
        seen, reads, deadline = 0, 0, time.monotonic() + 60.0
        while (reads < 30 or seen <= 10) and time.monotonic() < deadline:  # read while the log grows
            records = list(local.records(0, 10 ** 12))
            assert [r.seq for r in records] == list(range(1, len(records) + 1))
            seen = max(seen, len(records))
            reads += 1
        local.close()
    finally:
        stop.set()
        writer.join()
    memory.close()
    assert seen > 10


def test_holds_keep_segments_from_pruning(tmp_path):
    folder = tmp_path / "log"
    log = OpLog(folder, segment_bytes=256)
    for i in range(60):
        log.append([("INSERT INTO t VALUES(?)", [i], False)])
    set_hold(folder, "fleet-a", 20)
    set_hold(folder, "fleet-b", 35)
    assert lowest_hold(folder) == 20 and read_hold(folder, "fleet-b") == 35
    log.prune(55)
    assert log.segments()[0][0] <= 21  # record 21 is still there
    assert [r.seq for r in log.records(20)][0] == 21
    set_hold(folder, "fleet-a", 50)
    log.prune(55)
    assert log.segments()[0][0] <= 36 < [r.seq for r in log.records(0)][-1]
    with pytest.raises(ValueError, match="hold name"):
        set_hold(folder, "../x", 1)
    log.close()


def test_a_missing_memory_or_log_is_named(tmp_path, clock):
    with pytest.raises(FleetError, match="no memory file"):
        LocalMemory(tmp_path / "none.db")
    memory = open_memory(tmp_path / "nolog.db", clock, log_enabled=False)
    memory.add("x", x=0.0, y=0.0)
    memory.close()
    with pytest.raises(FleetError, match="log_enabled: true"):
        LocalMemory(tmp_path / "nolog.db")
