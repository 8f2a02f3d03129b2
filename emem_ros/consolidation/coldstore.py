"""The cold store: archived raw observations, append-only, outside the hot graph.

Layout: ``<db>.cold/seg-000001.jsonl.gz``, ``seg-000002.jsonl.gz``, … Each
archival batch is one gzip *member* (gzip files may be concatenated) of JSON
lines, one archived observation per line, written and fsynced before the
SQLite transaction that archives the rows commits. So:

- a crash after the fsync but before the commit leaves records whose rows are
  still long_term; they are archived (and written) again next time. Records
  are at-least-once; ``iter_records`` keeps the last copy of each id;
- a crash mid-write leaves a torn last member, which readers skip;
- a process never appends to a segment an earlier process wrote (it starts a
  new one), so a torn member is always at the end of a file.

Plain ``zcat seg-*.jsonl.gz`` works on it, so does ``gzip.open``.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from emem_ros.consolidation.archive_plan import encode_lines
from emem_ros.indexes.snapshots import fsync_dir as _fsync_dir

log = logging.getLogger(__name__)

SEGMENT = re.compile(r"^seg-(\d{6})\.jsonl\.gz$")
SEGMENT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ColdWrite:
    segment: str
    records: int
    bytes: int


class ColdStore:
    def __init__(self, folder: Path, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.folder = Path(folder)
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._current: Optional[Path] = None

    def segments(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        found = sorted((int(m.group(1)), p) for p in self.folder.iterdir() if (m := SEGMENT.match(p.name)))
        return [p for _, p in found]

    def _target(self) -> Path:
        if self._current is not None and self._current.exists() and self._current.stat().st_size < self.segment_bytes:
            return self._current
        existing = self.segments()
        last = SEGMENT.match(existing[-1].name) if existing else None
        number = int(last.group(1)) + 1 if last is not None else 1
        self._current = self.folder / f"seg-{number:06d}.jsonl.gz"
        return self._current

    def append(self, records: Iterable[dict[str, Any]]) -> ColdWrite:
        """Write one gzip member and fsync it (and the folder when the file is new)."""
        return self.append_encoded(*encode_lines(records))

    def append_encoded(self, lines: bytes, count: int) -> ColdWrite:
        """``append`` of records already encoded (``archive_plan.encode_record``: one JSON line each)."""
        if not count:
            return ColdWrite(segment="", records=0, bytes=0)
        data = gzip.compress(lines, compresslevel=6, mtime=0)
        with self._lock:
            created = not self.folder.exists()
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self._target()
            new_file = not path.exists()
            with open(path, "ab") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            if new_file or created:
                _fsync_dir(self.folder)
                if created:
                    _fsync_dir(self.folder.parent)
        return ColdWrite(segment=path.name, records=count, bytes=len(data))

    def iter_records(self, ids: Optional[Iterable[str]] = None) -> Iterator[dict[str, Any]]:
        """Archived observations, oldest segment first; with ``ids``, only those (last copy wins)."""
        wanted = set(ids) if ids is not None else None
        seen: dict[str, dict[str, Any]] = {}
        for path in self.segments():
            for record in _read_members(path):
                key = str(record.get("id"))
                if wanted is not None and key not in wanted:
                    continue
                seen[key] = record
        yield from seen.values()

    def count(self) -> int:
        return sum(1 for _ in self.iter_records())


def _read_members(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete gzip member's JSON lines; a torn last member is skipped with a warning."""
    data = path.read_bytes()
    offset = 0
    while offset < len(data):
        inflater = zlib.decompressobj(wbits=31)
        try:
            chunk = inflater.decompress(data[offset:])
        except zlib.error as exc:
            log.warning("cold store %s: unreadable data at byte %d (%s); skipping the rest", path.name, offset, exc)
            return
        if not inflater.eof:
            log.warning("cold store %s: torn record batch at byte %d (crash while archiving); skipped",
                        path.name, offset)
            return
        for line in chunk.decode("utf-8").splitlines():
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError:
                    log.warning("cold store %s: unreadable line skipped", path.name)
        consumed = len(data) - offset - len(inflater.unused_data)
        offset += consumed
