"""The WAL is copied back by the checkpointer thread, never inside a COMMIT (storage/checkpointer.py)."""

from __future__ import annotations

import shutil
import sqlite3
import threading

from emem_ros.storage.checkpointer import WalCheckpointer


def _fill(memory, n: int = 3000, every: int = 100) -> None:
    """Many commits of new texts (each with a vector): far more than 1,000 WAL frames."""
    for i in range(n):
        memory.add(f"crate number {i} with a label", float(i % 50), float(i // 50), 0.0)
        if i % every == every - 1:
            memory.flush()
    memory.flush()


def _paused(memory) -> WalCheckpointer:
    """Stop the store's thread; a checkpointer the test drives by hand takes its place (closed with the store)."""
    store = memory.store
    store.checkpointer.stop()
    manual = WalCheckpointer(store._connect, store.state.write_lock, finish_frames=1000,
                            most_frames=0)  # finished whatever the disk is doing: no timing in a test
    store.checkpointer = manual
    return manual


def _log_frames(db) -> tuple[int, int]:
    """(frames in the log, frames copied back) as a PASSIVE checkpoint from another connection sees them."""
    probe = sqlite3.connect(str(db))
    try:
        _, frames, copied = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        probe.close()
    return frames, copied


def _count(db) -> int:
    conn = sqlite3.connect(str(db))
    try:
        return int(conn.execute("SELECT COUNT(*) FROM observations").fetchone()[0])
    finally:
        conn.close()


def test_commits_never_checkpoint_and_an_uncheckpointed_log_loses_nothing(make_memory, tmp_path):
    memory = make_memory()
    assert memory.store.state.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    _paused(memory)
    _fill(memory)
    db = tmp_path / "memory.db"
    # a crash now: the file and its log as they are (SQLite would have copied the log back inside a COMMIT
    # past 1,000 frames and started it over at the next write)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    shutil.copy(db, crashed / "memory.db")
    shutil.copy(str(db) + "-wal", crashed / "memory.db-wal")
    frames, _ = _log_frames(crashed / "memory.db")
    assert frames > 1000  # SQLite alone would have started over past 1,000
    assert _count(crashed / "memory.db") == 3000


def test_a_checkpoint_copies_the_log_back_and_the_log_starts_over(make_memory, tmp_path):
    memory = make_memory()
    manual = _paused(memory)
    _fill(memory)
    busy, frames, copied = manual.checkpoint()
    assert (busy, copied) == (0, frames) and frames > manual.finish_frames
    assert manual.finished == 1  # the last frames were copied under the writer lock
    memory.add("one more crate", 1.0, 1.0, 0.0)
    memory.flush()
    db = tmp_path / "memory.db"
    frames_after, _ = _log_frames(db)
    assert frames_after < 100  # the write after it started the log from its beginning
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(db, alone / "memory.db")  # the file without its log: everything copied back is in it
    assert _count(alone / "memory.db") >= 3000


def test_stopping_while_the_checkpointer_waits_for_the_writer_lock_does_not_deadlock(make_memory):
    memory = make_memory()
    manual = _paused(memory)
    _fill(memory, n=2000)
    lock = memory.store.state.write_lock
    lock.acquire()  # a close holds the writer lock while it stops the checkpointer
    try:
        worker = threading.Thread(target=manual.checkpoint, daemon=True)
        worker.start()
        worker.join(0.5)  # it copied without the lock and now waits for it to finish
        manual.stop()
        worker.join(10)
        assert not worker.is_alive()
    finally:
        lock.release()
    assert manual.finished == 0


def test_close_stops_the_thread(make_memory):
    memory = make_memory()
    checkpointer = memory.store.checkpointer
    assert checkpointer.running
    memory.add("a red mug", 1.0, 2.0, 0.0)
    memory.close()
    assert not checkpointer.running
