"""WAL checkpoints off the writer lock, so a COMMIT never copies the log back into the file.

SQLite checkpoints the WAL inside the COMMIT that takes it past 1,000
pages, and keeps doing so on every COMMIT while it stays past that (a
reader on an older snapshot holds frames back and the log cannot start
over: maintenance reads tens of thousands of rows at a time). Each such
checkpoint copies pages and syncs the log and the file twice, all under
the store's writer lock: measured with three unthrottled writers and
maintenance, ingest flushes of 64 observations held the lock up to 220 ms
in COMMIT, and a question waited behind them.

So the writer connection never checkpoints (``wal_autocheckpoint=0``);
this thread, with its own connection, copies the log back every
``interval`` seconds without the writer lock (PASSIVE: it never waits for
readers or writers), less often while nothing is written (``next_wait``). The log starts over from its beginning only at a
write that begins with every frame copied, which a copy racing the writers
rarely leaves; so when the log is longer than ``finish_frames`` and only a
few frames (at most ``finish_gap``) are left to copy, the thread copies
them under the writer lock (briefly: the bulk is done, and only when a
sync of the log just took under ``CALM`` seconds), as SQLite's own
checkpoint did. Past ``MOST_FRAMES`` it finishes whatever the disk does,
so the log is bounded. The store stops it (``stop``) before it closes.
Measured cost: a WAL file of about 90 MB under three unthrottled writers
and maintenance (40-60 MB with SQLite's own checkpoints).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from emem_ros.indexes.snapshots import fsync_path
from emem_ros.storage.writer_lock import WriterLock

log = logging.getLogger(__name__)

INTERVAL = 0.25
"""Seconds between checkpoints (a copy with nothing to do reads the WAL index only)."""
FINISH_FRAMES = 8192
"""Frames (of 4 KiB: 32 MiB) in the log above which the last copy is finished under the writer lock.

SQLite checkpoints past 1,000 frames; finishing costs a sync of the file under the lock (tens of ms when
the disk is busy), so it is done about 8 times less often, for a longer log file."""
FINISH_GAP = 256
"""Most frames (of 4 KiB) copied under the writer lock; more left means a reader holds them: try next round."""
PASSES = 8
"""Copies without the writer lock per round, each catching up with what the writers appended meanwhile."""
CALM = 0.02
"""Seconds a sync of the log plus a copy may take for the disk to count as calm: only then is a copy finished
under the writer lock (its sync waits for the disk; on a busy one that was measured at seconds)."""
MOST_FRAMES = 65536
"""Frames (256 MiB) past which the copy is finished under the lock even on a busy disk: the log is bounded."""
BEHIND = 0.02
"""Seconds to the next round while the log is longer than ``finish_frames`` (it could not start over yet)."""
IDLE_MOST = 4.0
"""Longest wait between rounds while nothing is written: the pace doubles up to it, so an idle memory's
thread wakes a few times a minute instead of four times a second. The first COMMIT after a quiet spell
wakes it (``wake``): a burst of writes must not run seconds ahead of the copy, or the log grows past the
size whose sync counts as calm (measured: 390 MB instead of 70-120 MB under three unthrottled writers)."""


def next_wait(wait: float, interval: float, log_frames: int, grew: bool, finish_frames: int,
              finished: bool) -> float:
    """Seconds to the next round, from how the last one went.

    Soon again while the log is long and nothing was finished; after a
    finish (the log starts over unless a reader is on it) the usual pace,
    so a reader cannot make us hold the lock often; while nothing was
    appended, twice as long as last time, up to ``IDLE_MOST``.
    """
    if log_frames > finish_frames and not finished:
        return BEHIND
    if grew:
        return interval
    return min(max(wait, interval) * 2, max(IDLE_MOST, interval))


class WalCheckpointer:
    """A daemon thread copying the WAL back into the database file (see the module docstring)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], lock: WriterLock, *,
                 interval: float = INTERVAL, finish_frames: int = FINISH_FRAMES,
                 finish_gap: int = FINISH_GAP, most_frames: int = MOST_FRAMES,
                 wal_path: Optional[Path] = None) -> None:
        self._connect = connect
        self._lock = lock
        self.interval = interval
        self.finish_frames = finish_frames
        self.finish_gap = finish_gap
        self.most_frames = most_frames
        self._wal_path = wal_path
        self.postponed = 0
        """Finishes put off because the disk was busy."""
        self._conn: Optional[sqlite3.Connection] = None
        self._stop = threading.Event()
        self._mutex = threading.Lock()  # one checkpoint at a time (the thread, or a caller of ``checkpoint``)
        self.checkpoints = 0
        self.finished = 0
        """How many copies were finished under the writer lock."""
        self.last: tuple[int, int, int] = (0, 0, 0)
        """(busy, frames in the log, frames copied) of the last checkpoint, as SQLite returns them."""
        self._thread: Optional[threading.Thread] = None
        self._data_version = -1
        self._wake = threading.Event()
        self.idle = False
        """True while the thread waits longer than ``interval`` (nothing was written): a COMMIT wakes it."""

    def start(self) -> "WalCheckpointer":
        self._thread = threading.Thread(target=self._run, name="emem-wal-checkpoint", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        wait = self.interval
        while True:
            self.idle = wait > self.interval
            self._wake.wait(wait)
            self._wake.clear()
            self.idle = False
            if self._stop.is_set():
                return
            finished = self.finished
            try:
                frames = self.checkpoint()[1]
            except sqlite3.Error as exc:  # the next round tries again; the log only grows meanwhile
                log.debug("WAL checkpoint failed: %s", exc)
                frames = 0
            wait = next_wait(wait, self.interval, frames, self._written(), self.finish_frames,
                             self.finished != finished)

    def wake(self) -> None:
        """After a COMMIT (the store calls it under its writer lock): end an idle wait now; otherwise nothing."""
        if self.idle:
            self._wake.set()

    def _written(self) -> bool:
        """Whether another connection committed since the last look (SQLite's ``data_version``)."""
        with self._mutex:
            if self._conn is None:
                return True
            try:
                version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                return True
            changed, self._data_version = version != self._data_version, version
            return changed

    def checkpoint(self) -> tuple[int, int, int]:
        """Copy what the log holds back into the file now; finish under the writer lock when it is long."""
        with self._mutex:
            if self._stop.is_set():
                return self.last
            if self._conn is None:
                self._conn = self._connect()
            result = self._passive()
            for _ in range(PASSES):  # catch up with the writers, who keep appending meanwhile
                if result[1] - result[2] <= self.finish_gap or self._stop.is_set():
                    break
                copied = result[2]
                result = self._passive()
                if result[2] <= copied and self._stop.wait(0.005):  # a reader holds frames back: a query's time
                    break
            if self.finish_frames < result[1] and result[1] - result[2] <= self.finish_gap:
                began = time.perf_counter()
                self._sync_log()  # what the writers appended since, synced now: the finish's own sync is short
                result = self._passive()
                calm = time.perf_counter() - began < CALM
                if calm or result[1] > self.most_frames:
                    result = self._finish(result)
                else:
                    self.postponed += 1
            return result

    def _finish(self, result: tuple[int, int, int]) -> tuple[int, int, int]:
        """The last few frames under the writer lock, so the next write starts the log over."""
        while not self._lock.acquire(timeout=0.05):  # a close holding the lock is stopping us
            if self._stop.is_set():
                return result
        try:
            if not self._stop.is_set():
                result = self._passive()
                self.finished += 1
        finally:
            self._lock.release()
        return result

    def _sync_log(self) -> None:
        if self._wal_path is not None:
            fsync_path(self._wal_path)

    def _passive(self) -> tuple[int, int, int]:
        assert self._conn is not None
        row = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1
        self.last = (int(row[0]), int(row[1]), int(row[2]))
        return self.last

    def stop(self) -> None:
        """End the thread and close its connection (before the store closes its own)."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._mutex:
            if self._conn is not None:
                try:
                    self._conn.close()
                except sqlite3.Error:
                    pass
                self._conn = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

