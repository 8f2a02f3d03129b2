"""Observation rows as consolidation reads them, and what kind of layer they come from.

Consolidation works on tens of thousands of rows at once, so a row is a slim
slotted record with its metadata decoded only when asked for.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any, Iterable, Optional, Sequence

from emem_ros.core.types import Position, SourceType
from emem_ros.storage.sqlutil import chunked, marks

ROW_COLUMNS = (
    "o.id, o.stamp, o.layer, o.source_type, o.x, o.y, o.z, o.text_id, o.confidence,"
    " o.episode_id, o.value, o.metadata, o.frame_id, o.gist_id"
)
ROW_FROM = "observations o"

# Metadata keys that name a detection's class, best first.
_CLASS_KEYS = ("class_name", "label", "class_id", "class")
_LIST_KEYS = ("detections", "objects", "hypotheses", "results")
_NUMERIC = re.compile(r"^[+-]?\d+(\.\d+)?$")
_LABEL_WORDS = 3
_LABEL_CHARS = 40
_INTEROCEPTION = SourceType.INTEROCEPTION.value
_ODOMETRY = '"position_source":"odometry"'
_TEXT_ID = operator.itemgetter(7)  # of a raw row (ROW_COLUMNS)
_ID = operator.attrgetter("id")


@dataclass(slots=True)
class ObsRow:
    id: int
    stamp: float
    layer: str
    source_type: str
    x: Optional[float]
    y: Optional[float]
    z: Optional[float]
    text_id: Optional[int]
    text: str
    confidence: float
    episode_id: Optional[int]
    value: Optional[float]
    metadata_json: Optional[str]
    frame_id: Optional[str] = None
    gist_id: Optional[int] = None
    _metadata: Optional[dict[str, Any]] = field(default=None, repr=False)

    @property
    def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            try:
                value = json.loads(self.metadata_json) if self.metadata_json else {}
            except ValueError:
                value = {}
            self._metadata = value if isinstance(value, dict) else {}
        return self._metadata

    @property
    def position(self) -> Optional[Position]:
        if self.x is None or self.y is None:
            return None
        return (self.x, self.y, self.z or 0.0)

    @property
    def is_reading(self) -> bool:
        return self.source_type == _INTEROCEPTION

    @property
    def robot_pose(self) -> bool:
        """True when the position is the robot's (a 2-D detection placed by odometry).

        ``Memory.add_draft`` marks drafts without their own position this way;
        anything else with a position is taken as the position of what was seen.
        """
        meta = self.metadata_json
        if meta is None or '"position_source"' not in meta:
            return False
        if _ODOMETRY in meta:  # the store writes compact JSON: no need to parse
            return True
        return self.metadata.get("position_source") == "odometry"


def fetch_rows(conn: sqlite3.Connection, where: str, params: Sequence[Any] = (),
               order: str = "o.stamp, o.id", limit: Optional[int] = None) -> list[ObsRow]:
    """Rows matching a condition over ``o``; texts are looked up once per distinct text
    (robots repeat themselves, so that is far cheaper than a join per row)."""
    sql = f"SELECT {ROW_COLUMNS} FROM {ROW_FROM} WHERE {where} ORDER BY {order}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    raw = conn.execute(sql, tuple(params)).fetchall()
    text_ids = set(map(_TEXT_ID, raw))
    text_ids.discard(None)
    text_of = _texts(conn, text_ids).get  # no text (None): ""
    return [ObsRow(i, st, la, so, x, y, z, tid, text_of(tid, ""), co, ep, va, me, fr, gi)
            for i, st, la, so, x, y, z, tid, co, ep, va, me, fr, gi in raw]


class RowMemo:
    """Rows one consolidation pass read, kept for the other pass that reads mostly the same ones.

    Time-window consolidation and entity extraction both walk the new rows
    (one after the other in ``maintenance``); building tens of thousands of
    rows twice is most of their reading cost. An observation's columns never
    change after it is written except ``gist_id``, ``tier`` and, once archived,
    its text and metadata; the passes never read archived rows. So the second
    pass asks SQLite only which rows match (id, gist_id, and stamp and text_id
    as a check), reuses the rows the first one read and builds the others.

    The rows held are those of the latest pass that read plainly (its
    ``reader`` name), up to ``capacity`` of its newest; a pass never reuses
    its own rows (its steps move forward). A read that starts outside what is
    held, or is mostly new rows (a backlog bigger than the memo), is one plain
    read instead. Used from the consolidation worker only (a lock guards it
    anyway).
    """

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._rows: dict[int, ObsRow] = {}
        self._owner: Optional[str] = None
        self._consumed = False
        self._lock = threading.Lock()
        self.reused = 0
        """Rows served from the memo so far (for tests and logs)."""

    def clear(self) -> None:
        with self._lock:
            self._rows, self._owner, self._consumed = {}, None, False

    def __len__(self) -> int:
        return len(self._rows)

    def fetch(self, conn: sqlite3.Connection, where: str, params: Sequence[Any] = (),
              order: str = "o.stamp, o.id", limit: Optional[int] = None, *, reader: str = "") -> list[ObsRow]:
        """``fetch_rows`` (the same rows in the same order), for the pass named ``reader``."""
        with self._lock:
            if reader == self._owner or not self._rows:
                if reader != self._owner or self._consumed:  # a new round: hold this pass's rows only
                    self._rows, self._owner, self._consumed = {}, reader, False
                rows = fetch_rows(conn, where, params, order, limit)
                self._keep(rows)
                return rows
            self._consumed = True
            return self._reuse(conn, where, params, order, limit)

    def _reuse(self, conn: sqlite3.Connection, where: str, params: Sequence[Any], order: str,
               limit: Optional[int]) -> list[ObsRow]:
        held = self._rows
        first = conn.execute(f"SELECT o.id FROM {ROW_FROM} WHERE {where} ORDER BY {order} LIMIT 1",
                             tuple(params)).fetchone()
        if first is None or first[0] not in held:  # a stretch the memo does not hold: one plain read
            return fetch_rows(conn, where, params, order, limit)
        sql = f"SELECT o.id, o.gist_id, o.stamp, o.text_id FROM {ROW_FROM} WHERE {where} ORDER BY {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        keys = conn.execute(sql, tuple(params)).fetchall()
        out: list[Optional[ObsRow]] = []
        missing: list[int] = []
        for obs_id, gist_id, stamp, text_id in keys:
            row = held.get(obs_id)
            if row is None or row.stamp != stamp or row.text_id != text_id:
                missing.append(obs_id)
                out.append(None)  # read below
                continue
            if row.gist_id != gist_id:
                row.gist_id = gist_id
            out.append(row)
        if 2 * len(missing) > len(keys):  # mostly new rows: one range read beats many id lookups
            return fetch_rows(conn, where, params, order, limit)
        if missing:
            built: dict[int, ObsRow] = {}
            for chunk in chunked(missing):
                clause, values = in_list("o.id", chunk)
                built.update((r.id, r) for r in fetch_rows(conn, clause, values, order="o.id"))
            # a row gone between the two reads (archived meanwhile) is left out: as if read a moment later
            out = [row if row is not None else built.get(key[0]) for row, key in zip(out, keys)]
        self.reused += len(keys) - len(missing)
        return [row for row in out if row is not None]

    def _keep(self, rows: Sequence[ObsRow]) -> None:
        held = self._rows
        if len(rows) >= self.capacity:
            held.clear()
            rows = rows[len(rows) - self.capacity:]
        held.update(zip(map(_ID, rows), rows))
        excess = len(held) - self.capacity
        if excess > 0:  # the oldest read go first
            for obs_id in list(itertools.islice(held, excess)):
                del held[obs_id]


def _texts(conn: sqlite3.Connection, ids: set[int]) -> dict[int, str]:
    out: dict[int, str] = {}
    ordered = sorted(ids)
    for chunk in chunked(ordered):
        out.update(conn.execute(f"SELECT id, text FROM texts WHERE id IN ({marks(len(chunk))})", chunk))
    return out


def in_list(column: str, values: Iterable[int]) -> tuple[str, list[int]]:
    """``column IN (?, ...)`` with its parameters; an empty list matches nothing."""
    values = [int(v) for v in values]
    if not values:
        return "0", []
    return f"{column} IN ({marks(len(values))})", values


# ---------------------------------------------------------------------- labels
def is_short_label(text: str) -> bool:
    """A class name ("red mug"), not a sentence ("a kitchen with a red mug on the table")."""
    text = text.strip()
    if not text or len(text) > _LABEL_CHARS or any(c in text for c in ",.:;!?()[]{}=\n"):
        return False
    words = text.split()
    return len(words) <= _LABEL_WORDS and not any(any(ch.isdigit() for ch in w) for w in words)


def _class_name(meta: dict[str, Any], fallback: str) -> Optional[str]:
    for key in _CLASS_KEYS:
        value = meta.get(key)
        if isinstance(value, str) and value.strip():
            value = value.strip()
            if _NUMERIC.match(value):  # a dataset index ("47"): the text names it better
                return fallback if is_short_label(fallback) else None
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return fallback if is_short_label(fallback) else None
    return None


def detection_labels(row: ObsRow) -> list[str]:
    """Class names a detection observation names directly (no LLM needed).

    Accepts metadata ``class_id`` / ``class_name`` / ``label``, a list of
    detections under ``detections`` (each with one of those keys), or a text
    that is itself a short label or a comma list of them ("chair, table").
    """
    return list(labels_of(row.text, row.metadata_json))


@lru_cache(maxsize=4096)
def labels_of(text: str, metadata_json: Optional[str]) -> tuple[str, ...]:
    """Cached on the raw strings: a robot sends the same detection again and again.

    Bounded small: a detection's metadata usually carries its score or bearing, so most keys are
    unique and a big cache only holds a copy of the history's metadata (65,536 of them held
    25 MB in the maintenance process of a day-long patrol, the RSS growth of issue 26)."""
    try:
        meta = json.loads(metadata_json) if metadata_json else {}
    except ValueError:
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    return tuple(_labels_from(text, meta))


def _labels_from(text: str, meta: dict[str, Any]) -> list[str]:
    if meta:
        name = _class_name(meta, text)
        if name:
            return [name.lower()]
        for key in _LIST_KEYS:
            items = meta.get(key)
            if isinstance(items, list):
                found = [_class_name(item, "") for item in items if isinstance(item, dict)]
                names = [n.lower() for n in found if n]
                if names:
                    return names
    text = listed(text)
    if is_short_label(text):
        return [text.lower()]
    if "," in text:
        parts = [p.strip() for p in text.split(",")]
        if parts and all(is_short_label(p) for p in parts):
            return [p.lower() for p in parts]
    return []


_HEAD = re.compile(r"^\s*([A-Za-z][A-Za-z ]{0,30}):\s*(\S.*)$", re.DOTALL)


def listed(text: str) -> str:
    """A detector's list without its heading: "detected: mug, stove" -> "mug, stove" (a heading is at most
    three words before a colon); anything else unchanged (stripped)."""
    found = _HEAD.match(text)
    if found is not None and len(found.group(1).split()) <= _LABEL_WORDS:
        return found.group(2).strip()
    return text.strip()


def has_class_metadata(row: ObsRow) -> bool:
    return bool(row.metadata_json) and _names_classes(row.metadata_json)


@lru_cache(maxsize=4096)
def _names_classes(metadata_json: str) -> bool:
    """Cached on the raw string, like ``labels_of``."""
    try:
        meta = json.loads(metadata_json)
    except ValueError:
        return False
    if not isinstance(meta, dict):
        return False
    return any(k in meta for k in _CLASS_KEYS) or any(isinstance(meta.get(k), list) for k in _LIST_KEYS)


class LayerKind(str, Enum):
    LABELS = "labels"      # detections: each observation names classes
    TEXT = "text"          # free text: scene descriptions, speech, notes
    READINGS = "readings"  # body readings and other numbers


def classify_layer(rows: Sequence[ObsRow]) -> LayerKind:
    """Decide once per layer and run, from its rows, how to summarise it."""
    if not rows:
        return LayerKind.TEXT
    if all(r.is_reading or r.value is not None for r in rows):
        return LayerKind.READINGS
    sample = rows if len(rows) <= 512 else rows[:: max(1, len(rows) // 512)]
    with_class = sum(1 for r in sample if has_class_metadata(r))
    if with_class * 2 >= len(sample):
        return LayerKind.LABELS
    distinct = {r.text for r in sample if r.text}
    if distinct and all(detection_labels_of_text(t) for t in distinct):
        return LayerKind.LABELS
    return LayerKind.TEXT


def detection_labels_of_text(text: str) -> bool:
    text = listed(text)
    if is_short_label(text):
        return True
    return "," in text and all(is_short_label(p) for p in text.split(","))


def classify_layers(rows: Sequence[ObsRow]) -> dict[str, LayerKind]:
    by_layer: dict[str, list[ObsRow]] = {}
    for row in rows:
        by_layer.setdefault(row.layer, []).append(row)
    return {layer: classify_layer(items) for layer, items in by_layer.items()}
