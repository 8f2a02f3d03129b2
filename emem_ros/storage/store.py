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
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import EmbeddingMismatchError, StoreError, UnknownNodeError
from emem_ros.core.types import (
    Entity,
    Episode,
    EpisodeStatus,
    Gist,
    NodeKind,
    Observation,
    Position,
    SourceType,
    Tier,
    make_id,
    parse_id,
)
from emem_ros.indexes.spatial_index import SpatialIndex
from emem_ros.indexes.vector_index import VectorIndex
from emem_ros.storage import codec
from emem_ros.storage.filelock import ProcessLock
from emem_ros.storage.oplog import OpLog, Record, RecordingConnection, apply_record
from emem_ros.storage.place_cache import PlaceCache
from emem_ros.storage.schema import migrate

log = logging.getLogger(__name__)

EmbedFn = Callable[[list[str]], np.ndarray]
_INTEROCEPTION = SourceType.INTEROCEPTION.value  # a plain str: read per observation on ingest

# Vector indexes by name: (table holding the vectors, integer label column,
# SQL expression of the text the vector encodes).
VECTOR_TABLES = {
    "texts": ("texts", "id", "text"),
    "gists": ("gists", "id", "text"),
    "entities": ("entities", "id", "name"),
    "episodes": ("episodes", "id", "COALESCE(NULLIF(summary, ''), name)"),
    "experiences": ("experiences", "n",
                    "goal || ' ' || action || ' ' || result || ' ' || reflection"),
}

OBSERVATION_COLUMNS = (
    "o.id, t.text, o.stamp, o.layer, o.source_type, o.x, o.y, o.z, o.frame_id, o.confidence, "
    "o.episode_id, o.gist_id, o.tier, o.value, o.metadata"
)


@dataclass
class NewObservation:
    """An observation accepted by `Memory.add`, waiting in working memory."""

    id: int
    text: str
    stamp: float
    layer: str
    source_type: str
    position: Optional[Position]
    frame_id: Optional[str]
    confidence: float = 1.0
    episode_id: Optional[int] = None
    value: Optional[float] = None
    metadata: codec.Metadata = None
    """A dict (imports), or None when ``metadata_json`` holds it."""
    embedding: Optional[np.ndarray] = None
    tier: Optional[str] = None
    """None for a new observation (short_term); an import keeps the tier it had."""
    tier_since: Optional[float] = None
    gist_id: Optional[int] = None
    """SUMMARIZES link kept by an import (new observations have none)."""
    metadata_json: Optional[str] = None
    """``metadata`` as stored (``codec.dumps``), when the caller encoded it already.

    ``Memory.add`` encodes once, strictly, at add time and keeps only this text,
    so a caller mutating its dict later changes nothing and the flush cannot
    fail on metadata."""

    @property
    def wants_vector(self) -> bool:
        """Body readings are found by layer and time, never by meaning."""
        return self.source_type != _INTEROCEPTION


@dataclass(frozen=True)
class Place:
    """One text seen in one grid cell: how often, when, and where on average."""

    id: int
    text_id: int
    text: str
    layer: str
    count: int
    centroid: Position
    first_stamp: float
    last_stamp: float
    last_obs_id: int


@dataclass
class WriteReport:
    observations: int = 0
    new_texts: int = 0
    embedded: int = 0
    new_places: int = 0
    deferred_vectors: int = 0
    """Texts stored without the vector they need (embedder down); see ``backfill_vectors``."""
    skipped: int = 0
    """Observations of the batch that were already stored (a retried batch)."""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class _TextCache:
    """LRU of text -> (text id, has vector): a repeated string costs a dict lookup."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[str, tuple[int, bool]] = OrderedDict()

    def get(self, text: str) -> Optional[tuple[int, bool]]:
        item = self._items.get(text)
        if item is not None:
            self._items.move_to_end(text)
        return item

    def put(self, text: str, text_id: int, has_vector: bool) -> None:
        self._items[text] = (text_id, has_vector)
        self._items.move_to_end(text)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def discard(self, text: str) -> None:
        self._items.pop(text, None)

    def clear(self) -> None:
        self._items.clear()


def _reembed_target(marker: str) -> tuple[str, int]:
    """(model, dim) a re-embedding was heading for, from its meta marker."""
    try:
        value = json.loads(marker)
        return str(value["model"]), int(value["dim"])
    except (ValueError, KeyError, TypeError):
        return str(marker), -1


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


class MemoryStore:
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
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self.commit_listeners: list[Callable[[Optional[list]], None]] = []
        """Called after each commit, under the writer lock, with its statements (see _after_commit)."""
        self._text_cache = _TextCache(config.embedding_cache_size)
        self.place_cache = PlaceCache(self)
        """Places per text for the spatial tools; told after each commit which cells changed."""
        self._touched_places: list = []
        self._deferred: list[tuple[int, list]] = []  # (seq, statements) logged, not yet in SQLite
        self._stale: set[str] = set()  # derived indexes that missed rows after a commit
        self._save_warned = False
        self._conn = self._connect()
        self.oplog: Optional[OpLog] = None
        try:
            migrate(self._conn)
            if config.log_enabled:
                self.oplog = OpLog(self.log_dir, config.log_segment_bytes)
                self.redone = self._redo_from_log()
            self.needs_reembed = self._check_model()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"cannot open memory {self.path}: {exc}") from exc
        except BaseException:
            self._conn.close()
            raise
        try:
            self._open_derived(config, dim)
        except BaseException:
            self._conn.close()
            if self.oplog is not None:
                self.oplog.close()
            raise

    def _open_derived(self, config: MemoryConfig, dim: int) -> None:
        row = self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM observations").fetchone()
        self._next_obs_id = int(row[0]) + 1
        self._max_stored_obs_id = int(row[0])
        self._id_lock = threading.Lock()
        self.vectors_pending = self._conn.execute(
            "SELECT 1 FROM meta WHERE key='vectors_pending'").fetchone() is not None
        """Some texts were stored without the vector they need; ``backfill_vectors`` embeds them."""
        self.vectors = {
            name: VectorIndex(
                name, dim, m=config.hnsw_m, ef_construction=config.hnsw_ef_construction,
                ef_search=config.hnsw_ef_search,
                initial_capacity=config.hnsw_max_elements if name == "texts" else 1024,
            )
            for name in VECTOR_TABLES
        }
        self.places = SpatialIndex("places")
        self.open_report: dict[str, Any] = {}
        if not self.needs_reembed:
            self._open_indexes()

    # ------------------------------------------------------------------ connections
    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30.0
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA temp_store=MEMORY")
            conn.execute("PRAGMA cache_size=-65536")
            conn.execute("PRAGMA busy_timeout=30000")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open memory {self.path}: {exc}") from exc
        return conn

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (created on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError("the memory is closed")
            conn = self._connect()
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the writer lock; rolls back on any error.

        With the operation log on, the transaction's statements are appended to
        the log before COMMIT, and its sequence number is committed with it.
        """
        with self._write_lock:
            if self._closed:
                raise StoreError("the memory is closed")
            self._conn.execute("BEGIN IMMEDIATE")
            conn = RecordingConnection(self._conn) if self.oplog is not None else self._conn
            deferred = self._deferred
            self._touched_places = []
            try:
                for seq, statements in deferred:  # logged earlier: they come first, in log order
                    apply_record(self._conn, Record(seq, statements))
                yield conn
                if self.oplog is not None and conn.statements:
                    seq, offset = self.oplog.append(conn.statements)
                    try:
                        self._conn.execute(
                            "INSERT OR REPLACE INTO meta(key, value) VALUES('log_seq', ?)", (str(seq),))
                        self._conn.execute("COMMIT")
                    except BaseException:
                        self.oplog.undo_append(seq, offset)
                        raise
                else:
                    if deferred:
                        self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('log_seq', ?)",
                                           (str(deferred[-1][0]),))
                    self._conn.execute("COMMIT")
                if deferred:
                    self._deferred = []
            except BaseException:
                self._touched_places = []
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            if self._touched_places:  # after COMMIT, so a cache never takes an uncommitted state for current
                touched, self._touched_places = self._touched_places, []
                try:
                    self.place_cache.changes.record(touched)
                except Exception:  # committed: a failing cache must not make the caller retry the write
                    log.exception("the place cache could not record a commit; clearing it")
                    try:
                        self.place_cache.clear()
                    except Exception:
                        pass
            self._after_commit(deferred, conn)

    def _after_commit(self, deferred: list, conn: Any) -> None:
        """Tell the commit listeners (the query cache) what was written; never fails the write.

        They get the transaction's mutating statements, or None when they are not
        known (no operation log): "something changed".
        """
        if not self.commit_listeners:
            return
        statements: Optional[list] = None
        if self.oplog is not None:
            statements = [s for item in deferred
                          for s in (item.statements if hasattr(item, "statements") else item[1])]
            statements += getattr(conn, "statements", [])
            if not statements:
                return
        for listener in list(self.commit_listeners):
            try:
                listener(statements)
            except Exception:
                log.exception("a commit listener failed")

    def write_deferred(self, statements: list) -> int:
        """Make a small transaction durable in the log now; SQLite applies it with the next write.

        For writes that must be cheap at the caller (the experience ledger): the
        record is in the log (in the OS, like every commit) when this returns, so
        a crash loses nothing (the open redoes it); SQLite and the derived
        indexes catch up at the next ``write()``, ``apply_deferred()``,
        checkpoint or close. Readers that must see it call ``apply_deferred()``.
        Without a log it is an ordinary write. Returns how many wait to be applied.
        """
        with self._write_lock:
            if self._closed:
                raise StoreError("the memory is closed")
            if self.oplog is None:
                with self.write() as conn:
                    apply_record(conn, Record(0, statements))
                return 0
            seq, _ = self.oplog.append(statements)
            self._deferred.append((seq, statements))
            return len(self._deferred)

    @property
    def deferred_count(self) -> int:
        return len(self._deferred)

    def apply_deferred(self) -> int:
        """Apply logged-but-not-applied transactions to SQLite now; returns how many."""
        if not self._deferred:
            return 0
        with self._write_lock:
            count = len(self._deferred)
            if count and not self._closed:
                with self.write():
                    pass  # write() applies them first, in one transaction
            return count

    def _redo_from_log(self) -> int:
        """Apply log records SQLite had not committed when the process died."""
        assert self.oplog is not None
        row = self._conn.execute("SELECT value FROM meta WHERE key='log_seq'").fetchone()
        db_seq = int(row[0]) if row else 0
        if self.oplog.last_seq < db_seq:
            has_data = self._conn.execute("SELECT 1 FROM texts LIMIT 1").fetchone()
            if has_data:
                log.warning("operation log %s ends at seq %d but the database is at %d; "
                            "a rebuild can only start from a checkpoint", self.log_dir,
                            self.oplog.last_seq, db_seq)
            self.oplog.last_seq = db_seq
            return 0
        redone = 0
        for record in self.oplog.records(after=db_seq):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                apply_record(self._conn, record)
                self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('log_seq', ?)",
                                   (str(record.seq),))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            redone += 1
        if redone:
            log.warning("replayed %d transaction(s) from the operation log after an unclean stop", redone)
        return redone

    @property
    def write_lock(self) -> threading.RLock:
        return self._write_lock

    # ------------------------------------------------------------------ metadata
    def meta(self, key: str) -> Optional[str]:
        row = self.reader().execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self.write() as conn:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, value))

    def _check_model(self) -> bool:
        """Record the model on first open; on a later open, insist it is the same.

        A re-embedding that stopped half-way (``reembed_target`` in meta) left
        vectors of two models: opening with its target model resumes it; any
        other model needs ``rebuild_on_model_change`` (it then re-embeds with
        that one), else the open is refused rather than mixing vector spaces.
        """
        rows = dict(self._conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim', 'reembed_target')"
        ).fetchall())
        if "embedding_model" not in rows:
            with self.write() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                    [("embedding_model", self.model_name), ("embedding_dim", str(self.dim)),
                     ("created_at", repr(time.time()))],
                )
            return False
        stored_model, stored_dim = rows.get("embedding_model"), int(rows.get("embedding_dim", "0"))
        marker = rows.get("reembed_target")
        if marker is not None:
            target = _reembed_target(marker)
            if target == (self.model_name, self.dim):
                log.warning("memory %s: resuming the re-embedding with %s (dim %d) that stopped half-way",
                            self.path, self.model_name, self.dim)
                return True
            if self.config.rebuild_on_model_change:
                log.warning("memory %s: a re-embedding with %s stopped half-way; re-embedding everything with"
                            " %s (dim %d)", self.path, target[0], self.model_name, self.dim)
                return True
            raise EmbeddingMismatchError(
                f"memory {self.path} was being re-embedded with model {target[0]!r} (dim {target[1]}) when it"
                f" stopped, so its vectors mix two models; open it with {target[0]!r} to finish, or set"
                f" rebuild_on_model_change=True to re-embed everything with {self.model_name!r}"
            )
        if stored_model == self.model_name and stored_dim == self.dim:
            return False
        if self.config.rebuild_on_model_change:
            log.warning(
                "memory %s was built with %s (dim %d); re-embedding everything with %s (dim %d)",
                self.path, stored_model, stored_dim, self.model_name, self.dim,
            )
            return True
        raise EmbeddingMismatchError(
            f"memory {self.path} was built with embedding model {stored_model!r} (dim {stored_dim}) "
            f"but this process uses {self.model_name!r} (dim {self.dim}); use the same model, or "
            f"set rebuild_on_model_change=True to re-embed the stored texts"
        )

    def reembed_all(self, embed: EmbedFn, batch: int = 512) -> int:
        """Replace every stored vector with the current model's; then rebuild indexes.

        Crash-safe: a ``reembed_target`` marker is committed before the first
        vector changes, and each chunk commits its progress (``reembed_done``)
        with its vectors, so an interrupted run resumes where it stopped and
        no open in between can take the mixed vectors for one model's.
        """
        target = json.dumps({"model": self.model_name, "dim": self.dim})
        done = 0
        with self._write_lock:
            rows = dict(self._conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('reembed_target', 'reembed_done')").fetchall())
            progress: dict[str, int] = {}
            if rows.get("reembed_target") == target:
                progress = {k: int(v) for k, v in json.loads(rows.get("reembed_done") or "{}").items()}
            else:
                with self.write() as conn:
                    conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                                     [("reembed_target", target), ("reembed_done", "{}")])
            for name, (table, label, column) in VECTOR_TABLES.items():
                rows_ = self._conn.execute(
                    f"SELECT {label}, {column} FROM {table} WHERE embedding IS NOT NULL AND {label} > ?"
                    f" ORDER BY {label}", (progress.get(name, -(2 ** 62)),)
                ).fetchall()
                for start in range(0, len(rows_), batch):
                    chunk = rows_[start : start + batch]
                    vectors = embed([r[1] for r in chunk])
                    progress[name] = int(chunk[-1][0])
                    with self.write() as conn:
                        conn.executemany(
                            f"UPDATE {table} SET embedding=? WHERE {label}=?",
                            [(codec.vector_to_blob(v), r[0]) for v, r in zip(vectors, chunk)],
                        )
                        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('reembed_done', ?)",
                                     (json.dumps(progress),))
                    done += len(chunk)
            with self.write() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                    [("embedding_model", self.model_name), ("embedding_dim", str(self.dim))],
                )
                conn.execute("DELETE FROM meta WHERE key IN ('reembed_target', 'reembed_done')")
            for path in self.index_dir.glob("*") if self.index_dir.exists() else []:
                try:
                    path.unlink()
                except OSError as exc:  # the open below ignores snapshots it cannot trust
                    log.warning("could not remove the old index file %s: %s", path, exc)
            self.needs_reembed = False
            self._open_indexes()
        return done

    # ------------------------------------------------------------------ derived indexes
    def _open_indexes(self) -> None:
        started = time.perf_counter()
        report: dict[str, Any] = {name: self._reconcile_index(name, load=True) for name in VECTOR_TABLES}
        report["places"] = self._reconcile_index("places", load=True)
        report["seconds"] = time.perf_counter() - started
        self.open_report = report

    def _reconcile_index(self, name: str, load: bool = False) -> dict[str, Any]:
        """Make one derived index hold exactly what SQLite holds (after loading its snapshot)."""
        if name == "places":
            expected = self._ids("SELECT id FROM places ORDER BY id")
            top = int(expected[-1]) if len(expected) else 0
            loaded = self.places.load(self.index_dir, top) if load else False
            missing, extra = self.places.reconcile(expected, self._fetch_place_boxes)
            return {"loaded": loaded, "caught_up": missing, "dropped": extra, "size": len(self.places)}
        table, label, _ = VECTOR_TABLES[name]
        index = self.vectors[name]
        expected = self._ids(f"SELECT {label} FROM {table} WHERE embedding IS NOT NULL ORDER BY {label}")
        top = int(expected[-1]) if len(expected) else 0
        loaded = index.load(self.index_dir, top) if load else False
        if load and not loaded and len(expected):
            log.info("%s: no usable snapshot, rebuilding %d vectors from SQLite", name, len(expected))
        missing, extra = index.reconcile(
            expected, lambda ids, t=table, c=label: self._fetch_vectors(t, ids, c))
        return {"loaded": loaded, "caught_up": missing, "dropped": extra, "size": len(index)}

    def _update_index(self, name: str, update: Callable[[], None]) -> None:
        """Apply a committed change to a derived index; on failure mark it stale, never raise.

        The rows are in SQLite already: raising here would make the caller retry
        a write that succeeded. A stale index is reconciled from SQLite at once,
        or at the next write, save or open.
        """
        try:
            update()
        except Exception:
            log.exception("the %s index could not take rows that are already stored; rebuilding it from SQLite",
                          name)
            self._stale.add(name)
        if self._stale:
            with self._write_lock:  # reconcile reads through the writer connection
                self._repair_stale()

    def _repair_stale(self) -> None:
        for name in sorted(self._stale):
            try:
                self._reconcile_index(name)
            except Exception as exc:
                log.warning("the %s index is still behind SQLite (%s); it is caught up at the next write or"
                            " open", name, exc)
            else:
                self._stale.discard(name)
                log.warning("the %s index was caught up from SQLite", name)

    @property
    def stale_indexes(self) -> frozenset[str]:
        return frozenset(self._stale)

    def _ids(self, sql: str) -> np.ndarray:
        rows = self._conn.execute(sql).fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def _fetch_vectors(self, table: str, ids: np.ndarray, label: str = "id") -> np.ndarray:
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        position = {int(i): n for n, i in enumerate(ids.tolist())}
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900].tolist()
            marks = ",".join("?" * len(chunk))
            for row_id, blob in self._conn.execute(
                f"SELECT {label}, embedding FROM {table} WHERE {label} IN ({marks})", chunk
            ):
                out[position[row_id]] = codec.blob_to_vector(blob, self.dim)
        return out

    def _fetch_place_boxes(self, ids: np.ndarray) -> np.ndarray:
        boxes = np.empty((len(ids), 6), dtype=np.float64)
        position = {int(i): n for n, i in enumerate(ids.tolist())}
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900].tolist()
            marks = ",".join("?" * len(chunk))
            for row_id, cx, cy, cz in self._conn.execute(
                f"SELECT id, cx, cy, cz FROM places WHERE id IN ({marks})", chunk
            ):
                boxes[position[row_id]] = self._cell_box(cx, cy, cz)
        return boxes

    def _cell_box(self, cx: int, cy: int, cz: int) -> tuple[float, ...]:
        s = self.cell_size
        return (cx * s, cy * s, cz * s, (cx + 1) * s, (cy + 1) * s, (cz + 1) * s)

    def cell_of(self, position: Position) -> tuple[int, int, int]:
        s = self.cell_size
        return (math.floor(position[0] / s), math.floor(position[1] / s), math.floor(position[2] / s))

    def checkpoint_log(self) -> Optional[int]:
        """Write a consistent base copy of the file and prune log segments behind it.

        Retention (``log_keep_segments`` > 0) may only drop what a base covers,
        so a rebuild still has everything it needs.
        """
        if self.oplog is None:
            return None
        with self._write_lock:
            self.apply_deferred()  # the base must hold everything up to the seq it is named by
            seq = self.oplog.last_seq
            final = self.log_dir / f"base-{seq:012d}.db"
            temp = self.log_dir / f".base-{seq:012d}.db.tmp"
            target = sqlite3.connect(str(temp))
            try:
                self._conn.backup(target)
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

    def save_indexes(self) -> bool:
        """Snapshot every derived index atomically (cheap when nothing changed); never raises.

        A snapshot is a cache of SQLite: one that cannot be written (read-only
        or full ``.idx`` folder) costs a rebuild on the next open, never data,
        so it is a warning (logged once per open), not an error that would stop
        a close. Returns whether every snapshot was written.
        """
        if self._stale:
            with self._write_lock:
                self._repair_stale()
        ok = True
        for name, index in [*self.vectors.items(), ("places", self.places)]:
            try:
                index.save(self.index_dir)
            except Exception as exc:
                ok = False
                if not self._save_warned:
                    self._save_warned = True
                    log.warning("could not save the %s index snapshot in %s (%s: %s); the memory itself is"
                                " safe and the index is rebuilt from it on the next open (warned once)",
                                name, self.index_dir, type(exc).__name__, exc)
                else:
                    log.debug("could not save the %s index snapshot: %s", name, exc)
        return ok

    # ------------------------------------------------------------------ ingest
    def allocate_observation_id(self) -> int:
        with self._id_lock:
            value = self._next_obs_id
            self._next_obs_id += 1
            return value

    def write_observations(self, batch: Sequence[NewObservation], embed: EmbedFn, *,
                           defer_vectors: bool = False) -> WriteReport:
        """Store a batch: intern texts, embed only unseen ones, one transaction.

        Raises (and writes nothing) when embedding or SQLite fails, so the caller
        can keep the batch and retry. Once committed it never raises: derived
        indexes that fail are repaired from SQLite (``_update_index``), and
        observations already stored (a retried batch) are skipped.

        ``defer_vectors``: when ``embed`` fails, store the texts without the
        vectors they need (the last resort of a close while the embedder is
        down); ``backfill_vectors`` embeds them later.
        """
        started = time.perf_counter()
        if not batch:
            return WriteReport()
        with self._write_lock:
            fresh = self._not_yet_stored(batch)
            report = WriteReport(observations=len(fresh), skipped=len(batch) - len(fresh))
            batch = fresh
            if not batch:
                return report
            known = self._lookup_texts({o.text for o in batch})
            vectors = self._vectors_for(batch, known, embed, report if defer_vectors else None)
            now = time.time()
            max_place = self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM places").fetchone()[0]
            with self.write() as conn:
                text_ids, new_vector_ids = self._store_texts(conn, batch, known, vectors, report)
                conn.executemany(
                    "INSERT INTO observations(id, text_id, stamp, layer, source_type, x, y, z, frame_id,"
                    " confidence, episode_id, tier, tier_since, value, metadata)"
                    " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            o.id, text_ids[o.text], o.stamp, o.layer, o.source_type,
                            *(o.position if o.position is not None else (None, None, None)),
                            o.frame_id, o.confidence, o.episode_id, o.tier or Tier.SHORT_TERM.value,
                            now if o.tier_since is None else o.tier_since, o.value,
                            o.metadata_json if o.metadata_json is not None else codec.dumps(o.metadata),
                        )
                        for o in batch
                    ],
                )
                linked = [(o.gist_id, o.id) for o in batch if o.gist_id is not None]
                if linked:  # only imports carry SUMMARIZES links
                    conn.executemany("UPDATE observations SET gist_id=? WHERE id=?", linked)
                refs: dict[int, int] = {}
                for o in batch:
                    refs[text_ids[o.text]] = refs.get(text_ids[o.text], 0) + 1
                conn.executemany("UPDATE texts SET refs = refs + ? WHERE id = ?",
                                 [(n, tid) for tid, n in refs.items()])
                self._upsert_places(conn, batch, text_ids)
                new_places = conn.execute(
                    "SELECT id, cx, cy, cz FROM places WHERE id > ?", (max_place,)
                ).fetchall()
                if report.deferred_vectors:
                    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('vectors_pending', '1')")
            # Committed. From here nothing may raise: the caller would retry a
            # write that succeeded. Derived indexes that fail are repaired from
            # SQLite (a crash here is repaired by reconcile on the next open).
            self._max_stored_obs_id = max(self._max_stored_obs_id, max(o.id for o in batch))
            if report.deferred_vectors:
                self.vectors_pending = True
            for text, (text_id, has_vector) in known.items():
                self._text_cache.put(text, text_id, has_vector)
            if new_vector_ids:
                ids = np.array([tid for tid, _ in new_vector_ids], dtype=np.int64)
                self._update_index("texts", lambda: self.vectors["texts"].add(
                    ids, np.stack([v for _, v in new_vector_ids]), parallel=True))
            if new_places:
                self._update_index("places", lambda: self.places.insert(
                    np.array([p[0] for p in new_places], dtype=np.int64),
                    np.array([self._cell_box(*p[1:]) for p in new_places], dtype=np.float64)))
            elif self._stale:
                self._repair_stale()
            report.new_places = len(new_places)
        report.seconds = time.perf_counter() - started
        return report

    def _not_yet_stored(self, batch: Sequence[NewObservation]) -> list[NewObservation]:
        """The batch minus observations already in SQLite (a batch retried after its commit).

        Ids only grow, so a fresh batch is recognised without a query.
        """
        if min(o.id for o in batch) > self._max_stored_obs_id:
            return list(batch)
        low = [o.id for o in batch if o.id <= self._max_stored_obs_id]
        stored: set[int] = set()
        for start in range(0, len(low), 900):
            chunk = low[start : start + 900]
            marks = ",".join("?" * len(chunk))
            stored.update(r[0] for r in self._conn.execute(
                f"SELECT id FROM observations WHERE id IN ({marks})", chunk))
        if stored:
            log.warning("skipping %d observation(s) that are already stored (a retried batch)", len(stored))
        return [o for o in batch if o.id not in stored]

    def backfill_vectors(self, embed: EmbedFn, batch: int = 512) -> int:
        """Embed texts stored without the vector they need (stored while the embedder was down).

        Runs only while ``vectors_pending`` is set; clears it when every such
        text has its vector. Raises what ``embed`` raises (the flag stays).
        """
        if not self.vectors_pending:
            return 0
        done = 0
        with self._write_lock:
            rows = self._conn.execute(
                "SELECT t.id, t.text FROM texts t WHERE t.embedding IS NULL AND EXISTS"
                " (SELECT 1 FROM observations o WHERE o.text_id = t.id AND o.source_type != ?) ORDER BY t.id",
                (_INTEROCEPTION,),
            ).fetchall()
            for start in range(0, len(rows), batch):
                chunk = rows[start : start + batch]
                vectors = np.asarray(embed([r[1] for r in chunk]), dtype=np.float32)
                with self.write() as conn:
                    conn.executemany("UPDATE texts SET embedding=? WHERE id=? AND embedding IS NULL",
                                     [(codec.vector_to_blob(v), r[0]) for v, r in zip(vectors, chunk)])
                ids = np.array([r[0] for r in chunk], dtype=np.int64)
                self._update_index("texts", lambda: self.vectors["texts"].add(ids, vectors))
                for text_id, text in chunk:
                    self._text_cache.put(text, text_id, True)
                done += len(chunk)
            with self.write() as conn:
                conn.execute("DELETE FROM meta WHERE key='vectors_pending'")
            self.vectors_pending = False
        if done:
            log.warning("embedded %d text(s) that were stored without a vector while the embedder was down", done)
        return done

    def _lookup_texts(self, texts: set[str]) -> dict[str, tuple[int, bool]]:
        known: dict[str, tuple[int, bool]] = {}
        misses = []
        for text in texts:
            hit = self._text_cache.get(text)
            if hit is None:
                misses.append(text)
            else:
                known[text] = hit
        for start in range(0, len(misses), 900):
            chunk = misses[start : start + 900]
            marks = ",".join("?" * len(chunk))
            for text_id, text, has_vector in self._conn.execute(
                f"SELECT id, text, embedding IS NOT NULL FROM texts WHERE text IN ({marks})", chunk
            ):
                known[text] = (text_id, bool(has_vector))
        return known

    def _vectors_for(
        self, batch: Sequence[NewObservation], known: dict[str, tuple[int, bool]], embed: EmbedFn,
        defer_into: Optional[WriteReport] = None,
    ) -> dict[str, np.ndarray]:
        """Vectors for texts that need one and lack one; given embeddings first.

        With ``defer_into``, a failing ``embed`` is logged and counted there
        instead of raised: those texts are stored without a vector for now.
        """
        vectors: dict[str, np.ndarray] = {}
        wanted: list[str] = []
        for o in batch:
            if not o.wants_vector or o.text in vectors:
                continue
            hit = known.get(o.text)
            if hit is not None and hit[1]:
                continue
            if o.embedding is not None:
                vectors[o.text] = o.embedding
            elif o.text not in wanted:
                wanted.append(o.text)
        wanted = [t for t in wanted if t not in vectors]
        if wanted:
            try:
                embedded = embed(wanted)
            except Exception as exc:
                if defer_into is None:
                    raise
                log.warning("embedding failed (%s); storing %d text(s) without a vector, to be embedded later",
                            exc, len(wanted))
                defer_into.deferred_vectors = len(wanted)
                return vectors
            for text, vector in zip(wanted, embedded):
                vectors[text] = vector
        return vectors

    def _store_texts(self, conn, batch, known, vectors, report):
        text_ids: dict[str, int] = {t: v[0] for t, v in known.items()}
        new_vector_ids: list[tuple[int, np.ndarray]] = []
        for o in batch:
            if o.text in text_ids:
                continue
            vector = vectors.get(o.text)
            blob = codec.vector_to_blob(vector) if vector is not None else None
            cursor = conn.execute("INSERT INTO texts(text, embedding) VALUES(?, ?)", (o.text, blob))
            text_id = int(cursor.lastrowid)
            conn.execute("INSERT INTO texts_fts(rowid, text) VALUES(?, ?)", (text_id, o.text))
            text_ids[o.text] = text_id
            known[o.text] = (text_id, vector is not None)
            report.new_texts += 1
            if vector is not None:
                new_vector_ids.append((text_id, vector))
        for text, vector in vectors.items():
            text_id, has_vector = known[text]
            if not has_vector:  # known text, first seen by a layer that wants meaning
                conn.execute("UPDATE texts SET embedding=? WHERE id=?", (codec.vector_to_blob(vector), text_id))
                known[text] = (text_id, True)
                new_vector_ids.append((text_id, vector))
        report.embedded = len(vectors)
        return text_ids, new_vector_ids

    def _upsert_places(self, conn, batch, text_ids) -> None:
        groups: dict[tuple, list] = {}
        for o in batch:
            if o.position is None or not o.wants_vector:
                continue
            key = (text_ids[o.text], o.layer, *self.cell_of(o.position))
            g = groups.get(key)
            if g is None:
                groups[key] = [1, o.position[0], o.position[1], o.position[2], o.stamp, o.stamp, o.id]
            else:
                g[0] += 1
                g[1] += o.position[0]
                g[2] += o.position[1]
                g[3] += o.position[2]
                g[4] = min(g[4], o.stamp)
                if o.stamp >= g[5]:
                    g[5], g[6] = o.stamp, o.id
        conn.executemany(
            "INSERT INTO places(text_id, layer, cx, cy, cz, count, sx, sy, sz, first_stamp, last_stamp,"
            " last_obs_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT(text_id, layer, cx, cy, cz) DO UPDATE SET"
            " count = count + excluded.count, sx = sx + excluded.sx, sy = sy + excluded.sy,"
            " sz = sz + excluded.sz, first_stamp = MIN(first_stamp, excluded.first_stamp),"
            " last_obs_id = CASE WHEN excluded.last_stamp >= last_stamp"
            "   THEN excluded.last_obs_id ELSE last_obs_id END,"
            " last_stamp = MAX(last_stamp, excluded.last_stamp)",
            [(*key, *g) for key, g in groups.items()],
        )
        self._touched_places.extend(groups)

    # ------------------------------------------------------------------ reading observations
    def observation_from_row(self, row: Sequence[Any]) -> Observation:
        (oid, text, stamp, layer, source_type, x, y, z, frame_id, confidence,
         episode_id, gist_id, tier, value, metadata) = row
        return Observation(
            id=make_id(NodeKind.OBSERVATION, oid),
            text=text if text is not None else "",
            stamp=stamp, layer=layer, source_type=source_type,
            position=(x, y, z) if x is not None else None,
            frame_id=frame_id or self.config.frame_id, confidence=confidence,
            episode_id=make_id(NodeKind.EPISODE, episode_id) if episode_id is not None else None,
            gist_id=make_id(NodeKind.GIST, gist_id) if gist_id is not None else None,
            tier=tier, value=value, metadata=codec.loads(metadata),
        )

    def get_observations(self, ids: Sequence[int]) -> list[Observation]:
        """Observations by row id, in the order asked (missing ids are skipped)."""
        found: dict[int, Observation] = {}
        ids = [int(i) for i in ids]
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            for row in self.reader().execute(
                f"SELECT {OBSERVATION_COLUMNS} FROM observations o LEFT JOIN texts t ON t.id = o.text_id"
                f" WHERE o.id IN ({marks})", chunk,
            ):
                found[row[0]] = self.observation_from_row(row)
        return [found[i] for i in ids if i in found]

    def get_observation(self, node_id: str) -> Observation:
        kind, number = parse_id(node_id)
        if kind is not NodeKind.OBSERVATION:
            raise UnknownNodeError(f"{node_id} is not an observation id")
        found = self.get_observations([number])
        if not found:
            raise UnknownNodeError(f"no observation {node_id} in this memory")
        return found[0]

    def query_observations(self, where: str = "1", params: Sequence[Any] = (), order: str = "o.stamp DESC",
                           limit: Optional[int] = None) -> list[Observation]:
        """Observations matching a SQL condition over ``o`` (observations) and ``t`` (texts)."""
        sql = (f"SELECT {OBSERVATION_COLUMNS} FROM observations o LEFT JOIN texts t ON t.id = o.text_id"
               f" WHERE {where} ORDER BY {order}")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [self.observation_from_row(r) for r in self.reader().execute(sql, tuple(params))]

    def text_vectors(self, text_ids: Sequence[int]) -> np.ndarray:
        """Stored vectors of texts (zero rows for texts without one)."""
        out = np.zeros((len(text_ids), self.dim), dtype=np.float32)
        position = {int(t): n for n, t in enumerate(text_ids)}
        ids = list(position)
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            for text_id, blob in self.reader().execute(
                f"SELECT id, embedding FROM texts WHERE id IN ({marks}) AND embedding IS NOT NULL", chunk
            ):
                out[position[text_id]] = codec.blob_to_vector(blob, self.dim)
        return out

    def place_ids_nearest(self, center: Position, k: int, three_d: bool = False) -> np.ndarray:
        """Ids of the k places whose cells are nearest to ``center`` (ties add a few; not sorted).

        Horizontal distance unless ``three_d``. Read helper for the retrieval
        tools: a dense area may hold thousands of places, the nearest few
        are what a "what is here" answer needs.
        """
        cx, cy, cz = center
        query = (cx, cy, cz, cx, cy, cz) if three_d else (cx, cy, -1e9, cx, cy, 1e9)
        with self.places._lock:
            if not len(self.places):
                return np.empty(0, np.int64)
            return np.fromiter(self.places._tree.nearest(query, int(k)), dtype=np.int64)

    def count_places_in(self, box: tuple[float, float, float, float, float, float]) -> int:
        """How many place cells intersect a box, without listing them."""
        with self.places._lock:
            return int(self.places._tree.count(box)) if len(self.places) else 0

    def places_within(self, center: Position, radius: float, layer: Optional[str] = None) -> list[Place]:
        """Places whose centroid lies within ``radius`` (3-D) of ``center``."""
        cx, cy, cz = center
        box = (cx - radius, cy - radius, cz - radius - self.cell_size,
               cx + radius, cy + radius, cz + radius + self.cell_size)
        ids = self.places.intersection(box)
        if len(ids) == 0:
            return []
        places = self.get_places(ids.tolist(), layer=layer)
        r2 = radius * radius
        return [p for p in places
                if (p.centroid[0] - cx) ** 2 + (p.centroid[1] - cy) ** 2 <= r2]

    def get_places(self, ids: Sequence[int], layer: Optional[str] = None) -> list[Place]:
        out: list[Place] = []
        ids = list(ids)
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            sql = (
                "SELECT p.id, p.text_id, t.text, p.layer, p.count, p.sx, p.sy, p.sz, p.first_stamp,"
                " p.last_stamp, p.last_obs_id FROM places p JOIN texts t ON t.id = p.text_id"
                f" WHERE p.id IN ({marks})"
            )
            params: list[Any] = list(chunk)
            if layer:
                sql += " AND p.layer = ?"
                params.append(layer)
            for pid, tid, text, lay, count, sx, sy, sz, first, last, last_obs in self.reader().execute(sql, params):
                out.append(Place(pid, tid, text, lay, count, (sx / count, sy / count, sz / count),
                                 first, last, last_obs))
        return out

    def places_of_texts(self, text_ids: Sequence[int]) -> list[Place]:
        ids = [int(t) for t in text_ids]
        out: list[int] = []
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            out.extend(r[0] for r in self.reader().execute(
                f"SELECT id FROM places WHERE text_id IN ({marks})", chunk))
        return self.get_places(out)

    # ------------------------------------------------------------------ episodes
    def create_episode(self, name: str, start: float, parent_id: Optional[int] = None,
                       goal: Optional[str] = None, metadata: Optional[dict] = None) -> int:
        with self.write() as conn:
            if parent_id is not None and not conn.execute(
                    "SELECT 1 FROM episodes WHERE id=?", (parent_id,)).fetchone():
                raise UnknownNodeError(f"no episode {make_id(NodeKind.EPISODE, parent_id)} to nest under")
            previous = conn.execute(
                "SELECT id FROM episodes WHERE parent_id IS ? ORDER BY start DESC, id DESC LIMIT 1",
                (parent_id,),
            ).fetchone()
            cursor = conn.execute(
                "INSERT INTO episodes(name, start, status, parent_id, previous_id, goal, metadata)"
                " VALUES(?,?,?,?,?,?,?)",
                (name, start, EpisodeStatus.ACTIVE.value, parent_id,
                 previous[0] if previous else None, goal, codec.dumps(metadata)),
            )
            return int(cursor.lastrowid)

    def finish_episode(self, episode_id: int, end: float, *, status: str = EpisodeStatus.COMPLETED.value,
                       result: Optional[str] = None, reflection: Optional[str] = None,
                       success: Optional[bool] = None, action: Optional[str] = None) -> None:
        with self.write() as conn:
            cursor = conn.execute(
                "UPDATE episodes SET end=?, status=?, result=COALESCE(?, result),"
                " reflection=COALESCE(?, reflection), success=COALESCE(?, success),"
                " action=COALESCE(?, action) WHERE id=?",
                (end, status, result, reflection, None if success is None else int(bool(success)),
                 action, episode_id),
            )
            if cursor.rowcount == 0:
                raise UnknownNodeError(f"no episode {make_id(NodeKind.EPISODE, episode_id)}")

    def set_episode_summary(self, episode_id: int, summary: str, embedding: Optional[np.ndarray]) -> None:
        with self.write() as conn:
            conn.execute("UPDATE episodes SET summary=?, embedding=?, consolidated=1 WHERE id=?",
                         (summary, codec.vector_to_blob(embedding) if embedding is not None else None,
                          episode_id))
        if embedding is not None:
            self._update_index("episodes", lambda: self.vectors["episodes"].add(
                np.array([episode_id]), np.asarray(embedding).reshape(1, -1)))

    EPISODE_COLUMNS = ("id, name, start, end, status, parent_id, previous_id, summary, goal, action,"
                       " result, reflection, success, metadata")

    def episode_from_row(self, row: Sequence[Any]) -> Episode:
        (eid, name, start, end, status, parent, previous, summary, goal, action,
         result, reflection, success, metadata) = row
        ep = lambda n: make_id(NodeKind.EPISODE, n) if n is not None else None  # noqa: E731
        return Episode(
            id=ep(eid), name=name, start=start, end=end, status=status, parent_id=ep(parent),
            previous_id=ep(previous), summary=summary or "", goal=goal, action=action, result=result,
            reflection=reflection, success=None if success is None else bool(success),
            metadata=codec.loads(metadata),
        )

    def get_episode(self, episode_id: int) -> Episode:
        row = self.reader().execute(
            f"SELECT {self.EPISODE_COLUMNS} FROM episodes WHERE id=?", (episode_id,)).fetchone()
        if row is None:
            raise UnknownNodeError(f"no episode {make_id(NodeKind.EPISODE, episode_id)} in this memory")
        return self.episode_from_row(row)

    def list_episodes(self, name: Optional[str] = None, last_n: int = 10) -> list[Episode]:
        sql = f"SELECT {self.EPISODE_COLUMNS} FROM episodes"
        params: list[Any] = []
        if name:
            sql += " WHERE name = ? OR name LIKE ?"
            params += [name, f"%{name}%"]
        sql += " ORDER BY start DESC, id DESC LIMIT ?"
        params.append(int(last_n))
        return [self.episode_from_row(r) for r in self.reader().execute(sql, params)]

    # ------------------------------------------------------------------ gists
    GIST_COLUMNS = ("id, text, cx, cy, cz, radius, time_start, time_end, source_count, layers, episode_id,"
                    " created_at, metadata")

    def gist_from_row(self, row: Sequence[Any]) -> Gist:
        import json

        (gid, text, cx, cy, cz, radius, t0, t1, count, layers, episode_id, created, metadata) = row
        return Gist(
            id=make_id(NodeKind.GIST, gid), text=text,
            centroid=(cx, cy, cz) if cx is not None else None, radius=radius,
            time_start=t0, time_end=t1, source_count=count, layers=tuple(json.loads(layers or "[]")),
            episode_id=make_id(NodeKind.EPISODE, episode_id) if episode_id is not None else None,
            created_at=created, metadata=codec.loads(metadata),
        )

    def add_gist(self, conn: sqlite3.Connection, *, text: str, centroid: Optional[Position], radius: float,
                 time_start: float, time_end: float, observation_ids: Sequence[int], layers: Sequence[str],
                 embedding: Optional[np.ndarray], episode_id: Optional[int] = None,
                 metadata: Optional[dict] = None, now: Optional[float] = None) -> int:
        """Insert a gist inside the caller's write transaction and promote its sources.

        Call ``index_gist`` after the transaction commits.
        """
        import json

        now = time.time() if now is None else now
        cx, cy, cz = centroid if centroid is not None else (None, None, None)
        cursor = conn.execute(
            "INSERT INTO gists(text, cx, cy, cz, radius, time_start, time_end, source_count, layers,"
            " episode_id, created_at, metadata, embedding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (text, cx, cy, cz, radius, time_start, time_end, len(observation_ids),
             json.dumps(sorted(set(layers))), episode_id, now, codec.dumps(metadata),
             codec.vector_to_blob(embedding) if embedding is not None else None),
        )
        gist_id = int(cursor.lastrowid)
        conn.execute("INSERT INTO gists_fts(rowid, text) VALUES(?, ?)", (gist_id, text))
        ids = [int(i) for i in observation_ids]
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            conn.execute(
                f"UPDATE observations SET gist_id=?, tier=?, tier_since=? WHERE id IN ({marks})"
                " AND tier != 'archived'",
                [gist_id, Tier.LONG_TERM.value, now, *chunk],
            )
        return gist_id

    def index_gist(self, gist_id: int, embedding: Optional[np.ndarray]) -> None:
        if embedding is not None:
            self._update_index("gists", lambda: self.vectors["gists"].add(
                np.array([gist_id]), np.asarray(embedding).reshape(1, -1)))

    def get_gists(self, ids: Sequence[int]) -> list[Gist]:
        ids = [int(i) for i in ids]
        if not ids:
            return []
        found = {}
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            for row in self.reader().execute(
                    f"SELECT {self.GIST_COLUMNS} FROM gists WHERE id IN ({marks})", chunk):
                found[row[0]] = self.gist_from_row(row)
        return [found[i] for i in ids if i in found]

    # ------------------------------------------------------------------ entities and edges
    ENTITY_COLUMNS = ("id, name, entity_type, x, y, z, spread, first_seen, last_seen, sightings, confidence,"
                      " layer, metadata")

    def entity_from_row(self, row: Sequence[Any]) -> Entity:
        (eid, name, etype, x, y, z, spread, first, last, sightings, confidence, layer, metadata) = row
        return Entity(
            id=make_id(NodeKind.ENTITY, eid), name=name, entity_type=etype,
            position=(x, y, z) if x is not None else None, spread=spread, first_seen=first,
            last_seen=last, sightings=sightings, confidence=confidence, layer=layer,
            metadata=codec.loads(metadata),
        )

    def get_entities(self, ids: Sequence[int]) -> list[Entity]:
        ids = [int(i) for i in ids]
        found = {}
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            for row in self.reader().execute(
                    f"SELECT {self.ENTITY_COLUMNS} FROM entities WHERE id IN ({marks})", chunk):
                found[row[0]] = self.entity_from_row(row)
        return [found[i] for i in ids if i in found]

    @staticmethod
    def bump_edge(conn: sqlite3.Connection, kind: str, src: str, dst: str, weight: float = 1.0,
                  now: Optional[float] = None) -> None:
        """Add an edge or add to its weight: edges are never duplicated."""
        conn.execute(
            "INSERT INTO edges(kind, src, dst, weight, updated) VALUES(?,?,?,?,?)"
            " ON CONFLICT(kind, src, dst) DO UPDATE SET weight = weight + excluded.weight,"
            " updated = excluded.updated",
            (kind, src, dst, weight, time.time() if now is None else now),
        )

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
        with self._write_lock:
            if self._closed:
                return
            try:
                try:
                    self.apply_deferred()
                except Exception:  # still in the log: the next open redoes it
                    log.exception("could not apply %d logged transaction(s) at close", len(self._deferred))
                if not self.needs_reembed:
                    self.save_indexes()
            finally:
                self._closed = True
                try:
                    self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass
                try:
                    self._conn.close()
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
        return self._closed
