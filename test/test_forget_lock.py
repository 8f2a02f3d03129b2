"""What keeps a forget's writer-lock holds short: a once-only VACUUM at open, a log restart prepared outside."""

from __future__ import annotations

from emem_ros.storage.oplog import HIDDEN, OpLog, discard


def _put(log: OpLog, n: int, value: str) -> None:
    log.append([("INSERT INTO meta(key, value) VALUES(?, ?)", [f"k{n}", value], False)])


def test_records_written_between_prepare_and_finish_are_kept_once(tmp_path):
    log = OpLog(tmp_path / "x.log", segment_bytes=64)
    for n in range(1, 8):
        _put(log, n, "secret" if n < 5 else "kept")
    prepared = log.prepare_restart(5)
    assert prepared.copied == 7
    for n in range(8, 11):  # ingest goes on while the forget prepares (it may open new segments)
        _put(log, n, "later")
    records, hidden = log.finish_restart(prepared)
    assert records == 5 and hidden
    assert [s for s, _ in log.segments()] == [6]
    assert all(path.name.endswith(HIDDEN) and path.exists() for path in hidden)
    assert [r.seq for r in log.records()] == [6, 7, 8, 9, 10]
    discard(hidden)
    assert not any(path.exists() for path in hidden)
    _put(log, 11, "after")
    log.close()
    folder = tmp_path / "x.log"
    assert b"secret" not in b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())
    assert [r.seq for r in OpLog(folder).records()] == [6, 7, 8, 9, 10, 11]


def test_a_file_from_before_secure_delete_is_vacuumed_at_open_not_by_forget(make_memory, clock):
    memory = make_memory()
    memory.add("a man in a red jacket", x=1.0, y=1.0, timestamp=clock.now - 10, layer_name="scene")
    memory.add("chair", x=2.0, y=1.0, timestamp=clock.now - 9, layer_name="detections")
    memory.flush()
    assert not memory.store.vacuumed_at_open
    with memory.store.write() as conn:  # as a file migrated from schema v3 looks
        conn.execute("DELETE FROM meta WHERE key='secure_delete'")
    memory.close()
    reopened = make_memory()
    assert reopened.store.vacuumed_at_open
    assert reopened.store.meta("secure_delete") == "vacuumed"
    report = reopened.forget(match="red jacket")
    assert report.observations == 1 and not report.vacuumed
    reopened.close()
    assert not make_memory().store.vacuumed_at_open
