"""Consolidation progress kept in the ``meta`` table, so it survives restarts.

No new tables: the operation log replays INSERT/UPDATE/DELETE statements into
a schema created by the migrations, so progress lives in ``meta`` rows
written inside the same transaction as the work they describe.

- ``consolidation.marks`` / ``entities.marks``: ``{"stamp": s, "id": i}``.
  A run has considered every eligible observation with ``stamp < s`` that
  existed when it started (``id <= i``). Noise is thereby processed once:
  it stays short_term and searchable, but is never re-clustered. Late
  arrivals (a stamp older than ``s`` written after the run, ``id > i``) are
  picked up by the next run through the id mark.
- ``body.scales``: ``{layer: {"scale": 100.0, "unit": "%"}}``, written by
  archival: how a body layer's raw values map to the levels its texts show.
  Once a layer's texts are all archived, body_status still reads archived
  readings (their values stay) in the units it shows.
- ``consolidation.episodes``: ``{"pending": [...], "released": [...]}``.
  *pending*: ended with ``consolidate=True`` and not yet consolidated (time
  window runs skip their observations; the worker consolidates them, also
  after a restart). *released*: ended with ``consolidate=False``; their
  observations, skipped while the episode was active, are handed to the next
  time-window run, then the entry is dropped.
- ``entities.pending`` / ``entities.progress``: an entity step too large for
  one short transaction (``entity_journal.py``): its planned writes, and how
  many of them are committed (with the numbers new entities got). A resumed
  run finishes the plan before reading anything new, so additive counts
  (sightings, edge weights) are applied exactly once.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Optional

CONSOLIDATION_MARKS = "consolidation.marks"
ENTITY_MARKS = "entities.marks"
ENTITY_PENDING = "entities.pending"
ENTITY_PROGRESS = "entities.progress"
EPISODES = "consolidation.episodes"
BODY_SCALES = "body.scales"


@dataclass
class Marks:
    stamp: Optional[float] = None
    id: int = 0


@dataclass
class EpisodeQueue:
    pending: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)


def _read(conn: sqlite3.Connection, key: str) -> Any:
    row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    if not row:
        return None
    try:
        return json.loads(row[0])
    except ValueError:
        return None


def _write(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                 (key, json.dumps(value, separators=(",", ":"))))


def read_marks(conn: sqlite3.Connection, key: str) -> Marks:
    value = _read(conn, key)
    if not isinstance(value, dict):
        return Marks()
    stamp = value.get("stamp")
    return Marks(stamp=float(stamp) if isinstance(stamp, (int, float)) else None, id=int(value.get("id") or 0))


def write_marks(conn: sqlite3.Connection, key: str, marks: Marks) -> None:
    _write(conn, key, {"stamp": marks.stamp, "id": marks.id})


def read_episode_queue(conn: sqlite3.Connection) -> EpisodeQueue:
    value = _read(conn, EPISODES)
    if not isinstance(value, dict):
        return EpisodeQueue()
    return EpisodeQueue(pending=[int(v) for v in value.get("pending") or []],
                        released=[int(v) for v in value.get("released") or []])


def write_episode_queue(conn: sqlite3.Connection, queue: EpisodeQueue) -> None:
    _write(conn, EPISODES, {"pending": sorted(set(queue.pending)), "released": sorted(set(queue.released))})


def read_body_scales(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    value = _read(conn, BODY_SCALES)
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items()
            if isinstance(v, dict) and isinstance(v.get("scale"), (int, float)) and isinstance(v.get("unit"), str)}


def write_body_scales(conn: sqlite3.Connection, scales: dict[str, dict[str, Any]]) -> None:
    _write(conn, BODY_SCALES, scales)


def read_value(conn: sqlite3.Connection, key: str) -> Any:
    """A JSON value kept in ``meta`` (None when absent or unreadable)."""
    return _read(conn, key)


def write_value(conn: sqlite3.Connection, key: str, value: Any) -> None:
    _write(conn, key, value)


def drop_value(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("DELETE FROM meta WHERE key=?", (key,))
