"""MemoryStore: the SQLite graph plus its derived indexes, kept consistent.

One writer connection guarded by a lock; each reading thread gets its own
connection (WAL lets readers run while a flush or a consolidation writes).
Derived indexes (hnswlib per node kind, the places R-tree) are updated after
each commit and reconciled against SQLite on open, so a crash between the two
costs a catch-up, never data. Nothing after COMMIT may fail a write: a derived
index that cannot take the new rows is marked stale and rebuilt from SQLite
(at once, else at the next write or open), and a batch whose ids are already
stored is skipped, so a retried batch can never fail forever on
UNIQUE(observations.id).

One process writes a memory file: the store holds an advisory lock on
``<db>.lock`` from open to close (see ``filelock.py``).

The store's jobs live in focused modules, joined here:
``transactions`` (writes and the operation log), ``model_check`` (which
model the vectors belong to, re-embedding), ``derived_indexes`` (open,
reconcile, repair, save), ``ingest_write`` (the batch write path and
places), ``observation_reads`` and ``graph`` (reading records back; episodes,
gists, entities, edges).
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Optional

from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import StoreError
from emem_ros.indexes.spatial_index import SpatialIndex
from emem_ros.storage.checkpointer import WalCheckpointer
from emem_ros.storage.derived_indexes import VECTOR_TABLES, DerivedIndexesMixin
from emem_ros.storage.events import CommitFeed
from emem_ros.storage.filelock import ProcessLock
from emem_ros.storage.graph import GraphMixin
from emem_ros.storage.ingest_write import IngestWriteMixin
from emem_ros.storage.model_check import ModelCheckMixin
from emem_ros.storage.observation_reads import OBSERVATION_COLUMNS, ObservationReadsMixin
from emem_ros.storage.oplog import OpLog
from emem_ros.storage.place_cache import PlaceCache
from emem_ros.storage.records import EmbedFn, NewObservation, Place, WriteReport
from emem_ros.storage.schema import migrate, vacuum_once
from emem_ros.storage.state import ObservationIds, StoreState, TextCache
from emem_ros.storage.text_names import TextNames
from emem_ros.storage.transactions import TransactionsMixin
from emem_ros.storage.writer_lock import WriterLock

__all__ = ["MemoryStore", "NewObservation", "Place", "WriteReport", "EmbedFn", "VECTOR_TABLES",
           "OBSERVATION_COLUMNS", "check_db_path"]

log = logging.getLogger(__name__)

WRITER_CACHE_KIB = 8192
"""SQLite page cache of the writer connection (KiB). Each connection's cache fills up to its size with
pages it touched and stays full, in the process's RSS: at 64 MiB each (before issue 26) a node's RSS
grew with its file for days (writer, checkpointer and one reader per thread). Inserts touch the
right-hand pages of each index; the OS page cache keeps the rest of the file warm anyway."""
READER_CACHE_KIB = 2048
"""Page cache of every other connection (readers, one per thread; the WAL checkpointer): SQLite's default."""
SQLITE_HEAP_LIMIT = 8 * 1024 * 1024
"""SQLite's soft heap limit (bytes), for the whole process: past it, SQLite reuses the least recently used
pages of its caches instead of allocating more. The caps above are per connection, and a node has one reader
per thread: over a week its caches filled with the growing file, about 6 MB more on Sunday than on Monday
(issue 26). Set when a store opens, unless the process already has a limit."""


def check_db_path(path: Path) -> None:
    """Fail early, in plain words, on a path SQLite would reject obscurely."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.exists():
        raise StoreError(f"cannot open memory {path}: folder {folder} does not exist")
    if not folder.is_dir():
        raise StoreError(f"cannot open memory {path}: {folder} is not a folder")
    if path.exists() and path.is_dir():
        raise StoreError(f"cannot open memory {path}: it is a folder, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise StoreError(f"cannot open memory {path}: the file is read-only")
    if not os.access(folder, os.W_OK):
        raise StoreError(f"cannot open memory {path}: folder {folder} is not writable")


class MemoryStore(TransactionsMixin, ModelCheckMixin, DerivedIndexesMixin, IngestWriteMixin,
                  ObservationReadsMixin, GraphMixin):
    """One memory file: SQLite (the truth), its operation log and its derived indexes."""

    def __init__(self, config: MemoryConfig, dim: int, model_name: str) -> None:
        self.config = config
        self.dim = dim
        self.model_name = model_name
        self.path = Path(config.db_path)
        check_db_path(self.path)
        self._process_lock = ProcessLock(self.path.with_name(self.path.name + ".lock"), self.path)
        self._process_lock.acquire()
        try:
            self._open(config, dim)
        except BaseException:
            self._process_lock.release()
            raise

    def _open(self, config: MemoryConfig, dim: int) -> None:
        self.index_dir = self.path.with_name(self.path.name + ".idx")
        self.log_dir = self.path.with_name(self.path.name + ".log")
        self.redone = 0
        self.cell_size = 0.5
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self.state = StoreState(self._connect(WRITER_CACHE_KIB), WriterLock(), TextCache(config.embedding_cache_size))
        """What the store's parts share (see ``state.py``)."""
        self.commits = CommitFeed()
        """Told of each commit, after COMMIT, under the writer lock (see ``events.py``)."""
        self.place_cache = PlaceCache(self.reader, self.cell_size)
        """Places per text for the spatial tools; told after each commit which cells changed."""
        self.text_names = TextNames(self.reader)
        """id -> text of the texts answers name; told after each commit which rows were deleted."""
        self.commits.subscribe(self.place_cache.on_commit)
        self.commits.subscribe(self.text_names.on_commit)
        self.oplog: Optional[OpLog] = None
        try:
            migrate(self.state.conn)
            if config.log_enabled:
                self.oplog = OpLog(self.log_dir, config.log_segment_bytes)
                self.redone = self._redo_from_log()
            self.vacuumed_at_open = vacuum_once(self.state.conn)
            self.needs_reembed = self._check_model()
        except sqlite3.DatabaseError as exc:
            self.state.conn.close()
            raise StoreError(f"cannot open memory {self.path}: {exc}") from exc
        except BaseException:
            self.state.conn.close()
            raise
        try:
            self._open_derived(config, dim)
        except BaseException:
            self.state.conn.close()
            if self.oplog is not None:
                self.oplog.close()
            raise
        # The WAL is copied back by a thread, never inside a COMMIT under the writer lock (checkpointer.py).
        self.state.conn.execute("PRAGMA wal_autocheckpoint=0")
        self.checkpointer = WalCheckpointer(self._connect, self.state.write_lock,
                                            wal_path=Path(f"{self.path}-wal")).start()
        self.state.committed = self.checkpointer.wake

    def _open_derived(self, config: MemoryConfig, dim: int) -> None:
        row = self.state.conn.execute("SELECT COALESCE(MAX(id), 0) FROM observations").fetchone()
        self.state.ids = ObservationIds(int(row[0]))
        self.vectors_pending = self.state.conn.execute(
            "SELECT 1 FROM meta WHERE key='vectors_pending'").fetchone() is not None
        """Some texts were stored without the vector they need; ``backfill_vectors`` embeds them."""
        self.gist_cutoff = -math.inf
        """Gists that ended before this are not in the gists' graph (``gist_graph.py``)."""
        self.vectors = {name: self.new_vector_index(name) for name in VECTOR_TABLES}
        self.places = SpatialIndex("places")
        self.open_report: dict[str, Any] = {}
        if not self.needs_reembed:
            self.open_indexes()

    # ------------------------------------------------------------------ connections
    def _connect(self, cache_kib: int = READER_CACHE_KIB) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30.0
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA temp_store=MEMORY")
            conn.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA secure_delete=ON")  # deleted rows are zeroed, not left in free space (forget)
            if not conn.execute("PRAGMA soft_heap_limit").fetchone()[0]:
                conn.execute(f"PRAGMA soft_heap_limit={SQLITE_HEAP_LIMIT}")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open memory {self.path}: {exc}") from exc
        return conn

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (created on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.state.closed:
                raise StoreError("the memory is closed")
            conn = self._connect()
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn


    # ------------------------------------------------------------------ metadata
    def meta(self, key: str) -> Optional[str]:
        row = self.reader().execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self.write() as conn:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, value))


    # ------------------------------------------------------------------ stats and lifecycle
    def counts(self) -> dict[str, Any]:
        conn = self.reader()
        tiers = dict(conn.execute("SELECT tier, COUNT(*) FROM observations GROUP BY tier").fetchall())
        return {
            "observations": sum(tiers.values()),
            "tiers": tiers,
            "texts": conn.execute("SELECT COUNT(*) FROM texts").fetchone()[0],
            "places": conn.execute("SELECT COUNT(*) FROM places").fetchone()[0],
            "episodes": conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0],
            "gists": conn.execute("SELECT COUNT(*) FROM gists").fetchone()[0],
            "entities": conn.execute("SELECT COUNT(*) FROM entities").fetchone()[0],
            "edges": conn.execute("SELECT COUNT(*) FROM edges").fetchone()[0],
        }

    def close(self) -> None:
        """Apply logged transactions, save index snapshots, close files, drop the process lock.

        Nothing here can lose stored data: what is logged but not applied is
        redone on the next open, and unsaved snapshots are rebuilt then.
        """
        self.checkpointer.stop()  # first: its last copy may wait for the writer lock
        with self.state.write_lock:
            if self.state.closed:
                return
            try:
                try:
                    self.apply_deferred()
                except Exception:  # still in the log: the next open redoes it
                    log.exception("could not apply %d logged transaction(s) at close", len(self.state.deferred))
                if not self.needs_reembed:
                    self.save_indexes()
            finally:
                self.state.closed = True
                try:
                    self.state.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass
                try:
                    self.state.conn.close()
                    if self.oplog is not None:
                        self.oplog.close()
                    with self._readers_lock:
                        for conn in self._readers:
                            try:
                                conn.close()
                            except sqlite3.Error:
                                pass
                        self._readers.clear()
                finally:
                    self._process_lock.release()

    @property
    def closed(self) -> bool:
        return self.state.closed
