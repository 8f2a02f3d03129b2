"""What one archival batch will do, as plain data: the read-and-encode half of archival.

Reading the rows due for archival and encoding their cold-store records
(JSON of every field, the metadata decoded and encoded again) is most of
archival's interpreter time. It needs nothing but a read connection, so it
can run in the maintenance process (``offload.py``) as well as on the
consolidation worker; either way ``plan_batch`` is the one code that does
it, and ``Archiver`` applies the result (cold-store append, SQLite
transaction, announcements) in the serving process.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from emem_ros.consolidation.rows import ObsRow, fetch_rows
from emem_ros.core.types import NodeKind, make_id
from emem_ros.storage.events import RemovedObservation

DUE = "o.tier = 'long_term' AND o.tier_since <= ?"
DUE_ORDER = "o.tier_since, o.id"


@dataclass
class ArchiveBatch:
    """The rows of one batch (in archival order) and their encoded cold-store lines.

    ``lines[ends[i-1]:ends[i]]`` is row i's record, UTF-8 JSON ending in a
    newline (empty when not encoded: ``archive_retention`` 'drop').
    """

    rows: list[RemovedObservation] = field(default_factory=list)
    """(id, text_id, layer, episode_id, source_type, stamp) of each row: what per-text views drop when it leaves
    the hot tables (``storage/events.py``)."""
    readings: list[tuple[int, str, str, Optional[float]]] = field(default_factory=list)
    """(row index, layer, text, value) of the body readings with a text: what body scales are learnt from."""
    lines: bytes = b""
    ends: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def part_lines(self, start: int, stop: int) -> bytes:
        """The encoded records of rows ``start`` .. ``stop - 1``."""
        if not self.ends:
            return b""
        return self.lines[self.ends[start - 1] if start else 0:self.ends[stop - 1]]


def plan_batch(conn: sqlite3.Connection, cutoff: float, limit: int, now: float, encode: bool) -> ArchiveBatch:
    """Up to ``limit`` long-term rows promoted at or before ``cutoff``, oldest promotion first."""
    rows = fetch_rows(conn, DUE, [cutoff], order=DUE_ORDER, limit=limit)
    batch = ArchiveBatch(rows=[(r.id, r.text_id, r.layer, r.episode_id, r.source_type, r.stamp) for r in rows],
                         readings=[(i, r.layer, r.text, r.value) for i, r in enumerate(rows)
                                   if r.is_reading and r.text])
    if encode and rows:
        chunks = [encode_record(record(row, now)) for row in rows]
        ends: list[int] = []
        total = 0
        for chunk in chunks:
            total += len(chunk)
            ends.append(total)
        batch.lines, batch.ends = b"".join(chunks), ends
    return batch


def encode_record(value: dict[str, Any]) -> bytes:
    """One cold-store line (the format ``ColdStore`` reads back)."""
    return (json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str) + "\n").encode("utf-8")


def encode_lines(records: Iterable[dict[str, Any]]) -> tuple[bytes, int]:
    chunks = [encode_record(r) for r in records]
    return b"".join(chunks), len(chunks)


def record(row: ObsRow, archived_at: float) -> dict[str, Any]:
    """An archived observation as the cold store keeps it."""
    return {
        "id": make_id(NodeKind.OBSERVATION, row.id),
        "stamp": row.stamp,
        "layer": row.layer,
        "source_type": row.source_type,
        "position": [row.x, row.y, row.z] if row.x is not None else None,
        "frame_id": row.frame_id,
        "text": row.text,
        "confidence": row.confidence,
        "episode_id": make_id(NodeKind.EPISODE, row.episode_id) if row.episode_id is not None else None,
        "gist_id": make_id(NodeKind.GIST, row.gist_id) if row.gist_id is not None else None,
        "value": row.value,
        "metadata": row.metadata,
        "archived_at": archived_at,
    }
