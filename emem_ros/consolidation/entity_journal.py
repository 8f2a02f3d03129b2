"""An entity step's writes, committed in short transactions and resumable after a crash.

Why a journal: an entity step adds to counts (an entity's ``sightings`` and
running moments, OBSERVED_IN and COOCCURS_WITH edge weights). Written in one
transaction it held the writer lock 0.2-1.2 s under load, and every question
that had to flush waited as long. Split naively, a crash between parts would
make the resumed step read the same observations again and add them twice.

So a step is first *planned* (every statement's values worked out, entity rows
as absolute values), then applied in parts of about ``storage/budget.py``'s
25 ms each. When the plan does not fit in one part, its first transaction
stores it in ``meta`` (``entities.pending``), and every part records in the
same transaction how many statements are committed and the numbers new
entities got (``entities.progress``). The last part writes the step's marks
and drops both. A run that finds a pending plan (after a crash) applies what
is left of it before reading anything new: each statement is committed
exactly once, and the result equals an uninterrupted run's. A stop request
does not leave a plan half done (a shutdown finishes it: a few short parts);
between parts the step pauses while a question runs.

Other writers may commit between parts (a forget): edges are written only to
observations and entities that still exist then.

Statements run in plan order: entity rows first (new ones numbered by their
INSERT), then OBSERVED_IN edges, then COOCCURS_WITH edges (stored once per
pair, ``src`` the lower entity number).
"""

from __future__ import annotations

import base64
import json
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from emem_ros.consolidation.state import (
    ENTITY_MARKS,
    ENTITY_PENDING,
    ENTITY_PROGRESS,
    Marks,
    drop_value,
    read_value,
    write_marks,
    write_value,
)
from emem_ros.core.types import EdgeKind, NodeKind, make_id
from emem_ros.storage.budget import TransactionBudget
from emem_ros.storage.sqlutil import chunked, inserted_id, marks

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.storage.store import MemoryStore

log = logging.getLogger(__name__)

EDGE_SQL = (
    "INSERT INTO edges(kind, src, dst, weight, updated) VALUES(?,?,?,?,?)"
    " ON CONFLICT(kind, src, dst) DO UPDATE SET weight = weight + excluded.weight, updated = excluded.updated"
)
INSERT_SQL = (
    "INSERT INTO entities(name, entity_type, x, y, z, spread, first_seen, last_seen, sightings,"
    " confidence, layer, metadata, embedding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
UPDATE_SQL = (
    "UPDATE entities SET x=?, y=?, z=?, spread=?, first_seen=?, last_seen=?, sightings=?,"
    " confidence=?, metadata=? WHERE id=?"
)

JOURNAL_SQL = "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)"


@dataclass
class EntityPlan:
    """A step's writes. ``entities`` rows: [key, number or None, name, entity_type, x, y, z, spread, first,
    last, sightings, confidence, layer, metadata json, embedding (base64 float32) or None]; a key is the
    entity's number, or negative for one made in this step. ``observed``: [key, observation number, count];
    ``pairs``: [key, key, count]."""

    marks: Marks
    now: float
    entities: list[list[Any]] = field(default_factory=list)
    observed: list[list[Any]] = field(default_factory=list)
    pairs: list[list[Any]] = field(default_factory=list)

    @property
    def statements(self) -> int:
        return len(self.entities) + len(self.observed) + len(self.pairs)

    def to_json(self) -> dict[str, Any]:
        return {"marks": {"stamp": self.marks.stamp, "id": self.marks.id}, "now": self.now,
                "entities": self.entities, "observed": self.observed, "pairs": self.pairs}

    @classmethod
    def from_json(cls, value: Any) -> Optional["EntityPlan"]:
        if not isinstance(value, dict) or not isinstance(value.get("marks"), dict):
            return None
        marks = value["marks"]
        stamp = marks.get("stamp")
        return cls(Marks(stamp=float(stamp) if isinstance(stamp, (int, float)) else None, id=int(marks.get("id") or 0)),
                   float(value.get("now") or 0.0), list(value.get("entities") or []),
                   list(value.get("observed") or []), list(value.get("pairs") or []))


def encode_vector(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")


@dataclass
class Progress:
    """How many of a plan's statements are committed, and the numbers its new entities got."""

    done: int = 0
    numbers: dict[int, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"done": self.done, "numbers": {str(k): v for k, v in self.numbers.items()}}

    @classmethod
    def from_json(cls, value: Any) -> "Progress":
        if not isinstance(value, dict):
            return cls()
        numbers = value.get("numbers") or {}
        return cls(int(value.get("done") or 0), {int(k): int(v) for k, v in numbers.items()})


@dataclass
class Applied:
    """What applying (part of) a plan did."""

    transactions: int = 0
    created: list[tuple[int, np.ndarray]] = field(default_factory=list)
    finished: bool = False


def pending(store: "MemoryStore") -> Optional[tuple[EntityPlan, Progress]]:
    """The plan a crashed step left, with its progress; None when there is none."""
    conn = store.reader()
    plan = EntityPlan.from_json(read_value(conn, ENTITY_PENDING))
    if plan is None:
        return None
    return plan, Progress.from_json(read_value(conn, ENTITY_PROGRESS))


def apply(store: "MemoryStore", plan: EntityPlan, budget: TransactionBudget, progress: Optional[Progress] = None,
          stop: Optional[threading.Event] = None,
          on_created: Optional[Callable[[list[tuple[int, np.ndarray]]], None]] = None) -> Applied:
    """Commit the plan's statements from ``progress`` on, ~``budget.target`` seconds of writer lock each.

    A fresh plan (``progress`` None) is journalled in its first transaction
    unless it fits in one. ``on_created(pairs of number, vector)`` is called
    after each commit that made entities. Between parts it checks ``stop``
    only to let a running question go first (the worker's stop event pauses).
    """
    journal = progress is not None
    progress = progress if progress is not None else Progress()
    text = None  # the plan as stored, serialised before the lock (only when it takes more than one part)
    if not journal and plan.statements > budget.size:
        text = json.dumps(plan.to_json(), separators=(",", ":"))
    out = Applied()
    total = plan.statements
    while True:
        with store.write_lock:
            began = time.perf_counter()
            start = progress.done
            end = min(total, start + budget.size)
            with store.write() as conn:
                created = _run(conn, plan, progress, start, end)
                if end >= total:
                    write_marks(conn, ENTITY_MARKS, plan.marks)
                    if journal:
                        drop_value(conn, ENTITY_PENDING)
                        drop_value(conn, ENTITY_PROGRESS)
                else:
                    if not journal:
                        text = text or json.dumps(plan.to_json(), separators=(",", ":"))
                        conn.execute(JOURNAL_SQL, (ENTITY_PENDING, text))
                        journal = True
                    write_value(conn, ENTITY_PROGRESS, {**progress.to_json(), "done": end})
            progress.done = end
            held = time.perf_counter() - began
            budget.took(end - start, held)
        log.debug("entity statements %d-%d of %d in %.1f ms%s", start, end, total, held * 1000,
                  f" (journal {len(text)} bytes)" if text and start == 0 else "")
        out.transactions += 1
        if created:
            out.created += created
            if on_created is not None:
                on_created(created)
        if end >= total:
            out.finished = True
            return out
        if stop is not None:
            stop.is_set()  # pauses while a question runs; a stop waits for the plan's end


def _run(conn: sqlite3.Connection, plan: EntityPlan, progress: Progress, start: int, end: int) -> list[tuple[int, np.ndarray]]:
    """Statements ``start`` to ``end`` (plan order) in this transaction; returns the entities it made."""
    created: list[tuple[int, np.ndarray]] = []
    n_entities, n_observed = len(plan.entities), len(plan.observed)
    numbers = progress.numbers

    def number(key: int) -> int:
        return key if key >= 0 else numbers[key]

    for row in plan.entities[start:min(end, n_entities)]:
        key, known, name, etype, x, y, z, spread, first, last, sightings, confidence, layer, meta, blob = row
        if known is None:
            vector = np.frombuffer(base64.b64decode(blob), dtype=np.float32)
            cursor = conn.execute(INSERT_SQL, (name, etype, x, y, z, spread, first, last, sightings, confidence,
                                               layer, meta, vector.tobytes()))
            numbers[int(key)] = inserted_id(cursor)
            created.append((numbers[int(key)], vector))
        else:
            conn.execute(UPDATE_SQL, (x, y, z, spread, first, last, sightings, confidence, meta, known))
    lo = max(start, n_entities) - n_entities
    hi = max(0, min(end - n_entities, n_observed))
    if hi > lo:
        kind = EdgeKind.OBSERVED_IN.value
        part = plan.observed[lo:hi]
        alive = _existing(conn, "observations", {int(oid) for _, oid, _ in part})
        entities = _existing(conn, "entities", {number(key) for key, _, _ in part})
        conn.executemany(EDGE_SQL, [
            (kind, make_id(NodeKind.ENTITY, number(key)), make_id(NodeKind.OBSERVATION, oid), float(n), plan.now)
            for key, oid, n in part if oid in alive and number(key) in entities])
    lo = max(start, n_entities + n_observed) - n_entities - n_observed
    hi = max(0, end - n_entities - n_observed)
    if hi > lo:
        kind = EdgeKind.COOCCURS_WITH.value
        rows = []
        pairs = plan.pairs[lo:hi]
        entities = _existing(conn, "entities", {number(k) for a, b, _ in pairs for k in (a, b)})
        for a, b, count in pairs:
            if number(a) not in entities or number(b) not in entities:
                continue  # forgotten since the plan was made
            first_number, second_number = sorted((number(a), number(b)))
            rows.append((kind, make_id(NodeKind.ENTITY, first_number), make_id(NodeKind.ENTITY, second_number),
                         float(count), plan.now))
        conn.executemany(EDGE_SQL, rows)
    return created


def _existing(conn: sqlite3.Connection, table: str, ids: set[int]) -> set[int]:
    """Which of these rows still exist (a forget may have committed between two parts)."""
    found: set[int] = set()
    for chunk in chunked(sorted(ids)):
        found.update(r[0] for r in conn.execute(f"SELECT id FROM {table} WHERE id IN ({marks(len(chunk))})", chunk))
    return found
