"""Archival: long-term observations leave the hot graph ``archive_after_seconds`` after promotion.

Age counts from promotion to long_term (``observations.tier_since``, set by
consolidation with the memory's clock), not from the observation's stamp: a
robot that consolidates yesterday's bag today keeps it hot for the full
period. Rows are read ``archive_batch_size`` at a time, with their cold-store
records encoded (``archive_plan.py``; in the maintenance process when
``maintenance_process`` is on, see ``offload.py``), and written in parts sized
to ~25 ms of writer lock each (``storage/budget.py``: questions and flushes
never wait long); per part:

1. the raw rows are appended to the cold store and fsynced (unless
   ``archive_retention == 'drop'``) — before anything in SQLite changes;
2. one transaction turns the rows into skeletons (tier 'archived', text_id
   and metadata NULL; id, stamp, layer, position, episode and gist stay),
   lowers ``texts.refs``, and deletes each text no hot observation refers to
   any more, with its FTS entry and its places;
3. the transaction announces the texts and places it removed: after the
   commit the store drops them from its derived indexes and text cache (so
   a later flush of the same string creates a fresh text row) and tells the
   caches that read observations (``storage/events.py``) which rows left,
   so the tools' per-text catalog drops them instead of being rebuilt.

Gists and entities are untouched: gists stay searchable by vector and FTS.
Body readings keep their value; the step-2 transaction also records how each
body layer's values map to the levels its texts showed (``body.scales`` in
``state.py``), so body_status reads archived readings in the same units.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from emem_ros.consolidation.archive_plan import ArchiveBatch, plan_batch
from emem_ros.consolidation.coldstore import ColdStore
from emem_ros.consolidation.offload import MaintenanceProcess, planned
from emem_ros.consolidation.readings import display_scale, reading_level
from emem_ros.consolidation.rows import in_list
from emem_ros.consolidation.state import read_body_scales, write_body_scales
from emem_ros.core.types import Tier
from emem_ros.storage.budget import TransactionBudget
from emem_ros.storage.sqlutil import chunked

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)


@dataclass
class ArchiveReport:
    observations: int = 0
    texts_removed: int = 0
    places_removed: int = 0
    cold_records: int = 0
    cold_bytes: int = 0
    seconds: float = 0.0
    complete: bool = True
    transactions: int = 0


class Archiver:
    """``offload``: plan batches in the maintenance process (``offload.py``); None, or when it fails: here."""

    def __init__(self, engine: "Engine", cold: Optional[ColdStore], offload: Optional[MaintenanceProcess] = None) -> None:
        self.engine = engine
        self.cold = cold
        self.offload = offload
        self.budget = TransactionBudget()
        """Rows per archiving transaction, adapted to ~25 ms of writer lock (kept across runs)."""

    def run(self, stop: Optional[threading.Event] = None) -> ArchiveReport:
        started = time.perf_counter()
        report = ArchiveReport()
        engine = self.engine
        batch = max(1, int(engine.config.archive_batch_size))
        keep = engine.config.archive_retention == "keep" and self.cold is not None
        while True:
            if stop is not None and stop.is_set():
                report.complete = False
                break
            now = engine.now()
            cutoff = now - engine.config.archive_after_seconds
            rows = self._plan(cutoff, batch, now, keep, stop)
            if not rows:
                break
            start = 0
            while start < len(rows):  # in transactions of ~25 ms of writer lock each (``storage/budget.py``)
                end = min(len(rows), start + self.budget.size)
                if keep and self.cold is not None:  # durable in the cold store before SQLite changes
                    written = self.cold.append_encoded(rows.part_lines(start, end), end - start)
                    report.cold_records += written.records
                    report.cold_bytes += written.bytes
                with engine.store.write_lock:
                    began = time.perf_counter()
                    self._archive(rows, start, end, now, report)
                    self.budget.took(end - start, time.perf_counter() - began)
                start = end
                report.transactions += 1
            if len(rows) < batch:
                break
        report.seconds = time.perf_counter() - started
        if report.observations:
            log.info("archived %d observations (%d texts left the hot tables) in %.2f s",
                     report.observations, report.texts_removed, report.seconds)
        return report

    def _plan(self, cutoff: float, limit: int, now: float, encode: bool,
              stop: Optional[threading.Event]) -> ArchiveBatch:
        """The next batch, read and encoded by the maintenance process when there is one, else here."""
        return planned(self.offload, "plan_archive", (ArchiveBatch,), stop, "archival",
                       lambda: plan_batch(self.engine.store.reader(), cutoff, limit, now, encode),
                       cutoff=cutoff, limit=limit, now=now, encode=encode)

    def _archive(self, batch: ArchiveBatch, start: int, end: int, now: float, report: ArchiveReport) -> None:
        store = self.engine.store
        leaving = batch.rows[start:end]
        ids = [row[0] for row in leaving]
        refs: dict[int, int] = {}
        for _, text_id, *_rest in leaving:
            if text_id is not None:
                refs[text_id] = refs.get(text_id, 0) + 1
        readings = [r for r in batch.readings if start <= r[0] < end]
        with store.write() as conn:
            moved = 0
            for chunk in chunked(ids):
                where, values = in_list("id", chunk)
                moved += conn.execute(
                    f"UPDATE observations SET tier=?, tier_since=?, text_id=NULL, metadata=NULL"
                    f" WHERE {where} AND tier=?", [Tier.ARCHIVED.value, now, *values, Tier.LONG_TERM.value]).rowcount
            conn.executemany("UPDATE texts SET refs = refs - ? WHERE id = ?", [(n, tid) for tid, n in refs.items()])
            _remember_body_scales(conn, readings)
            dead: list[tuple[int, str]] = []
            for chunk in chunked(list(refs)):
                where, values = in_list("id", chunk)
                dead += conn.execute(f"SELECT id, text FROM texts WHERE {where} AND refs <= 0", values).fetchall()
            place_ids: list[int] = []
            if dead:
                conn.executemany("INSERT INTO texts_fts(texts_fts, rowid, text) VALUES('delete', ?, ?)", dead)
                for chunk in chunked([d[0] for d in dead]):
                    where, values = in_list("text_id", chunk)
                    place_ids += [r[0] for r in conn.execute(f"SELECT id FROM places WHERE {where}", values)]
                    conn.execute(f"DELETE FROM places WHERE {where}", values)
                    where, values = in_list("id", chunk)
                    conn.execute(f"DELETE FROM texts WHERE {where}", values)
            # Per-text views (the tools' catalog) drop exactly these rows instead of rebuilding from every row
            # (a rebuild scans the archived skeletons too: it grew with the history, issue 26). Only when every
            # planned row moved: otherwise they rebuild.
            store.announce(removed_texts=dead, removed_places=place_ids, reshaped=True,
                           removed_observations=leaving if moved == len(ids) else (), described=moved == len(ids))
        report.observations += len(ids)
        report.texts_removed += len(dead)
        report.places_removed += len(place_ids)


def _remember_body_scales(conn: sqlite3.Connection, readings: list[tuple[int, str, str, Optional[float]]]) -> None:
    """Inside the archiving transaction: the value-to-shown-level scale of each body layer archived.

    ``readings``: (row index, layer, text, value) of the part's body readings with a text, in row order.
    """
    samples: dict[str, list[tuple[str, Optional[float]]]] = {}
    for _, layer, text, value in readings:
        if len(samples.setdefault(layer, [])) < 32:
            samples[layer].append((text, value))
    if not samples:
        return
    known = read_body_scales(conn)
    changed = False
    for layer, pairs in samples.items():
        scale = display_scale(pairs)
        if scale is None:
            continue
        units = Counter(level[1] for level in (reading_level(t) for t, _ in pairs) if level is not None)
        entry = {"scale": scale, "unit": units.most_common(1)[0][0] if units else ""}
        if known.get(layer) != entry:
            known[layer] = entry
            changed = True
    if changed:
        write_body_scales(conn, known)
