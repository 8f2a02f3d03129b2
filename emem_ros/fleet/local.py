"""The robot side of a sync: its operation log and its SQLite file, read without disturbing the writer.

A sync may run while the robot's node holds the memory open (``<db>.lock``).
It takes no lock and writes nothing the node owns:

- log segments are read as files (``oplog.iter_payloads``); an incomplete
  record at the end of the last segment is simply where the log ends for now;
- SQLite is opened read-only (``mode=ro``); WAL gives the reader the last
  committed state while the node keeps writing. From it the sync takes the
  committed log position (``meta.log_seq``, written in every write
  transaction) and ships only records up to it: a record past it may still
  be taken back (``OpLog.undo_append`` when a commit fails) or be waiting to
  be applied (the ledger's deferred records, applied within a second);
- the only file it writes is its own hold (``<db>.log/hold-fleet-...``),
  which tells pruning to keep what the fleet has not acknowledged.
"""

from __future__ import annotations

import hashlib
import sqlite3
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from emem_ros.fleet.errors import FleetError
from emem_ros.storage import oplog
from emem_ros.storage.logcodec import Statement
from emem_ros.storage.sqlutil import chunked, marks

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.fleet.apply import SnapshotKeys

BASE_PREFIX = "base-"


@dataclass(frozen=True)
class LocalState:
    """The robot's committed state, read in one read transaction."""

    log_seq: int
    last_ids: dict[str, int]
    model: str
    dim: int


@dataclass(frozen=True)
class LogRecord:
    seq: int
    crc: int
    statements: list[Statement]


class LocalMemory:
    """Read-only access to one robot's memory file and operation log."""

    def __init__(self, db_path: str | Path) -> None:
        self.path = Path(db_path)
        self.log_dir = self.path.with_name(self.path.name + ".log")
        if not self.path.is_file():
            raise FleetError(f"no memory file at {self.path}")
        if not self.log_dir.is_dir():
            raise FleetError(f"memory {self.path} has no operation log ({self.log_dir}); the fleet sync ships the "
                             "log, so the memory must be written with log_enabled: true")
        self._conn: Optional[sqlite3.Connection] = None
        self._position: Optional[oplog.LogPosition] = None
        self._crcs: dict[int, int] = {}
        """Checksums of records read lately (the sync checks the one at the fleet's position each run)."""

    # -- SQLite, read-only -------------------------------------------------
    def _sqlite(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None,
                                             timeout=30.0, check_same_thread=False)
                self._conn.execute("PRAGMA busy_timeout=30000")
            except sqlite3.Error as exc:
                raise FleetError(f"cannot read memory {self.path}: {exc}") from exc
        return self._conn

    def state(self) -> LocalState:
        conn = self._sqlite()
        try:
            conn.execute("BEGIN")
            try:
                meta = dict(conn.execute(
                    "SELECT key, value FROM meta WHERE key IN ('log_seq', 'embedding_model', 'embedding_dim')"))
                sequences = dict(conn.execute("SELECT name, seq FROM sqlite_sequence"))
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise FleetError(f"cannot read memory {self.path}: {exc}") from exc
        dim = meta.get("embedding_dim")
        return LocalState(int(meta.get("log_seq") or 0),
                          {name: int(sequences.get(name, 0)) for name in ("texts", "episodes", "gists", "entities")},
                          str(meta.get("embedding_model") or ""), int(dim) if dim and str(dim).isdigit() else 0)

    def experience_rows(self, ids: Sequence[str], columns: Sequence[str]) -> list[tuple[Any, ...]]:
        """Experiences by id from the robot's file (immutable rows: what the log's insert made)."""
        try:
            return _experience_rows(self._sqlite(), ids, columns, self.path)
        except sqlite3.Error as exc:
            raise FleetError(f"cannot read experiences from {self.path}: {exc}") from exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the log ------------------------------------------------------------
    def records(self, after: int, upto: int) -> Iterator[LogRecord]:
        """Records after ``after`` up to ``upto``, in order (read-only; see the module doc).

        Where the previous call left off at ``after``, reading resumes at that byte
        instead of scanning the segment (which grows to ``log_segment_bytes``) again.
        """
        resume = self._position if self._position is not None and self._position.seq == after else None
        try:
            for seq, magic, payload, position in oplog.iter_payloads(self.log_dir, after, resume):
                if seq > upto:
                    return
                try:
                    statements = oplog.DECODERS[magic](payload)
                except (ValueError, zlib.error) as exc:
                    raise FleetError(f"record seq {seq} of {position.path} cannot be decoded ({exc}); the sync "
                                     "stops before it") from exc
                self._position = position
                self._crcs[seq] = zlib.crc32(payload) & 0xFFFFFFFF
                if len(self._crcs) > 4096:
                    self._crcs.pop(next(iter(self._crcs)))
                yield LogRecord(seq, self._crcs[seq], statements)
        except oplog.LogCorruptError as exc:
            raise FleetError(f"the operation log of {self.path} is damaged: {exc}; the sync stops before it") from exc

    def first_seq(self) -> Optional[int]:
        """The oldest record still in the log."""
        for seq, _magic, _payload, _position in oplog.iter_payloads(self.log_dir, 0):
            return seq
        return None

    def record_crc(self, seq: int) -> Optional[int]:
        """Checksum of the record ``seq`` if the log still holds it (remembered from reading, else read)."""
        if seq <= 0:
            return None
        if seq in self._crcs:
            return self._crcs[seq]
        for found, _magic, payload, _position in oplog.iter_payloads(self.log_dir, seq - 1):
            return zlib.crc32(payload) & 0xFFFFFFFF if found == seq else None
        return None

    def newest_base(self) -> Optional[tuple[int, Path]]:
        """The newest checkpoint copy (``base-<seq>.db``) the log holds, if any."""
        bases = []
        for entry in self.log_dir.glob(f"{BASE_PREFIX}*.db"):
            digits = entry.name[len(BASE_PREFIX):-3]
            if digits.isdigit():
                bases.append((int(digits), entry))
        return max(bases) if bases else None

    # -- holds --------------------------------------------------------------
    def hold_name(self, url_key: str) -> str:
        return "fleet-" + hashlib.sha1(url_key.encode("utf-8")).hexdigest()[:10]

    def hold(self, name: str, seq: int) -> None:
        try:
            oplog.set_hold(self.log_dir, name, seq)
        except OSError as exc:  # the fleet has the rows; only pruning protection is at stake
            raise FleetError(f"cannot write the log hold in {self.log_dir}: {exc}") from exc

    def held(self, name: str) -> Optional[int]:
        return oplog.read_hold(self.log_dir, name)


def _experience_rows(conn: sqlite3.Connection, ids: Sequence[str], columns: Sequence[str],
                     path: Path) -> list[tuple[Any, ...]]:
    wanted = list(dict.fromkeys(ids))
    rows: dict[str, tuple[Any, ...]] = {}
    select = ", ".join(columns)
    id_at = list(columns).index("id")
    for chunk in chunked(wanted):
        for row in conn.execute(f"SELECT {select} FROM experiences WHERE id IN ({marks(len(chunk))})", chunk):
            rows[row[id_at]] = tuple(row)
    missing = [i for i in wanted if i not in rows]
    if missing:
        raise FleetError(f"experience {missing[0]} is in the log of {path} but not in the file: "
                         "the memory was changed behind its log")
    return [rows[i] for i in wanted]


class BaseSnapshot:
    """A checkpoint copy of the memory (``base-<seq>.db``), read-only, for shipping whole."""

    TABLE_COLUMNS = {
        "episodes": ("id", "name", "start", "end", "status", "parent_id", "previous_id", "summary", "goal", "action",
                     "result", "reflection", "success", "consolidated", "metadata", "embedding"),
        "gists": ("id", "text", "cx", "cy", "cz", "radius", "time_start", "time_end", "source_count", "layers",
                  "episode_id", "created_at", "metadata", "embedding"),
        "entities": ("id", "name", "entity_type", "x", "y", "z", "spread", "first_seen", "last_seen", "sightings",
                     "confidence", "layer", "metadata", "embedding"),
        "edges": ("kind", "src", "dst", "weight", "updated"),
    }
    OBSERVATION_COLUMNS = ("id", "text_id", "stamp", "layer", "source_type", "x", "y", "z", "frame_id", "confidence",
                           "episode_id", "gist_id", "tier", "tier_since", "value", "metadata")

    def __init__(self, path: Path, seq: int) -> None:
        self.path = path
        self.seq = seq
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)

    def rows(self, table: str, columns: Sequence[str], batch: int = 20000) -> Iterator[list[tuple[Any, ...]]]:
        quoted = ", ".join(f'"{c}"' for c in columns)
        cursor = self.conn.execute(f"SELECT {quoted} FROM {table}")
        while True:
            chunk = cursor.fetchmany(batch)
            if not chunk:
                return
            yield chunk

    def keys(self) -> "SnapshotKeys":
        """Every row's key (ids, never content): the fleet deletes the robot's rows not among them."""
        from emem_ros.fleet.apply import SnapshotKeys

        def ids(table: str) -> list[Any]:
            return [r[0] for r in self.conn.execute(f"SELECT id FROM {table}")]

        return SnapshotKeys(ids("observations"), ids("texts"), ids("episodes"), ids("gists"), ids("entities"),
                            ids("experiences"),
                            [tuple(r) for r in self.conn.execute("SELECT kind, src, dst FROM edges")])

    def last_ids(self) -> dict[str, int]:
        sequences = dict(self.conn.execute("SELECT name, seq FROM sqlite_sequence"))
        return {name: int(sequences.get(name, 0)) for name in ("texts", "episodes", "gists", "entities")}

    def experience_rows(self, ids: Sequence[str], columns: Sequence[str]) -> list[tuple[Any, ...]]:
        return _experience_rows(self.conn, ids, columns, self.path)

    def experience_ids(self) -> list[str]:
        return [row[0] for row in self.conn.execute("SELECT id FROM experiences ORDER BY n")]

    def close(self) -> None:
        self.conn.close()

