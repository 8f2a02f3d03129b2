"""Episode consolidation: an ended episode's observations become per-place gists and a summary.

``end_episode`` only records the request (``EpisodeBook.request``, one tiny
transaction) and returns; the worker does the rest. The request is durable,
so an episode whose consolidation was abandoned at shutdown is consolidated
after the next open. An episode is consolidated once: its observations get
gists (so they leave the time-window candidates), the episode gets
``consolidated = 1``, and a repeated request finds nothing left to do.

Gists never carry body readings (see ``gists.py``), but the episode summary
does get one short body line ("body: battery 80%→62%"): an episode is the
robot's own story, episode_summary is not a perception tool, and "how much
battery did the patrol take?" is a fair question about it. The line is read
from the episode's readings through the (episode, stamp) index, so a
consolidation resumed after a shutdown still has it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

from emem_ros.consolidation.gists import cluster_params, clusters_of, draft_gist, write_gists
from emem_ros.consolidation.rows import ObsRow, classify_layers, fetch_rows
from emem_ros.consolidation.state import EpisodeQueue, read_episode_queue, write_episode_queue
from emem_ros.consolidation.summaries import SummaryWriter, body_digest, body_line, format_duration, format_span
from emem_ros.core.types import Episode, NodeKind, SourceType, make_id

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)

MAX_PLACES_IN_SUMMARY = 8
BODY_ENDS = 4
"""Readings per body layer read at each end of an episode for its body line."""


@dataclass
class EpisodeReport:
    episode_id: str
    gist_ids: list[str] = field(default_factory=list)
    observations: int = 0
    readings: int = 0
    """Body readings among ``observations`` (linked to gists or promoted without one)."""
    summary: str = ""
    summary_source: str = "fallback"
    seconds: float = 0.0
    skipped: Optional[str] = None
    """Why nothing was done (already consolidated, still active, unknown episode)."""


class EpisodeBook:
    """The durable list of episodes waiting for consolidation (or released to the time window)."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine
        self._lock = threading.Lock()

    def request(self, number: int, consolidate: bool) -> None:
        with self._lock, self.engine.store.write() as conn:
            queue = read_episode_queue(conn)
            target = queue.pending if consolidate else queue.released
            if number not in target:
                target.append(number)
            write_episode_queue(conn, queue)

    def done(self, conn: sqlite3.Connection, number: int) -> None:
        """Inside the caller's transaction: the episode left the pending list."""
        queue = read_episode_queue(conn)
        if number in queue.pending:
            queue.pending.remove(number)
            write_episode_queue(conn, queue)

    def release(self, number: int) -> None:
        """Give a failing episode's observations to the time window instead."""
        with self._lock, self.engine.store.write() as conn:
            queue = read_episode_queue(conn)
            if number in queue.pending:
                queue.pending.remove(number)
            if number not in queue.released:
                queue.released.append(number)
            write_episode_queue(conn, queue)

    def snapshot(self) -> EpisodeQueue:
        return read_episode_queue(self.engine.store.reader())


class EpisodeConsolidator:
    def __init__(self, engine: "Engine", writer: SummaryWriter, book: EpisodeBook) -> None:
        self.engine = engine
        self.writer = writer
        self.book = book

    def run(self, number: int, stop: Optional[threading.Event] = None) -> EpisodeReport:
        started = time.perf_counter()
        engine, store = self.engine, self.engine.store
        report = EpisodeReport(episode_id=make_id(NodeKind.EPISODE, number))
        conn = store.reader()
        row = conn.execute("SELECT status, consolidated FROM episodes WHERE id=?", (number,)).fetchone()
        if row is None:
            report.skipped = "unknown episode"
            with store.write() as wconn:
                self.book.done(wconn, number)
            return report
        status, consolidated = row
        if status == "active":
            report.skipped = "episode is still active"
            return report
        if consolidated:
            report.skipped = "already consolidated"
            with store.write() as wconn:
                self.book.done(wconn, number)
            return report
        self.writer.reset()
        episode = store.get_episode(number)
        rows = fetch_rows(conn, "o.episode_id = ? AND o.tier = 'short_term' AND o.gist_id IS NULL", [number])
        params = cluster_params(engine.config, min_samples=1)  # every observation lands in a gist
        clusters, _, _, _ = clusters_of(rows, params, bool(engine.config.consolidation_per_layer), None)
        kinds = classify_layers(rows)
        context = _episode_context(episode)
        outcome = write_gists(
            engine, clusters,
            lambda cluster: draft_gist(cluster, kinds, self.writer, "episode", episode_id=number, context=context),
            engine.now(), stop)
        ids = outcome.gist_ids
        report.gist_ids = [make_id(NodeKind.GIST, i) for i in ids]
        report.observations = outcome.observations
        report.readings = outcome.readings
        if not outcome.completed:
            return report
        if stop is not None and stop.is_set():
            return report
        summary, source = self._summary(episode, number)
        vector = engine.embed_texts([summary])[0]
        store.set_episode_summary(number, summary, vector)
        with store.write() as wconn:
            self.book.done(wconn, number)
        report.summary, report.summary_source = summary, source
        report.seconds = time.perf_counter() - started
        log.info("episode %s consolidated: %d gists from %d observations in %.2f s", report.episode_id,
                 len(ids), report.observations, report.seconds)
        return report

    def _summary(self, episode: Episode, number: int) -> tuple[str, str]:
        return summarise_episode(self.engine, self.writer, episode, number)


def summarise_episode(engine: "Engine", writer: SummaryWriter, episode: Episode, number: int) -> tuple[str, str]:
    """(summary, 'llm' | 'fallback') from all of the episode's gists (also those of an earlier, interrupted run).

    end_episode's consolidation writes it; a forget re-writes it from what remains (forgetting/episodes.py).
    """
    conn = engine.store.reader()
    gists = conn.execute(
        "SELECT text, source_count FROM gists WHERE episode_id = ? ORDER BY time_start, id", (number,)
    ).fetchall()
    children = conn.execute(
        "SELECT name, status, success, summary FROM episodes WHERE parent_id = ? ORDER BY start, id", (number,)
    ).fetchall()
    body = episode_body_line(conn, number)
    fallback = fallback_episode_summary(episode, [g[0] for g in gists], sum(g[1] for g in gists), children,
                                        body)
    lines = [g[0] for g in gists] + [f"subtask {c[0]}: {c[3] or c[1]}" for c in children]
    if body:
        lines.append(f"robot body: {body}")
    return writer.write(lines, _episode_context(episode), fallback)


def episode_body_line(conn: sqlite3.Connection, number: int) -> str:
    """``battery 80%→62%``: each body layer's first and last readings of the episode.

    Index probes only (a few rows at each end per layer), however long the
    episode; archived readings keep their value, so the line survives them.
    """
    body = SourceType.INTEROCEPTION.value
    layers = [r[0] for r in conn.execute(
        "SELECT DISTINCT layer FROM observations WHERE episode_id = ? AND source_type = ?", (number, body))]
    rows: list[ObsRow] = []
    for layer in sorted(layers):
        where = "o.episode_id = ? AND o.layer = ? AND o.source_type = ?"
        first = fetch_rows(conn, where, [number, layer, body], limit=BODY_ENDS)
        last = fetch_rows(conn, where, [number, layer, body], order="o.stamp DESC, o.id DESC", limit=BODY_ENDS)
        seen = {r.id for r in first}
        rows += first + [r for r in reversed(last) if r.id not in seen]
    return body_line(body_digest(rows)) if rows else ""


def _episode_context(episode: Episode) -> str:
    parts = [f"episode '{episode.name}'"]
    if episode.goal:
        parts.append(f"goal: {episode.goal}")
    if episode.result:
        parts.append(f"result: {episode.result}")
    if episode.success is not None:
        parts.append("succeeded" if episode.success else "failed")
    return "; ".join(parts)


def fallback_episode_summary(episode: Episode, gist_texts: Sequence[str], observations: int,
                             children: Sequence[Sequence[Any]] = (), body: str = "") -> str:
    """``fetch mug, 10:00–10:20 (20 min): goal …; 340 observations in 3 places — …; result …``."""
    end = episode.end if episode.end is not None else episode.start
    head = f"{episode.name}, {format_span(episode.start, end)} ({format_duration(end - episode.start)})"
    parts = [head]
    if episode.goal:
        parts.append(f"goal: {episode.goal}")
    if gist_texts:
        shown = list(gist_texts[:MAX_PLACES_IN_SUMMARY])
        more = len(gist_texts) - len(shown)
        places = f"{observations} observations in {len(gist_texts)} place{'s' if len(gist_texts) != 1 else ''}"
        parts.append(places + " — " + " · ".join(shown) + (f" (+{more} more)" if more > 0 else ""))
    else:
        parts.append("no observations")
    if children:
        subtasks = ", ".join(
            f"{name} ({'succeeded' if success == 1 else 'failed' if success == 0 else status})"
            for name, status, success, _ in children)
        parts.append(f"subtasks: {subtasks}")
    if body:
        parts.append(f"body: {body}")
    if episode.result:
        parts.append(f"result: {episode.result}")
    if episode.success is not None:
        parts.append("success: yes" if episode.success else "success: no")
    if episode.reflection:
        parts.append(f"reflection: {episode.reflection}")
    return "; ".join(parts)
