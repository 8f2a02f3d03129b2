"""The append-only operation log: the memory's source of truth.

Every write transaction is appended here as one record *before* SQLite
commits it, and SQLite stores the record's sequence number in the same
transaction. So:

- after a crash between the two, the open replays the missing tail (redo);
- a torn last record (a crash mid-append) fails its CRC and is cut off;
- ``rebuild`` regenerates the SQLite graph, and from it every index, by
  replaying the log into an empty file.

Records are logical transactions: the mutating statements and their
parameters, JSON-encoded (bytes as base64) and zlib-compressed. Replaying
them in order on the same schema reproduces the same rows, ids included,
because our SQL never reads clocks or randomness.

Segment file layout: ``MAGIC`` then records ``<length u32><crc32 u32><seq u64><payload>``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

log = logging.getLogger(__name__)

MAGIC = b"EMEMLOG1"
FRAME = struct.Struct("<IIQ")
SEGMENT_NAME = re.compile(r"^(\d{12})\.seg$")
Statement = tuple[str, Any, bool]  # (sql, params or rows, many)


class LogCorruptError(Exception):
    """A record in the middle of the log is damaged (not a torn tail)."""


def _default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"cannot log a value of type {type(value).__name__}")


def _hook(obj: dict) -> Any:
    if len(obj) == 1 and "$b" in obj:
        return base64.b64decode(obj["$b"])
    return obj


def encode(statements: list[Statement]) -> bytes:
    body = json.dumps([[sql, params, int(many)] for sql, params, many in statements],
                      separators=(",", ":"), default=_default)
    return zlib.compress(body.encode("utf-8"), 1)


def decode(payload: bytes) -> list[Statement]:
    items = json.loads(zlib.decompress(payload).decode("utf-8"), object_hook=_hook)
    return [(sql, params, bool(many)) for sql, params, many in items]


@dataclass(frozen=True)
class Record:
    seq: int
    statements: list[Statement]


class OpLog:
    """Segmented append-only log in ``<db>.log/``; one writer (the store's lock)."""

    def __init__(self, folder: Path, segment_bytes: int = 64 * 1024 * 1024) -> None:
        self.folder = folder
        self.segment_bytes = segment_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._handle = None
        self.torn_bytes_cut = 0
        self.last_seq = self._recover_tail()

    # -- files ------------------------------------------------------------
    def segments(self) -> list[tuple[int, Path]]:
        found = []
        for entry in self.folder.iterdir():
            match = SEGMENT_NAME.match(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
        return sorted(found)

    def _recover_tail(self) -> int:
        """Find the last good record; cut a torn tail so appends continue cleanly."""
        segments = self.segments()
        if not segments:
            return 0
        first_seq, path = segments[-1]
        last, good_end = first_seq - 1, len(MAGIC)
        with open(path, "rb") as handle:
            if handle.read(len(MAGIC)) != MAGIC:
                good_end = 0
            else:
                for seq, _payload, end in _scan(handle, tolerate_tail=True):
                    last, good_end = seq, end
        size = path.stat().st_size
        if size > good_end:
            self.torn_bytes_cut = size - good_end
            log.warning("operation log %s: cutting a torn tail of %d bytes after seq %d",
                        path.name, size - good_end, last)
            with open(path, "rb+") as handle:
                handle.truncate(good_end)
                if good_end == 0:
                    handle.write(MAGIC)
                os.fsync(handle.fileno())
        return last

    def _writer(self, seq: int):
        if self._handle is not None and self._handle.tell() < self.segment_bytes:
            return self._handle
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None
        segments = self.segments()
        if segments and segments[-1][1].stat().st_size < self.segment_bytes:
            handle = open(segments[-1][1], "ab")
        else:
            handle = open(self.folder / f"{seq:012d}.seg", "ab")
            handle.write(MAGIC)
        self._handle = handle
        return handle

    # -- writing ----------------------------------------------------------
    def append(self, statements: list[Statement]) -> tuple[int, int]:
        """Append one transaction; returns (seq, offset) for `undo_append`."""
        payload = encode(statements)
        with self._lock:
            seq = self.last_seq + 1
            handle = self._writer(seq)
            offset = handle.tell()
            handle.write(FRAME.pack(len(payload), zlib.crc32(payload) & 0xFFFFFFFF, seq) + payload)
            handle.flush()  # in the OS: survives a killed process; fsync() for power loss
            self.last_seq = seq
            return seq, offset

    def undo_append(self, seq: int, offset: int) -> None:
        """Take back the last record when SQLite could not commit it."""
        with self._lock:
            if self._handle is None or seq != self.last_seq:
                return
            self._handle.flush()
            self._handle.truncate(offset)
            self._handle.seek(offset)
            self.last_seq = seq - 1

    def sync(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.flush()
                os.fsync(self._handle.fileno())

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.flush()
                os.fsync(self._handle.fileno())
                self._handle.close()
                self._handle = None

    # -- reading ----------------------------------------------------------
    def records(self, after: int = 0) -> Iterator[Record]:
        """Every record with seq > after, in order."""
        segments = self.segments()
        for n, (first_seq, path) in enumerate(segments):
            next_first = segments[n + 1][0] if n + 1 < len(segments) else None
            if next_first is not None and next_first - 1 <= after:
                continue
            with open(path, "rb") as handle:
                if handle.read(len(MAGIC)) != MAGIC:
                    raise LogCorruptError(f"{path} is not an emem operation log segment")
                for seq, payload, _ in _scan(handle, tolerate_tail=next_first is None):
                    if seq > after:
                        try:
                            statements = decode(payload)
                        except (ValueError, zlib.error) as exc:
                            raise LogCorruptError(f"record seq {seq} in {path.name} cannot be decoded: {exc}") from exc
                        yield Record(seq, statements)

    def prune(self, upto_seq: int) -> int:
        """Delete whole segments holding only records <= upto_seq; returns how many."""
        removed = 0
        segments = self.segments()
        for n, (first_seq, path) in enumerate(segments[:-1]):
            if segments[n + 1][0] - 1 <= upto_seq:
                path.unlink()
                removed += 1
        return removed

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for _, p in self.segments())


def _scan(handle, tolerate_tail: bool) -> Iterator[tuple[int, bytes, int]]:
    """(seq, payload, end offset) of each record whose checksum holds."""
    while True:
        start = handle.tell()
        header = handle.read(FRAME.size)
        if not header:
            return
        if len(header) < FRAME.size:
            if tolerate_tail:
                return
            raise LogCorruptError(f"short record header at byte {start}")
        length, crc, seq = FRAME.unpack(header)
        payload = handle.read(length)
        if len(payload) < length or zlib.crc32(payload) & 0xFFFFFFFF != crc:
            if tolerate_tail:
                # Damage at the very end is a torn append; anything after it is lost with it.
                return
            raise LogCorruptError(f"record seq {seq} at byte {start} fails its checksum")
        yield seq, payload, handle.tell()


class RecordingConnection:
    """Passes statements to SQLite and remembers the mutating ones for the log."""

    _MUTATING = ("INSERT", "UPDATE", "DELETE", "REPLACE")

    def __init__(self, conn) -> None:
        self._conn = conn
        self.statements: list[Statement] = []

    def execute(self, sql: str, params: Any = ()):
        cursor = self._conn.execute(sql, params)
        if sql.lstrip()[:7].upper().startswith(self._MUTATING):
            self.statements.append((sql, list(params) if not isinstance(params, dict) else params, False))
        return cursor

    def executemany(self, sql: str, rows: Any):
        rows = [list(r) if not isinstance(r, dict) else r for r in rows]
        cursor = self._conn.executemany(sql, rows)
        if rows and sql.lstrip()[:7].upper().startswith(self._MUTATING):
            self.statements.append((sql, rows, True))
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def apply_record(conn, record: Record) -> None:
    for sql, params, many in record.statements:
        if many:
            conn.executemany(sql, params)
        else:
            conn.execute(sql, params)


def find_segment_first_seq(folder: Path) -> Optional[int]:
    names = sorted(p.name for p in folder.iterdir() if SEGMENT_NAME.match(p.name)) if folder.exists() else []
    return int(names[0][:12]) if names else None
