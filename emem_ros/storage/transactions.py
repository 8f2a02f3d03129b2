"""Write transactions and the operation log: the store's durability rules in one place.

Every write runs under the single writer lock; with the operation log on,
the transaction's statements are appended to the log *before* COMMIT and
the log sequence number is committed with them, so a crash between the two
is redone on the next open (``_redo_from_log``). Small transactions can be
made durable in the log now and applied to SQLite with the next write
(``write_deferred``: the experience ledger's cheap path).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence, cast

from emem_ros.core.errors import StoreError
from emem_ros.storage.base import StoreBase
from emem_ros.storage.events import Announcement, Commit, RemovedObservation
from emem_ros.storage.logcodec import Statement
from emem_ros.storage.oplog import Record, RecordingConnection, apply_record
from emem_ros.storage.writer_lock import WriterLock

log = logging.getLogger(__name__)


class TransactionsMixin(StoreBase):
    """``MemoryStore``'s writes: ``write()``, deferred log records, redo after a crash, log checkpoints.

    Uses the store's ``_conn``, ``_write_lock``, ``oplog``, ``_deferred``,
    ``_announced``, ``vectors``, ``places`` and ``commits``.
    """

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the writer lock; rolls back on any error.

        With the operation log on, the transaction's statements are appended to
        the log before COMMIT, and its sequence number is committed with it.
        After COMMIT the store applies what the transaction announced it removed
        to its own derived indexes and publishes one ``Commit`` to its
        subscribers (``commits``).
        """
        with self.state.write_lock:
            if self.state.closed:
                raise StoreError("the memory is closed")
            self.state.conn.execute("BEGIN IMMEDIATE")
            recording = RecordingConnection(self.state.conn) if self.oplog is not None else None
            deferred = self.state.deferred
            self.state.announced = Announcement()
            try:
                for seq, statements in deferred:  # logged earlier: they come first, in log order
                    apply_record(self.state.conn, Record(seq, statements))
                # A RecordingConnection passes every Connection method through and logs the mutating ones.
                yield cast(sqlite3.Connection, recording) if recording is not None else self.state.conn
                if self.oplog is not None and recording is not None and recording.statements:
                    seq, offset = self.oplog.append(recording.statements)
                    try:
                        self.state.conn.execute(
                            "INSERT OR REPLACE INTO meta(key, value) VALUES('log_seq', ?)", (str(seq),))
                        self.state.commits_begun += 1
                        self.state.conn.execute("COMMIT")
                    except BaseException:
                        self.oplog.undo_append(seq, offset)
                        raise
                else:
                    if deferred:
                        self.state.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('log_seq', ?)",
                                           (str(deferred[-1][0]),))
                    self.state.commits_begun += 1
                    self.state.conn.execute("COMMIT")
                if deferred:
                    self.state.deferred = []
            except BaseException:
                self.state.announced = Announcement()
                self.state.commits_published = self.state.commits_begun
                if self.state.conn.in_transaction:
                    self.state.conn.execute("ROLLBACK")
                raise
            announced, self.state.announced = self.state.announced, Announcement()
            self.state.committed()
            try:
                self._after_commit(deferred, recording, announced)
            finally:
                self.state.commits_published = self.state.commits_begun

    def announce(self, *, removed_texts: Sequence[tuple[int, str]] = (), removed_places: Sequence[int] = (),
                 reshaped: bool = False, rewritten: bool = False,
                 removed_observations: Sequence[RemovedObservation] = (), described: bool = False) -> None:
        """Inside ``write()``: rows this transaction removed, for the indexes and caches after COMMIT.

        ``described``: the ``reshaped`` change is only the deletion of ``removed_observations`` (and links
        such as gist ids): views keyed by text, layer, episode and stamp may apply it instead of rebuilding.
        """
        announced = self.state.announced
        announced.removed_texts.extend(removed_texts)
        announced.removed_places.extend(removed_places)
        announced.removed_observations.extend(removed_observations)
        announced.reshaped = announced.reshaped or reshaped
        announced.opaque = announced.opaque or (reshaped and not described)
        announced.rewritten = announced.rewritten or rewritten

    def wait_published(self, timeout: float = 1.0) -> Optional[int]:
        """For a reader that just took its snapshot: the commit count the snapshot may include, once every
        one of those commits has been published (None if that takes longer than ``timeout``).

        A commit is counted before COMMIT and published after it, so a snapshot taken before this call holds
        no commit numbered above the count read here; waiting for the publication means the reader has heard
        of every commit its snapshot shows (``Commit.number``). The wait is one COMMIT and its subscribers.
        """
        number = self.state.commits_begun
        deadline = time.monotonic() + timeout
        while self.state.commits_published < number:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.0002)
        return number

    def _after_commit(self, deferred: list[tuple[int, list[Statement]]], recording: Optional[RecordingConnection],
                      announced: Announcement) -> None:
        """Derived indexes drop what was removed; subscribers hear of the commit. Never fails the write.

        Subscribers get the transaction's mutating statements, or None when they
        are not known (no operation log): "something changed".
        """
        if announced.removed_texts:
            removed = [text_id for text_id, _ in announced.removed_texts]
            self.update_index("texts", lambda: self.vectors["texts"].remove(removed))
            self.forget_texts([text for _, text in announced.removed_texts])
        if announced.removed_places:
            self.update_index("places", lambda: self.places.delete(announced.removed_places))
        statements: Optional[list[Statement]] = None
        if self.oplog is not None:
            statements = [s for _, logged in deferred for s in logged]
            statements += recording.statements if recording is not None else []
            if not statements and announced.empty():
                return
        self.commits.publish(Commit(statements, tuple(announced.removed_texts), tuple(announced.removed_places),
                                    announced.reshaped, tuple(announced.touched_places), announced.rewritten,
                                    tuple(announced.removed_observations),
                                    announced.reshaped and not announced.opaque, self.state.commits_begun))

    def write_deferred(self, statements: list[Statement]) -> int:
        """Make a small transaction durable in the log now; SQLite applies it with the next write.

        For writes that must be cheap at the caller (the experience ledger): the
        record is in the log (in the OS, like every commit) when this returns, so
        a crash loses nothing (the open redoes it); SQLite and the derived
        indexes catch up at the next ``write()``, ``apply_deferred()``,
        checkpoint or close. Readers that must see it call ``apply_deferred()``.
        Without a log it is an ordinary write. Returns how many wait to be applied.
        """
        with self.state.write_lock:
            if self.state.closed:
                raise StoreError("the memory is closed")
            if self.oplog is None:
                with self.write() as conn:
                    apply_record(conn, Record(0, statements))
                return 0
            seq, _ = self.oplog.append(statements)
            self.state.deferred.append((seq, statements))
            return len(self.state.deferred)

    @property
    def deferred_count(self) -> int:
        return len(self.state.deferred)

    def apply_deferred(self) -> int:
        """Apply logged-but-not-applied transactions to SQLite now; returns how many."""
        if not self.state.deferred:
            return 0
        with self.state.write_lock:
            count = len(self.state.deferred)
            if count and not self.state.closed:
                with self.write():
                    pass  # write() applies them first, in one transaction
            return count

    def _redo_from_log(self) -> int:
        """Apply log records SQLite had not committed when the process died."""
        assert self.oplog is not None
        row = self.state.conn.execute("SELECT value FROM meta WHERE key='log_seq'").fetchone()
        db_seq = int(row[0]) if row else 0
        if self.oplog.last_seq < db_seq:
            has_data = self.state.conn.execute("SELECT 1 FROM texts LIMIT 1").fetchone()
            if has_data:
                log.warning("operation log %s ends at seq %d but the database is at %d; "
                            "a rebuild can only start from a checkpoint", self.log_dir,
                            self.oplog.last_seq, db_seq)
            self.oplog.last_seq = db_seq
            return 0
        redone = 0
        for record in self.oplog.records(after=db_seq):
            self.state.conn.execute("BEGIN IMMEDIATE")
            try:
                apply_record(self.state.conn, record)
                self.state.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('log_seq', ?)",
                                   (str(record.seq),))
                self.state.conn.execute("COMMIT")
            except BaseException:
                self.state.conn.execute("ROLLBACK")
                raise
            redone += 1
        if redone:
            log.warning("replayed %d transaction(s) from the operation log after an unclean stop", redone)
        return redone

    @property
    def write_lock(self) -> WriterLock:
        return self.state.write_lock

    def checkpoint_log(self) -> Optional[int]:
        """Write a consistent base copy of the file and prune log segments behind it.

        Retention (``log_keep_segments`` > 0) may only drop what a base covers,
        so a rebuild still has everything it needs.
        """
        if self.oplog is None:
            return None
        with self.state.write_lock:
            self.apply_deferred()  # the base must hold everything up to the seq it is named by
            seq = self.oplog.last_seq
            final = self.log_dir / f"base-{seq:012d}.db"
            temp = self.log_dir / f".base-{seq:012d}.db.tmp"
            target = sqlite3.connect(str(temp))
            try:
                self.state.conn.backup(target)
            finally:
                target.close()
            os.replace(temp, final)
            self.oplog.sync()
        for old in self.log_dir.glob("base-*.db"):
            if old != final:
                old.unlink()
        keep = self.config.log_keep_segments
        if keep > 0:
            segments = self.oplog.segments()
            if len(segments) > keep:
                cutoff = segments[-keep][0] - 1
                self.oplog.prune(min(cutoff, seq))
        return seq
