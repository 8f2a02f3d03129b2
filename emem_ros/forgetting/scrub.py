"""After the rows are deleted: make every file under the memory forget the bytes too.

- FTS5: a delete only adds a tombstone; the term stays in its segment until
  segments merge. ``merge`` with a negative page budget merges all segments
  a slice at a time, each slice its own short transaction, until FTS5 says
  there is nothing left to merge (total_changes moves by less than 2).
- SQLite: ``secure_delete`` is on for every connection (``store._connect``),
  so deleted rows and freed pages are zeroed. A file that had deletes
  before it was on (migrated from an older version) is VACUUMed once, at
  open (``schema.vacuum_once``), before the memory serves anyone; the
  step here only covers a file whose mark went missing.
  The WAL still holds page images from before: it is checkpointed and
  truncated to zero bytes.
- Vector indexes: hnswlib's ``mark_deleted`` keeps the vector in the graph
  and in its snapshot; the index is rebuilt from SQLite beside the live one
  (no lock held), swapped in under the writer lock, caught up, and saved
  (older snapshots are deleted).
- Operation log: a checkpoint copy (``base-<seq>.db``) is taken from a read
  snapshot of the cleaned file, and a new segment holding only the records
  after it is written beside the log (``OpLog.prepare_restart``), both with
  no lock held. Under the writer lock only the records written since are
  appended and the files renamed (old segments and bases are renamed aside);
  they are deleted after it (deleting a 300 MB file takes a while). ``emem
  rebuild`` starts from that base, so it cannot bring anything back.
- Cold store and dead letters: rewritten without the records (temp + rename).
- ``<db>.before-rebuild*`` (the file a past rebuild replaced) is deleted.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import numpy as np

from emem_ros.consolidation.coldstore import ColdStore, _read_members
from emem_ros.core.types import parse_id
from emem_ros.indexes.snapshots import fsync_dir
from emem_ros.indexes.vector_index import VectorIndex
from emem_ros.storage import codec
from emem_ros.storage.derived_indexes import VECTOR_TABLES
from emem_ros.storage.events import Commit
from emem_ros.storage.gist_graph import graph_gist_ids
from emem_ros.storage.oplog import HIDDEN, discard
from emem_ros.storage.rebuild import BASE_NAME

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.storage.store import MemoryStore

log = logging.getLogger(__name__)

FTS_TABLES = ("texts_fts", "gists_fts", "experiences_fts")
MERGE_PAGES = 64
CHUNK = 4096


class LockTimer:
    """The longest time the writer lock was held by a forget step (the bench reports it)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_step = ""

    def held(self, step: str, seconds: float) -> None:
        if seconds > self.longest:
            self.longest, self.longest_step = seconds, step


def _locked(store: "MemoryStore", timer: LockTimer, step: str, fn: Callable[[sqlite3.Connection], Any]) -> Any:
    with store.write_lock:
        started = time.perf_counter()
        try:
            return fn(store.state.conn)
        finally:
            timer.held(step, time.perf_counter() - started)


def purge_fts(store: "MemoryStore", timer: LockTimer) -> int:
    """Merge FTS5 segments until no tombstone nor deleted term is left; returns the slices run."""
    slices = 0
    for table in FTS_TABLES:
        while True:
            def step(conn: sqlite3.Connection, table: str = table) -> int:
                before = conn.total_changes
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', ?)", (-MERGE_PAGES,))
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                return int(conn.total_changes - before)
            slices += 1
            if _locked(store, timer, f"fts merge {table}", step) < 2:
                break
    return slices


def compact_vectors(store: "MemoryStore", names: set[str], timer: LockTimer) -> None:
    """Rebuild each named vector index from SQLite beside the live one, then swap it in.

    The copy is built with no lock held (questions use the live index
    meanwhile). Under the writer lock it then catches up with what was
    written during the build: for ``texts`` (the big one) only the rows
    added after it started and the texts commits said were removed; for
    the small indexes a full reconcile.
    """
    for name in sorted(names):
        table, label, _ = VECTOR_TABLES[name]
        removed: list[int] = []

        def collect(commit: Commit, removed: list[int] = removed) -> None:
            removed.extend(text_id for text_id, _ in commit.removed_texts)

        store.commits.subscribe(collect)
        try:
            conn = store.reader()
            ids = graph_gist_ids(conn, store.gist_cutoff).tolist() if name == "gists" else [r[0] for r in conn.execute(
                f"SELECT {label} FROM {table} WHERE embedding IS NOT NULL ORDER BY {label}")]
            fresh = store.new_vector_index(name)
            fresh.rebuild(_vector_chunks(store, conn, table, label, ids), len(ids))
            top = ids[-1] if ids else 0

            def swap(wconn: sqlite3.Connection, name: str = name, fresh: VectorIndex = fresh, top: int = top,
                     table: str = table, label: str = label, removed: list[int] = removed) -> None:
                if name == "texts" and not store.vectors_pending:
                    later = [r[0] for r in wconn.execute(
                        f"SELECT {label} FROM {table} WHERE {label} > ? AND embedding IS NOT NULL", (top,))]
                    for labels, vectors in _vector_chunks(store, wconn, table, label, later):
                        fresh.add(labels, vectors)
                    fresh.remove(removed)
                    store.vectors[name].adopt(fresh)
                else:
                    store.vectors[name].adopt(fresh)
                    store._reconcile_index(name)
            _locked(store, timer, f"vector swap {name}", swap)
        finally:
            store.commits.unsubscribe(collect)
    store.save_indexes()


def _vector_chunks(store: "MemoryStore", conn: sqlite3.Connection, table: str, label: str,
                   ids: list[int]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for start in range(0, len(ids), CHUNK):
        part = ids[start:start + CHUNK]
        rows = conn.execute(f"SELECT {label}, embedding FROM {table} WHERE {label} IN"
                            f" ({','.join('?' * len(part))}) AND embedding IS NOT NULL", part).fetchall()
        if rows:
            yield (np.array([r[0] for r in rows], dtype=np.int64),
                   np.stack([codec.blob_to_vector(r[1], store.dim) for r in rows]))


def sqlite_vacuum_if_needed(store: "MemoryStore", timer: LockTimer, force: bool = False) -> bool:
    """VACUUM a file that had deletes before secure_delete was on (once); True if it ran."""
    state = store.meta("secure_delete")
    if state in ("from_creation", "vacuumed") and not force:
        return False

    def vacuum(conn: sqlite3.Connection) -> None:
        conn.execute("VACUUM")
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('secure_delete', 'vacuumed')")
    _locked(store, timer, "vacuum", vacuum)
    return True


WAL_WAIT_MS = 20
"""How long a TRUNCATE checkpoint under the writer lock waits for readers before it lets go and tries again."""


def _passive(store: "MemoryStore", rounds: int = 20) -> None:
    """Copy the WAL back into the file without the writer lock, until it catches up (or stops gaining)."""
    done = -1
    for _ in range(rounds):
        try:
            _, frames, copied = store.reader().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            return
        if frames <= 0 or copied >= frames or copied <= done:
            return
        done = copied
        time.sleep(0.01)  # a reader on an older snapshot holds the rest back; it ends within a query


def _truncate(conn: sqlite3.Connection, wait_ms: int) -> int:
    conn.execute(f"PRAGMA busy_timeout={int(wait_ms)}")
    try:
        return int(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0])
    finally:
        conn.execute("PRAGMA busy_timeout=30000")


def truncate_wal(store: "MemoryStore", timer: LockTimer, tries: int = 200) -> bool:
    """Checkpoint the WAL into the file and cut it to zero bytes; True when it got there.

    The copying is done by PASSIVE checkpoints without the writer lock; the
    TRUNCATE under it waits at most ``WAL_WAIT_MS`` for readers, then lets
    ingest and questions in and tries again (the last try waits as long as
    it takes: the forgotten bytes must leave the WAL).
    """
    _passive(store)
    for attempt in range(tries):
        wait = WAL_WAIT_MS if attempt < tries - 1 else 30000
        busy = _locked(store, timer, "wal checkpoint", functools.partial(_truncate, wait_ms=wait))
        if not busy:
            return True
        _passive(store, rounds=2)
    log.warning("the WAL of %s could not be truncated (a reader kept an old snapshot)", store.path)
    return False


def compact_log(store: "MemoryStore", timer: LockTimer) -> Optional[int]:
    """A base copy of the cleaned file, and a log holding only what came after it; returns the base seq."""
    oplog = store.oplog
    if oplog is None:
        return None
    store.apply_deferred()
    log_dir = store.log_dir
    source = sqlite3.connect(str(store.path), isolation_level=None, timeout=30.0)
    temp = log_dir / ".base-forget.db.tmp"
    try:
        source.execute("BEGIN")  # a read snapshot: the copy is exactly the file at log_seq
        row = source.execute("SELECT value FROM meta WHERE key='log_seq'").fetchone()
        seq = int(row[0]) if row else 0
        temp.unlink(missing_ok=True)
        target = sqlite3.connect(str(temp))
        try:
            source.backup(target)
        finally:
            target.close()
        source.execute("COMMIT")
    finally:
        source.close()
    final = log_dir / f"base-{seq:012d}.db"
    prepared = oplog.prepare_restart(seq)  # the tail so far, copied with no lock held
    hidden: list[Path] = []

    def swap(_conn: sqlite3.Connection) -> None:
        """Under the lock only renames and the few records written since the copy (deletes come after)."""
        os.replace(temp, final)
        _records, old = oplog.finish_restart(prepared)
        hidden.extend(old)
        for entry in log_dir.iterdir():
            if BASE_NAME.match(entry.name) and entry != final:
                gone = entry.with_name(f".{entry.name}{HIDDEN}")
                os.replace(entry, gone)
                hidden.append(gone)
        fsync_dir(log_dir)
    _locked(store, timer, "log swap", swap)
    discard(hidden + [e for e in log_dir.iterdir() if e.name.endswith(HIDDEN)])  # and any a crash left
    return seq


def rewrite_cold(cold: ColdStore, numbers: set[int]) -> int:
    """Rewrite cold segments without the records of ``numbers``; returns how many records went."""
    removed = 0
    wanted = {f"obs-{n}" for n in numbers}
    with cold._lock:
        for path in cold.segments():
            records = list(_read_members(path))
            kept = [r for r in records if str(r.get("id")) not in wanted]
            if len(kept) == len(records):
                continue
            removed += len(records) - len(kept)
            lines = [json.dumps(r, separators=(",", ":"), ensure_ascii=False, default=str) for r in kept]
            data = gzip.compress(("\n".join(lines) + "\n").encode("utf-8") if lines else b"", compresslevel=6,
                                 mtime=0)
            _replace_bytes(path, data)
    return removed


def rewrite_dead_letters(path: Path, keep: Callable[[dict[str, Any]], bool]) -> int:
    """Rewrite the dead-letter file without the lines ``keep`` refuses; returns how many went."""
    if not path.exists():
        return 0
    lines = path.read_text(encoding="utf-8").splitlines()
    kept, removed = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            kept.append(line)
            continue
        if keep(record):
            kept.append(line)
        else:
            removed += 1
    if removed:
        _replace_bytes(path, ("".join(k + "\n" for k in kept)).encode("utf-8"))
    return removed


def dead_letter_number(record: dict[str, Any]) -> Optional[int]:
    try:
        return parse_id(str(record.get("id")))[1]
    except ValueError:
        return None


def remove_stale_copies(db_path: Path) -> list[str]:
    """Files a past rebuild left (the file it replaced, a failed attempt): they still hold old content."""
    removed = []
    for suffix in (".before-rebuild", ".rebuild"):
        for side in ("", "-wal", "-shm"):
            path = db_path.with_name(db_path.name + suffix + side)
            if path.exists():
                path.unlink()
                removed.append(path.name)
    return removed


def _replace_bytes(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.forget-tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    fsync_dir(path.parent)
