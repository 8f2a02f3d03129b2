"""Gists: clusters of observations turned into summaries, written in short transactions.

``TimeWindowConsolidator`` runs on the consolidation worker. It reads only
what is new since the last run (see ``state.py``), clusters it by place and
time (``clustering.py``), summarises each cluster (LLM or fallback), embeds
the summaries in one batch and writes them a few gists per transaction, so
the writer lock is never held long and ingestion keeps flowing.

Body readings (source_type 'interoception') are clustered with perception,
because they were taken during the same visit, but a gist is a perception
answer: its text, layers, source count and embedding come from perception
rows only. The cluster's readings are linked to the gist (``gist_id``,
promoted and archived with it) and kept as a compact digest in its metadata
(``{"body": {"battery": "54%→44%"}}``). A cluster of body readings alone
makes no gist at all: its readings are promoted to long_term without one
(they age into the cold store like any other) and stay reachable through
body_status, the only door to the robot's own state.
"""

from __future__ import annotations

import functools
import logging
import operator
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar

import numpy as np

from emem_ros.consolidation.clustering import ClusterParams, cluster_stream
from emem_ros.consolidation.offload import MaintenanceProcess, planned
from emem_ros.consolidation.rows import LayerKind, ObsRow, RowMemo, classify_layers, fetch_rows, in_list
from emem_ros.consolidation.state import (
    CONSOLIDATION_MARKS,
    Marks,
    read_episode_queue,
    read_marks,
    write_episode_queue,
    write_marks,
)
from emem_ros.consolidation.summaries import SummaryWriter, body_digest, digest
from emem_ros.core.config import MemoryConfig
from emem_ros.core.types import EpisodeStatus, NodeKind, Position, SourceType, Tier, make_id
from emem_ros.storage.budget import TransactionBudget
from emem_ros.storage.sqlutil import chunked

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)
Item = TypeVar("Item")
"""What ``write_gists`` drafts from: a cluster's rows, or a draft already made."""

GISTS_PER_TRANSACTION = 32
ROWS_PER_RUN = 100_000
"""Rows read per step of a run; a bigger backlog is worked through in steps."""
_INTEROCEPTION = SourceType.INTEROCEPTION.value
_EPISODE = operator.attrgetter("episode_id")
_STAMP, _X, _Y = operator.attrgetter("stamp"), operator.attrgetter("x"), operator.attrgetter("y")


@dataclass
class GistDraft:
    observation_ids: list[int]
    """The perception rows the text summarises (the gist's source_count)."""
    text: str
    centroid: Optional[Position]
    radius: float
    time_start: float
    time_end: float
    layers: list[str]
    episode_id: Optional[int]
    metadata: dict[str, Any]
    reading_ids: list[int] = field(default_factory=list)
    """Body readings of the cluster: linked to the gist and promoted with it, never summarised in its text."""

    @property
    def body_only(self) -> bool:
        """A cluster of body readings alone: promoted without a gist (see the module doc)."""
        return not self.observation_ids


@dataclass
class WriteOutcome:
    gist_ids: list[int] = field(default_factory=list)
    observations: int = 0
    """Rows promoted to long_term (perception and body readings)."""
    readings: int = 0
    """Body readings among them."""
    body_only: int = 0
    """Clusters of body readings alone, promoted without a gist."""
    completed: bool = True
    transactions: int = 0


@dataclass
class ConsolidationReport:
    gist_ids: list[str] = field(default_factory=list)
    observations: int = 0
    candidates: int = 0
    noise: int = 0
    deferred: int = 0
    readings: int = 0
    """Body readings among ``observations``: promoted and linked, never in a gist's text."""
    body_only: int = 0
    """Clusters that held only body readings: promoted without a gist."""
    llm_summaries: int = 0
    fallback_summaries: int = 0
    seconds: float = 0.0
    complete: bool = True
    """False when the run was stopped (shutdown) before the end; the rest is done next run."""

    @property
    def gists(self) -> int:
        return len(self.gist_ids)


def cluster_params(config: MemoryConfig, *, min_samples: Optional[int] = None) -> ClusterParams:
    return ClusterParams(
        eps=float(config.consolidation_spatial_eps),
        min_samples=int(config.consolidation_min_samples if min_samples is None else min_samples),
        time_gap=float(config.consolidation_time_gap),
        max_extent=float(config.consolidation_max_extent),
        max_size=int(config.consolidation_max_size),
        min_dwell=float(config.consolidation_min_dwell),
        max_duration=float(config.consolidation_window),
        max_open=float(config.consolidation_window) if min_samples is None else None,  # time-window pass only
    )


def geometry(rows: Sequence[ObsRow]) -> tuple[Optional[Position], float]:
    """Centroid of the positioned rows and the planar radius that covers them."""
    x = np.array([r.x for r in rows], dtype=np.float64)  # None -> NaN (stored positions are finite)
    y = np.array([r.y for r in rows], dtype=np.float64)
    placed = ~(np.isnan(x) | np.isnan(y))
    if not placed.any():
        return None, 0.0
    points = np.column_stack((x, y, [r.z or 0.0 for r in rows]))[placed]
    center = points.mean(axis=0)
    radius = float(np.sqrt(((points[:, :2] - center[:2]) ** 2).sum(axis=1)).max())
    return (float(center[0]), float(center[1]), float(center[2])), radius


def clusters_of(rows: Sequence[ObsRow], params: ClusterParams, per_layer: bool,
                horizon: Optional[float]) -> tuple[list[list[ObsRow]], list[ObsRow], list[ObsRow], Optional[float]]:
    """(clusters, noise, deferred, deferred_from) over all layers together or each layer alone."""
    groups: list[Sequence[ObsRow]]
    if per_layer:
        by_layer: dict[str, list[ObsRow]] = {}
        for row in rows:
            by_layer.setdefault(row.layer, []).append(row)
        groups = list(by_layer.values())
    else:
        groups = [rows]
    clusters: list[list[ObsRow]] = []
    noise: list[ObsRow] = []
    deferred: list[ObsRow] = []
    deferred_from: Optional[float] = None
    for group in groups:
        result = cluster_stream(list(map(_STAMP, group)), list(map(_X, group)), list(map(_Y, group)),
                                params, horizon)
        clusters.extend([group[i] for i in c] for c in result.clusters)
        noise.extend(group[i] for i in result.noise)
        deferred.extend(group[i] for i in result.deferred)
        if result.deferred_from is not None:
            deferred_from = result.deferred_from if deferred_from is None else min(deferred_from,
                                                                                   result.deferred_from)
    clusters.sort(key=lambda c: (c[0].stamp, c[0].id))
    return clusters, noise, deferred, deferred_from


def draft_gist(rows: Sequence[ObsRow], kinds: dict[str, LayerKind], writer: SummaryWriter, kind: str,
               episode_id: Optional[int] = None, context: str = "") -> GistDraft:
    """Geometry, time range and summary of one cluster.

    Place and time span are the visit's (all rows: the robot was there);
    text, layers and counts are what it perceived; body readings go to the
    metadata digest only. No LLM call and no summary for a body-only cluster.
    """
    perceived: list[ObsRow] = []
    readings: list[ObsRow] = []
    for row in rows:
        (readings if row.source_type == _INTEROCEPTION else perceived).append(row)
    centroid, radius = geometry(rows)
    stamps = [r.stamp for r in rows]
    start, end = min(stamps), max(stamps)
    if episode_id is None:
        episodes = set(map(_EPISODE, rows))
        episode_id = next(iter(episodes)) if len(episodes) == 1 else None
    reading_ids = [r.id for r in readings]
    if not perceived:
        return GistDraft(observation_ids=[], text="", centroid=centroid, radius=radius, time_start=start,
                         time_end=end, layers=[], episode_id=episode_id, metadata={}, reading_ids=reading_ids)
    summary = digest(perceived, kinds, centroid, start, end)
    llm_context = f"{summary.header}, {len(perceived)} observations" + (f"; {context}" if context else "")
    text, source = writer.write(summary.lines, llm_context, summary.text, prefix=summary.header)
    metadata: dict[str, Any] = {"kind": kind, "summary": source, "layer_counts": summary.counts}
    if summary.place:
        metadata["place"] = summary.place
    if readings:
        metadata["body"] = body_digest(readings)
    return GistDraft(
        observation_ids=[r.id for r in perceived], text=text, centroid=centroid, radius=radius,
        time_start=start, time_end=end, layers=sorted(summary.counts),
        episode_id=episode_id, metadata=metadata, reading_ids=reading_ids,
    )


def promote(conn: sqlite3.Connection, ids: Sequence[int], now: float, gist_id: Optional[int] = None) -> None:
    """Move rows to long_term inside the caller's transaction, linked to ``gist_id`` when given.

    The same update ``MemoryStore.add_gist`` makes for a gist's sources, so
    archival ages body readings from their promotion like everything else.
    """
    for chunk in chunked(ids):
        where, values = in_list("id", chunk)
        if gist_id is None:
            conn.execute(f"UPDATE observations SET tier=?, tier_since=? WHERE {where} AND tier != 'archived'",
                         [Tier.LONG_TERM.value, now, *values])
        else:
            conn.execute(f"UPDATE observations SET gist_id=?, tier=?, tier_since=? WHERE {where}"
                         " AND tier != 'archived'", [gist_id, Tier.LONG_TERM.value, now, *values])


def _rows(item: GistDraft) -> int:
    return len(item.observation_ids) + len(item.reading_ids)


def _parts(batch: Sequence[GistDraft], rows: int) -> list[list[GistDraft]]:
    """Consecutive drafts, each part promoting about ``rows`` observations (a gist is never split)."""
    parts: list[list[GistDraft]] = [[]]
    total = 0
    for item in batch:
        if parts[-1] and total + _rows(item) > rows:
            parts.append([])
            total = 0
        parts[-1].append(item)
        total += _rows(item)
    return parts


def write_gists(engine: "Engine", clusters: Sequence[Item], draft: Callable[[Item], GistDraft],
                now: float, stop: Optional[threading.Event] = None,
                finish: Optional[Callable[[sqlite3.Connection], None]] = None) -> WriteOutcome:
    """Summarise, embed and store clusters a few per transaction; ``finish(conn)`` runs in the last one.

    ``draft`` turns an item of ``clusters`` (rows, or a draft already made) into a ``GistDraft``.

    A transaction promotes about as many observations as ~25 ms of writer
    lock allows (``TransactionBudget``), so a question never waits long.

    Drafting (the LLM calls) and writing alternate per batch, so the writer
    lock is held only for the inserts and a stopped run keeps what it already
    summarised. Stopping early skips ``finish`` (``completed`` is False), so
    progress marks never pass unwritten work. (Writing a batch on a helper
    thread while the next is drafted does not pay: the two fight over the GIL.)
    """
    store = engine.store
    out = WriteOutcome()
    budget = TransactionBudget(first=2048)
    starts = list(range(0, len(clusters), GISTS_PER_TRANSACTION)) or [0]
    for start in starts:
        batch: list[GistDraft] = []
        for cluster in clusters[start:start + GISTS_PER_TRANSACTION]:
            if stop is not None and stop.is_set():
                out.completed = False
                return out
            batch.append(draft(cluster))
        visible = [d for d in batch if not d.body_only]
        vectors = (engine.embed_texts([d.text for d in visible]) if visible
                   else np.empty((0, store.dim), np.float32))
        ids: list[int] = []
        vector_of = {id(item): vector for item, vector in zip(visible, vectors)}
        parts = _parts(batch, budget.size)
        for number, part in enumerate(parts):  # each a short transaction (``storage/budget.py``)
            with store.write_lock:
                began = time.perf_counter()
                with store.write() as conn:
                    for item in part:
                        if item.body_only:
                            promote(conn, item.reading_ids, now)
                            continue
                        ids.append(store.add_gist(  # the readings are linked and promoted in the same statements
                            conn, text=item.text, centroid=item.centroid, radius=item.radius,
                            time_start=item.time_start, time_end=item.time_end,
                            observation_ids=item.observation_ids, layers=item.layers, embedding=vector_of[id(item)],
                            episode_id=item.episode_id, metadata=item.metadata, now=now,
                            linked_ids=item.reading_ids,
                        ))
                    if finish is not None and start == starts[-1] and number == len(parts) - 1:
                        finish(conn)
                budget.took(sum(_rows(item) for item in part), time.perf_counter() - began)
            out.transactions += 1
        if ids:
            # Old gists leave the graph first, so the new ones take their slots; a new gist already behind
            # the horizon (a backlog consolidated late) stays out of it.
            store.prune_gist_graph()
            keep = np.asarray([d.time_end for d in visible], dtype=np.float64) >= store.gist_cutoff
            store.vectors["gists"].add(np.asarray(ids, dtype=np.int64)[keep],
                                       np.asarray(vectors, dtype=np.float32)[keep])
        out.gist_ids.extend(ids)
        out.observations += sum(len(item.observation_ids) + len(item.reading_ids) for item in batch)
        out.readings += sum(len(item.reading_ids) for item in batch)
        out.body_only += sum(1 for item in batch if item.body_only)
    return out


def blocked_episodes(conn: sqlite3.Connection, pending: Sequence[int]) -> list[int]:
    """Episodes whose observations a time-window run must not touch: active or awaiting consolidation."""
    active = [r[0] for r in conn.execute("SELECT id FROM episodes WHERE status = ?", (EpisodeStatus.ACTIVE.value,))]
    return sorted(set(active) | set(pending))


class TimeWindowPlanner:
    """The reading half of time-window consolidation: a step's clusters (and their plain drafts).

    Reads from a connection alone, so the maintenance process runs it by
    itself (``offload_child.py``); ``TimeWindowConsolidator`` adds the writing.
    """

    def __init__(self, writer: SummaryWriter, rows: Optional[RowMemo] = None) -> None:
        self.writer = writer
        self.rows = rows
        """Rows an entity pass already read (shared with it; None: read everything)."""

    def plan_step(self, conn: sqlite3.Connection, config: MemoryConfig, cutoff: float, params: ClusterParams) -> "WindowStep":
        """Read the rows due and cut them into clusters (no writes); the maintenance process runs it too."""
        marks = read_marks(conn, CONSOLIDATION_MARKS)
        queue = read_episode_queue(conn)
        blocked = blocked_episodes(conn, queue.pending)
        top_id = conn.execute("SELECT COALESCE(MAX(id), 0) FROM observations").fetchone()[0]
        not_blocked, blocked_params = in_list("o.episode_id", blocked)
        base = f"o.tier = 'short_term' AND o.gist_id IS NULL AND (o.episode_id IS NULL OR NOT {not_blocked})"
        limit = max(ROWS_PER_RUN, 4 * params.max_size)

        read = functools.partial(self.rows.fetch, reader="time_window") if self.rows is not None else fetch_rows
        if marks.stamp is None:
            fresh = read(conn, f"{base} AND o.stamp < ?", [*blocked_params, cutoff], limit=limit)
        else:
            fresh = read(conn, f"{base} AND o.stamp >= ? AND o.stamp < ?",
                         [*blocked_params, marks.stamp, cutoff], limit=limit)
        limited = len(fresh) >= limit
        late: list[ObsRow] = []
        late_limited = False
        released = [e for e in queue.released if e not in blocked]
        if marks.stamp is not None:
            late = fetch_rows(conn, f"{base} AND o.id > ? AND o.stamp < ?",
                              [*blocked_params, marks.id, marks.stamp], order="o.id", limit=limit)
            late_limited = len(late) >= limit
            if late_limited:
                top_id = min(top_id, late[-1].id)  # ids above it wait for the next step
            if released:
                where, values = in_list("o.episode_id", released)
                seen = {r.id for r in late}
                late += [r for r in fetch_rows(conn, f"{base} AND {where} AND o.stamp < ?",
                                               [*blocked_params, *values, marks.stamp]) if r.id not in seen]

        horizon = fresh[-1].stamp if limited else cutoff
        per_layer = bool(config.consolidation_per_layer)
        clusters, noise, deferred, deferred_from = clusters_of(fresh, params, per_layer, horizon)
        if deferred_from is not None:
            new_stamp = deferred_from
        elif fresh:
            new_stamp = fresh[-1].stamp if limited else cutoff
        else:
            new_stamp = cutoff
        if marks.stamp is not None and limited and new_stamp <= marks.stamp:
            # A whole step is one open cluster: close it rather than loop forever.
            clusters, noise, deferred, _ = clusters_of(fresh, params, per_layer, None)
            new_stamp, deferred = fresh[-1].stamp, []
        if marks.stamp is not None:
            new_stamp = max(new_stamp, marks.stamp)
        if late:  # behind the mark: everything closes now
            late.sort(key=lambda r: (r.stamp, r.id))
            late_clusters, late_noise, _, _ = clusters_of(late, params, per_layer, None)
            clusters = sorted(clusters + late_clusters, key=lambda c: (c[0].stamp, c[0].id))
            noise += late_noise
        new_marks = Marks(stamp=new_stamp, id=max(marks.id, int(top_id)))

        return WindowStep(clusters=clusters, kinds=classify_layers([r for c in clusters for r in c]),
                          noise=len(noise), deferred=len(deferred), candidates=len(fresh) + len(late), marks=new_marks,
                          released=list(released), more=limited or late_limited)

    def plan_drafts(self, conn: sqlite3.Connection, config: MemoryConfig, cutoff: float) -> "WindowStep":
        """``plan_step`` with every cluster drafted (plain summaries): what the maintenance process returns."""
        step = self.plan_step(conn, config, cutoff, cluster_params(config))
        step.drafts = [draft_gist(rows, step.kinds, self.writer, "time_window") for rows in step.clusters]
        step.clusters, step.kinds = [], {}
        return step


class TimeWindowConsolidator(TimeWindowPlanner):
    """Old short-term observations -> gists, incrementally (see ``state.py`` for the marks)."""

    def __init__(self, engine: "Engine", writer: SummaryWriter, rows: Optional[RowMemo] = None,
                 offload: Optional[MaintenanceProcess] = None) -> None:
        super().__init__(writer, rows)
        self.engine = engine
        self.offload = offload
        """Steps read and drafted in the maintenance process (``offload.py``) when no LLM writes summaries."""

    def run(self, stop: Optional[threading.Event] = None) -> ConsolidationReport:
        started = time.perf_counter()
        report = ConsolidationReport()
        engine = self.engine
        config = engine.config
        params = cluster_params(config)
        self.writer.reset()
        llm0, fb0 = self.writer.stats.llm, self.writer.stats.fallback
        while True:
            cutoff = engine.now() - config.consolidation_window
            more = self._step(cutoff, params, report, stop)
            if not report.complete or not more:
                break
        report.llm_summaries = self.writer.stats.llm - llm0
        report.fallback_summaries = self.writer.stats.fallback - fb0
        report.seconds = time.perf_counter() - started
        if report.gist_ids:
            log.info("time-window consolidation: %d gists from %d observations (%d noise, %d deferred) in %.2f s",
                     report.gists, report.observations, report.noise, report.deferred, report.seconds)
        return report

    def _step(self, cutoff: float, params: ClusterParams, report: ConsolidationReport,
              stop: Optional[threading.Event]) -> bool:
        """One bounded step; returns True when more rows are waiting."""
        engine = self.engine
        step = self._read(cutoff, params, stop)
        report.candidates += step.candidates
        handled_released = set(step.released)

        def finish(wconn: sqlite3.Connection) -> None:
            write_marks(wconn, CONSOLIDATION_MARKS, step.marks)
            if handled_released:
                current = read_episode_queue(wconn)
                current.released = [e for e in current.released if e not in handled_released]
                write_episode_queue(wconn, current)

        if step.drafts is not None:
            outcome = write_gists(engine, step.drafts, self._drafted, engine.now(), stop, finish)
        else:
            kinds = step.kinds
            outcome = write_gists(engine, step.clusters, lambda rows: draft_gist(rows, kinds, self.writer, "time_window"),
                                  engine.now(), stop, finish)
        report.gist_ids += [make_id(NodeKind.GIST, i) for i in outcome.gist_ids]
        report.observations += outcome.observations
        report.readings += outcome.readings
        report.body_only += outcome.body_only
        report.noise += step.noise
        report.deferred = step.deferred
        if not outcome.completed:
            report.complete = False
            return False
        return step.more

    def _drafted(self, item: GistDraft) -> GistDraft:
        """A draft the maintenance process made: counted as the fallback summary it is (no LLM there)."""
        if not item.body_only:
            self.writer.stats.fallback += 1
        return item

    def _read(self, cutoff: float, params: ClusterParams, stop: Optional[threading.Event]) -> "WindowStep":
        """The next step: from the maintenance process (clusters already drafted) when no LLM writes the
        summaries (it is called from here), else read here."""
        engine = self.engine
        return planned(self.offload if self.writer.summarizer is None else None, "plan_time_window",
                       (WindowStep,), stop, "time-window consolidation",
                       lambda: self.plan_step(engine.store.reader(), engine.config, cutoff, params),
                       config=engine.config, cutoff=cutoff)

@dataclass
class WindowStep:
    """One time-window step's reading: its clusters (or their drafts) and the marks to write with them."""

    clusters: list[list[ObsRow]]
    """Row lists (empty once drafted)."""
    kinds: dict[str, LayerKind]
    noise: int
    deferred: int
    candidates: int
    marks: Marks
    released: list[int]
    more: bool
    drafts: Optional[list[GistDraft]] = None
    """The clusters as drafts, made by the maintenance process (``plan_drafts``); None: not drafted."""
