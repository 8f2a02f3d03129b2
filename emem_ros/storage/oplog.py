"""The append-only operation log: the memory's source of truth.

Every write transaction is appended here as one record *before* SQLite
commits it, and SQLite stores the record's sequence number in the same
transaction. So:

- after a crash between the two, the open replays the missing tail (redo);
- a torn last record (a crash mid-append) fails its CRC and is cut off;
- ``rebuild`` regenerates the SQLite graph, and from it every index, by
  replaying the log into an empty file.

Records are logical transactions: the mutating statements and their
parameters. Replaying them in order on the same schema reproduces the same
rows, ids included, because our SQL never reads clocks or randomness.

Segment file layout: a magic naming the record encoding, then records
``<length u32><crc32 u32><seq u64><payload>``. ``EMEMLOG2`` segments hold
the compact binary encoding of ``logcodec``; ``EMEMLOG1`` segments (JSON +
zlib, written before it) are still read. New records always go to a
segment of the current format: a log that ends in an old segment starts a
new one on its first append.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Optional

from emem_ros.storage import logcodec
from emem_ros.storage.logcodec import Statement

log = logging.getLogger(__name__)

MAGIC_V1 = b"EMEMLOG1"
MAGIC_V2 = b"EMEMLOG2"
MAGIC = MAGIC_V2
"""The magic of segments written now."""
MAGIC_SIZE = len(MAGIC)
DECODERS: dict[bytes, Callable[[bytes], list[Statement]]] = {
    MAGIC_V1: logcodec.decode_v1,
    MAGIC_V2: logcodec.decode_v2,
}
ENCODERS: dict[bytes, Callable[[list[Statement]], bytes]] = {
    MAGIC_V1: logcodec.encode_v1,
    MAGIC_V2: logcodec.encode_v2,
}
FRAME = struct.Struct("<IIQ")
SEGMENT_NAME = re.compile(r"^(\d{12})\.seg$")


class LogCorruptError(Exception):
    """A record in the middle of the log is damaged (not a torn tail)."""


def encode(statements: list[Statement]) -> bytes:
    """A record's payload in the current format."""
    return logcodec.encode_v2(statements)


def decode(payload: bytes, magic: bytes = MAGIC) -> list[Statement]:
    return DECODERS[magic](payload)


@dataclass(frozen=True)
class Record:
    seq: int
    statements: list[Statement]


class OpLog:
    """Segmented append-only log in ``<db>.log/``; one writer (the store's lock)."""

    def __init__(self, folder: Path, segment_bytes: int = 64 * 1024 * 1024, magic: bytes = MAGIC) -> None:
        """``magic`` picks the format new segments are written in (tests and benchmarks
        write the old one to check that it still reads)."""
        if magic not in ENCODERS:
            raise ValueError(f"unknown operation log format {magic!r}")
        self.folder = folder
        self.segment_bytes = segment_bytes
        self.magic = magic
        self._encode = ENCODERS[magic]
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._handle: Optional[BinaryIO] = None
        self._size = 0  # bytes in the open segment (tell() would cost a system call per append)
        self.torn_bytes_cut = 0
        self.last_seq = self._recover_tail()

    # -- files ------------------------------------------------------------
    def segments(self) -> list[tuple[int, Path]]:
        return list_segments(self.folder)

    def _recover_tail(self) -> int:
        """Find the last good record; cut a torn tail so appends continue cleanly."""
        segments = self.segments()
        if not segments:
            return 0
        first_seq, path = segments[-1]
        last, good_end = first_seq - 1, MAGIC_SIZE
        with open(path, "rb") as handle:
            magic = handle.read(MAGIC_SIZE)
            if magic not in DECODERS:
                good_end = 0  # a segment whose creation was cut short: it holds nothing
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
                    handle.write(self.magic)
                os.fsync(handle.fileno())
        return last

    def _writer(self, seq: int) -> BinaryIO:
        if self._handle is not None and self._size < self.segment_bytes:
            return self._handle
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None
        segments = self.segments()
        if segments:
            last = segments[-1][1]
            size = last.stat().st_size
            if size < self.segment_bytes and _magic_of(last) == self.magic:
                handle: BinaryIO = open(last, "ab", buffering=0)
                self._handle = handle
                self._size = size
                return handle
        # A new segment is named by its first record; a file of that name can only
        # be an empty segment (e.g. an old-format one holding no record yet).
        path = self.folder / f"{seq:012d}.seg"
        if path.exists() and path.stat().st_size > MAGIC_SIZE:
            raise LogCorruptError(f"{path} already holds records from seq {seq} on, "
                                  f"but the log ends at seq {seq - 1}")
        handle = open(path, "wb", buffering=0)  # unbuffered: one system call per record
        handle.write(self.magic)
        self._handle = handle
        self._size = len(self.magic)
        return handle

    # -- writing ----------------------------------------------------------
    def append(self, statements: list[Statement]) -> tuple[int, int]:
        """Append one transaction; returns (seq, offset) for `undo_append`."""
        payload = self._encode(statements)
        frame_head = FRAME.pack  # local names: this is every write's path
        with self._lock:
            seq = self.last_seq + 1
            handle = self._writer(seq)
            offset = self._size
            head = frame_head(len(payload), zlib.crc32(payload) & 0xFFFFFFFF, seq)
            try:
                _write_all(handle, head, payload)  # in the OS: survives a killed process; fsync() for power loss
            except BaseException:
                try:  # no half record may stay in front of the next one
                    handle.truncate(offset)
                    handle.seek(offset)  # a new segment is not opened in append mode
                except OSError:
                    log.exception("could not take back a partly written log record at byte %d", offset)
                raise
            self._size = offset + len(head) + len(payload)
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
            self._size = offset
            self.last_seq = seq - 1

    def sync(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.flush()
                os.fsync(self._handle.fileno())

    def close(self) -> None:
        with self._lock:
            self._close_segment()

    def _close_segment(self) -> None:
        """Flush, fsync and close the open segment, if any (the caller holds ``_lock``)."""
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None

    # -- reading ----------------------------------------------------------
    def records(self, after: int = 0) -> Iterator[Record]:
        """Every record with seq > after, in order."""
        for seq, magic, payload, position in iter_payloads(self.folder, after):
            yield Record(seq, _decode_record(magic, payload, seq, position.path))

    def prune(self, upto_seq: int) -> int:
        """Delete whole segments holding only records <= upto_seq; returns how many.

        Records a reader still holds (``set_hold``: a fleet sync that has not
        shipped them yet) are kept whatever ``upto_seq`` says.
        """
        hold = lowest_hold(self.folder)
        if hold is not None:
            upto_seq = min(upto_seq, hold)
        removed = 0
        segments = self.segments()
        for n, (_first_seq, path) in enumerate(segments[:-1]):
            if segments[n + 1][0] - 1 <= upto_seq:
                path.unlink()
                removed += 1
        return removed

    def restart_after(self, base_seq: int) -> int:
        """Replace every segment by one holding only the records after ``base_seq`` (forget).

        The caller has a checkpoint copy named ``base_seq`` holding everything
        up to it; what came later (the tail) is copied record by record, same
        sequence numbers, into a new segment written beside and renamed in,
        then the old segments are deleted. Returns the number of tail records.
        (``prepare_restart`` + ``finish_restart`` + ``discard``: the same in
        steps, so a caller holding a lock for the swap holds it for little.)
        """
        prepared = self.prepare_restart(base_seq)
        records, old = self.finish_restart(prepared)
        discard(old)
        return records

    def prepare_restart(self, base_seq: int) -> "PreparedRestart":
        """The new segment with the records after ``base_seq`` written so far (appends go on meanwhile)."""
        with self._lock:
            upto = self.last_seq
        final = self.folder / f"{base_seq + 1:012d}.seg"
        prepared = PreparedRestart(base_seq, final, self.folder / f".{final.name}.tmp", base_seq)
        with open(prepared.temp, "wb") as handle:
            handle.write(self.magic)
            prepared.copied = self._copy_records(handle, base_seq, upto)
            handle.flush()
        return prepared

    def finish_restart(self, prepared: "PreparedRestart") -> tuple[int, list[Path]]:
        """Append the records that came since, rename the segment in, hide the old ones (renamed, not deleted:
        deleting big files is slow); returns (tail records, hidden files for ``discard``)."""
        with self._lock:
            self._close_segment()
            with open(prepared.temp, "ab") as handle:
                last = self._copy_records(handle, prepared.copied, self.last_seq)
                handle.flush()
                os.fsync(handle.fileno())
            old = [path for _first, path in self.segments() if path != prepared.final]
            os.replace(prepared.temp, prepared.final)
            hidden = []
            for path in old:
                gone = path.with_name(f".{path.name}{HIDDEN}")
                os.replace(path, gone)
                hidden.append(gone)
            _fsync_folder(self.folder)
            self._size = prepared.final.stat().st_size
            self.last_seq = max(self.last_seq, last)
            return last - prepared.base_seq, hidden

    def _copy_records(self, handle: BinaryIO, after: int, upto: int) -> int:
        """Copy the records after ``after`` up to ``upto`` into ``handle``; returns the last seq copied."""
        last = after
        for seq, magic, payload, position in iter_payloads(self.folder, after):
            if seq > upto:
                break
            if magic != self.magic:
                payload = self._encode(_decode_record(magic, payload, seq, position.path))
            handle.write(FRAME.pack(len(payload), zlib.crc32(payload) & 0xFFFFFFFF, seq) + payload)
            last = seq
        return last

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for _, p in self.segments())


HIDDEN = ".forgotten"
"""Suffix of files a forget has replaced and will delete (no longer a segment nor a base)."""


@dataclass
class PreparedRestart:
    """A log restart in progress (``OpLog.prepare_restart``)."""

    base_seq: int
    final: Path
    temp: Path
    copied: int
    """The last record the new segment holds so far."""


def discard(paths: list[Path]) -> None:
    """Delete files a forget hid, and sync their folders."""
    for path in paths:
        path.unlink(missing_ok=True)
    for folder in {p.parent for p in paths}:
        _fsync_folder(folder)


def list_segments(folder: Path) -> list[tuple[int, Path]]:
    """(first seq, path) of each segment in ``folder``, oldest first."""
    found = []
    for entry in folder.iterdir() if folder.is_dir() else ():
        match = SEGMENT_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found)


@dataclass(frozen=True)
class LogPosition:
    """Where the record after ``seq`` starts (``path``, byte ``offset``): a reader resumes there."""

    seq: int
    path: Path
    offset: int


def iter_payloads(folder: Path, after: int = 0, resume: Optional[LogPosition] = None
                  ) -> Iterator[tuple[int, bytes, bytes, LogPosition]]:
    """(seq, segment magic, payload, position after it) of every record with seq > after; reads only.

    Safe beside the writing process: the last segment may be growing, and an
    incomplete record at its end is where the log ends for now (it is never
    cut here; only the writer cuts a torn tail, when it opens the log).
    ``resume`` (a position this function yielded, for ``after``) skips the
    scan of that segment's earlier records.
    """
    segments = list_segments(folder)
    for n, (first_seq, path) in enumerate(segments):
        next_first = segments[n + 1][0] if n + 1 < len(segments) else None
        if next_first is not None and next_first - 1 <= after:
            continue
        try:
            handle = open(path, "rb")
        except FileNotFoundError:  # pruned meanwhile: the caller sees the gap in the sequence numbers
            continue
        with handle:
            magic = handle.read(MAGIC_SIZE)
            if magic not in DECODERS:
                if next_first is None and len(magic) < MAGIC_SIZE:
                    return  # a segment being created right now
                raise LogCorruptError(f"{path} is not an emem operation log segment")
            if resume is not None and resume.seq == after and resume.path == path and first_seq <= after:
                handle.seek(resume.offset)
            for seq, payload, end in _scan(handle, tolerate_tail=next_first is None):
                if seq > after:
                    yield seq, magic, payload, LogPosition(seq, path, end)


def _decode_record(magic: bytes, payload: bytes, seq: int, path: Path) -> list[Statement]:
    try:
        return DECODERS[magic](payload)
    except (ValueError, zlib.error) as exc:
        raise LogCorruptError(f"record seq {seq} in {path.name} cannot be decoded: {exc}") from exc


HOLD_PREFIX = "hold-"


def set_hold(folder: Path, name: str, seq: int) -> None:
    """Tell pruning that records after ``seq`` are still needed by reader ``name`` (atomic replace)."""
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"a log hold name is letters, digits, '-', '_' or '.', got {name!r}")
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / f".{HOLD_PREFIX}{name}.{os.getpid()}.{threading.get_ident()}.tmp"  # two writers never share it
    temp.write_text(f"{int(seq)}\n", encoding="ascii")
    os.replace(temp, folder / f"{HOLD_PREFIX}{name}")


def read_hold(folder: Path, name: str) -> Optional[int]:
    try:
        return int((folder / f"{HOLD_PREFIX}{name}").read_text(encoding="ascii").strip())
    except (FileNotFoundError, ValueError):
        return None


def lowest_hold(folder: Path) -> Optional[int]:
    """The smallest seq any reader holds (None: nobody holds anything)."""
    holds = []
    for entry in folder.glob(f"{HOLD_PREFIX}*") if folder.is_dir() else ():
        try:
            holds.append(int(entry.read_text(encoding="ascii").strip()))
        except ValueError:  # unreadable: keep everything rather than guess
            holds.append(0)
    return min(holds) if holds else None


def _fsync_folder(folder: Path) -> None:
    fd = os.open(str(folder), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(handle: BinaryIO, head: bytes, payload: bytes) -> None:
    """One system call per record; an unbuffered write may take only part (a signal, a full disk)."""
    total = len(head) + len(payload)
    written = _writev(handle.fileno(), (head, payload)) if _writev is not None else handle.write(head + payload)
    if written == total:
        return
    view = memoryview(head + payload)[written or 0:]
    while view:
        written = handle.write(view)
        if not written:
            raise OSError(f"could not append to the operation log {handle.name}")
        view = view[written:]


_writev = getattr(os, "writev", None)


def _magic_of(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(MAGIC_SIZE)


def _scan(handle: BinaryIO, tolerate_tail: bool) -> Iterator[tuple[int, bytes, int]]:
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

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.statements: list[Statement] = []

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        cursor = self._conn.execute(sql, params)
        if sql.lstrip()[:7].upper().startswith(self._MUTATING):
            self.statements.append((sql, list(params) if not isinstance(params, dict) else params, False))
        return cursor

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        # The rows are logged as given (tuples or lists: the encoder reads both by column), not copied.
        rows = rows if type(rows) is list else list(rows)
        cursor = self._conn.executemany(sql, rows)
        if rows and sql.lstrip()[:7].upper().startswith(self._MUTATING):
            self.statements.append((sql, rows, True))
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def apply_record(conn: sqlite3.Connection, record: Record) -> None:
    for sql, params, many in record.statements:
        sql = logcodec.LEGACY_SQL.get(sql, sql)
        if many:
            conn.executemany(sql, params)
        else:
            conn.execute(sql, params)


def find_segment_first_seq(folder: Path) -> Optional[int]:
    names = sorted(p.name for p in folder.iterdir() if SEGMENT_NAME.match(p.name)) if folder.exists() else []
    return int(names[0][:12]) if names else None
