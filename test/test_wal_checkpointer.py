"""The WAL is copied back by the checkpointer thread, never inside a COMMIT (storage/checkpointer.py)."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time

from emem_ros.storage.checkpointer import BEHIND, IDLE_MOST, WalCheckpointer, next_wait


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


def test_pace_backs_off_while_idle_and_returns_after_a_write():
    interval, finish = 0.25, 8192
    wait = interval
    waits = []
    for _ in range(6):
        wait = next_wait(wait, interval, 0, False, finish, False)
        waits.append(wait)
    assert waits == [0.5, 1.0, 2.0, IDLE_MOST, IDLE_MOST, IDLE_MOST]
    assert next_wait(IDLE_MOST, interval, 10, True, finish, False) == interval
    # a long log that could not start over: soon again, idle or not; after a finish the usual pace
    assert next_wait(IDLE_MOST, interval, finish + 1, False, finish, False) == BEHIND
    assert next_wait(BEHIND, interval, finish + 1, True, finish, True) == interval


def test_written_sees_other_connections_commits(make_memory):
    memory = make_memory()
    checkpointer = memory.store.checkpointer
    checkpointer.checkpoint()  # opens its connection
    checkpointer._written()
    assert not checkpointer._written()
    memory.add("a red mug", 1.0, 2.0, 0.0)
    memory.flush()
    assert checkpointer._written()
    assert not checkpointer._written()


def test_idle_memory_checkpoints_rarely(make_memory):
    memory = make_memory()
    checkpointer = memory.store.checkpointer
    memory.add("a red mug", 1.0, 2.0, 0.0)
    memory.flush()
    time.sleep(0.6)  # the write's round has run
    before = checkpointer.checkpoints
    time.sleep(2.0)  # at the old fixed pace of 0.25 s: 8 rounds
    assert checkpointer.checkpoints - before <= 3


def test_a_commit_wakes_an_idle_checkpointer(make_memory):
    """A burst after a quiet spell is copied at once, not up to IDLE_MOST seconds later (the log would grow)."""
    memory = make_memory()
    checkpointer = memory.store.checkpointer
    memory.add("a red mug", 1.0, 2.0, 0.0)
    memory.flush()
    deadline = time.monotonic() + 10
    while not checkpointer.idle and time.monotonic() < deadline:
        time.sleep(0.01)
    assert checkpointer.idle
    time.sleep(0.6)  # into a wait of a second or more
    before = checkpointer.checkpoints
    memory.add("a blue cup", 2.0, 2.0, 0.0)
    memory.flush()
    deadline = time.monotonic() + 0.4
    while checkpointer.checkpoints == before and time.monotonic() < deadline:
        time.sleep(0.005)
    assert checkpointer.checkpoints > before
