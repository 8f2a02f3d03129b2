"""Typed tool results and their compact text form for an LLM (``str(result)``).

One line per hit, the text quoted so it never blends into the metadata, times
both absolute (UTC) and relative to the memory clock, ids last so a planner
can refer back to them. Repeated sightings appear once with a count.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional

from emem_ros.consolidation.readings import fmt_level
from emem_ros.core.types import Position
from emem_ros.geometry.uncertainty import compass, degrees


# ---------------------------------------------------------------------- formatting helpers
def fmt_age(seconds: float) -> str:
    ahead = seconds < 0
    s = abs(seconds)
    if s < 2:
        return "just now"
    if s < 90:
        text = f"{s:.0f}s"
    elif s < 90 * 60:
        text = f"{s / 60:.0f}m"
    elif s < 36 * 3600:
        text = f"{s / 3600:.1f}h"
    else:
        text = f"{s / 86400:.1f}d"
    return f"in {text}" if ahead else f"{text} ago"


def fmt_time(stamp: float, now: float) -> str:
    """'10:03:05 (4m ago)'; the date is added when it is not within half a day."""
    if abs(now - stamp) < 43_200 and 0.0 <= stamp < _YEAR_10000:
        clock = _clock_of_day(stamp)
    else:
        clock = _strftime(stamp, "%H:%M:%S" if abs(now - stamp) < 43_200 else "%Y-%m-%d %H:%M")
    return f"{clock} ({fmt_age(now - stamp)})"


@functools.lru_cache(maxsize=8192)
def _strftime(stamp: float, form: str) -> str:
    """``datetime.fromtimestamp(stamp, utc).strftime(form)``, remembered: answers show the same older sightings
    (their date and minute) call after call."""
    return datetime.fromtimestamp(stamp, tz=timezone.utc).strftime(form)


_YEAR_10000 = 253_402_300_799.0


@functools.lru_cache(maxsize=8192)
def _clock_of_day(stamp: float) -> str:
    """``datetime.fromtimestamp(stamp, utc).strftime('%H:%M:%S')`` without building a datetime.

    Answers render dozens of times per call; this is the same arithmetic
    (the fraction rounded half-even to microseconds, which may carry into
    the next second) at a fraction of the cost. Non-negative stamps only.
    """
    fraction, whole = math.modf(stamp)
    seconds = int(whole) + (1 if round(fraction * 1e6) >= 1_000_000 else 0)
    day = seconds % 86_400
    return f"{day // 3600:02d}:{day // 60 % 60:02d}:{day % 60:02d}"


def fmt_clock(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def fmt_pos(position: Optional[Position]) -> str:
    if position is None:
        return "(position unknown)"
    x, y, z = position
    if abs(z) >= 0.05:
        return f"({x:.1f}, {y:.1f}, {z:.1f})"
    return f"({x:.1f}, {y:.1f})"


def fmt_count(count: int, lower_bound: bool = False) -> str:
    return f"{count}+" if lower_bound else str(count)


@functools.lru_cache(maxsize=8192)
def quoted(text: str, limit: int = 240) -> str:
    """The text on one line, in double quotes, cut at ``limit`` (remembered: answers quote the same texts)."""
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f'"{text}"'


# ---------------------------------------------------------------------- hits
@dataclass(frozen=True)
class Hit:
    """One remembered thing: an observation group, a gist or an entity."""

    id: str
    kind: str
    """'observation', 'gist' or 'entity'."""
    text: str
    layer: Optional[str] = None
    position: Optional[Position] = None
    stamp: Optional[float] = None
    """Last seen (for a gist: the end of the time it covers)."""
    score: Optional[float] = None
    """Relevance in [0, 1] when the tool ranked by meaning."""
    episode_id: Optional[str] = None
    count: int = 1
    """Sightings collapsed into this hit (gist: observations summarised; entity: sightings)."""
    count_is_lower_bound: bool = False
    first_stamp: Optional[float] = None
    distance: Optional[float] = None
    radius: Optional[float] = None
    similarity: Optional[float] = None
    entity_type: Optional[str] = None
    layers: tuple[str, ...] = ()
    robot: Optional[str] = None
    """The robot that saw it (fleet answers only): the label then reads ``[robot2/detections]``."""

    def line(self, now: float) -> str:
        if self.kind == "gist":
            return self._gist_line(now)
        if self.kind == "entity":
            return self._entity_line(now)
        label = f"{self.robot}/{self.layer}" if self.robot and self.layer else self.robot or self.layer
        parts = [f"[{label}]" if label else "", quoted(self.text)]
        if self.count > 1 or self.count_is_lower_bound:
            parts.append(f"×{fmt_count(self.count, self.count_is_lower_bound)}")
        where = f"at {fmt_pos(self.position)}" if self.position is not None else "(no position)"
        if self.distance is not None:
            where += f" {self.distance:.1f} m away"
        parts.append(where)
        if self.stamp is not None:
            seen = "last " if self.count > 1 else ""
            parts.append(f"{seen}{fmt_time(self.stamp, now)}")
            if self.first_stamp is not None and self.count > 1 and self.stamp - self.first_stamp >= 60:
                parts.append(f"first {fmt_time(self.first_stamp, now)}")
        return " ".join(p for p in parts if p) + self._tail()

    def _gist_line(self, now: float) -> str:
        layers = "+".join(self.layers) if self.layers else "all layers"
        source = f"summary of {self.count} obs" if self.count > 0 else "summary"
        robot = f"{self.robot}: " if self.robot else ""
        parts = [f"[{robot}{source}, {layers}]", quoted(self.text, 400)]
        if self.position is not None:
            area = f" within {self.radius:.1f} m" if self.radius else ""
            parts.append(f"around {fmt_pos(self.position)}{area}")
        if self.stamp is not None:
            if self.first_stamp is not None and self.stamp - self.first_stamp >= 1:
                parts.append(f"from {fmt_time(self.first_stamp, now)} to {fmt_time(self.stamp, now)}")
            else:
                parts.append(fmt_time(self.stamp, now))
        return " ".join(parts) + self._tail()

    def _entity_line(self, now: float) -> str:
        robot = f"{self.robot}/" if self.robot else ""
        parts = [f"[{robot}entity{': ' + self.entity_type if self.entity_type else ''}]", quoted(self.text)]
        if self.position is not None:
            spread = f" ±{self.radius:.1f} m" if self.radius else ""
            parts.append(f"at {fmt_pos(self.position)}{spread}")
        if self.distance is not None:
            parts.append(f"{self.distance:.1f} m away")
        parts.append(f"seen {self.count}×")
        if self.stamp is not None:
            parts.append(f"last {fmt_time(self.stamp, now)}")
        return " ".join(parts) + self._tail()

    def _tail(self) -> str:
        refs = [self.id]
        if self.episode_id:
            refs.append(self.episode_id)
        if self.score is not None:
            refs.append(f"match {self.score:.2f}")
        return " — " + ", ".join(refs)


def numbered(hits: list[Hit], now: float, indent: str = "") -> list[str]:
    return [f"{indent}{i}. {hit.line(now)}" for i, hit in enumerate(hits, 1)]


# ---------------------------------------------------------------------- results
@dataclass
class SearchResult:
    """Hits of semantic_search, spatial_query, temporal_query, search_gists, entity_query."""

    tool: str
    summary: str
    """What was asked, in words ('"red mug" in layer detections')."""
    hits: list[Hit]
    now: float
    notes: list[str] = field(default_factory=list)
    empty: str = "Nothing found"

    def __str__(self) -> str:
        if not self.hits:
            lines = [f"{self.empty} for {self.summary}." if self.summary else f"{self.empty}."]
        else:
            noun = "result" if len(self.hits) == 1 else "results"
            lines = [f"{len(self.hits)} {noun} for {self.summary}:" if self.summary else f"{len(self.hits)} {noun}:"]
            lines += numbered(self.hits, self.now)
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __len__(self) -> int:
        return len(self.hits)


@dataclass(frozen=True)
class PlaceCluster:
    """Where a concept was seen: a weighted cluster of places."""

    position: Position
    radius: float
    weight: float
    """Share of all the evidence, in [0, 1]."""
    count: int
    last_stamp: float
    label: str
    """The best-matching text seen there."""
    source: str = ""
    """What placed it: 'measured', 'bearings', 'ray' or 'robot pose' (see ``tools.placement``)."""
    poses: int = 0
    """Bearings: distinct poses the rays came from."""
    robots: tuple[str, ...] = ()
    """Fleet answers: the robots whose sightings placed it."""

    def how(self) -> str:
        how = placed_by(self.source, self.poses, None)
        if self.robots:
            how = (how + "; " if how else "") + "seen by " + ", ".join(self.robots)
        return how


def placed_by(source: Optional[str], poses: int, view_range: Optional[float]) -> str:
    """A few words on what placed an answer."""
    if source == "measured":
        return "measured 3-D positions"
    if source == "bearings":
        return f"bearings from {poses} poses"
    if source == "ray":
        return "one pose's bearing"
    if source == "robot pose":
        within = f" (within {view_range:g} m of it)" if view_range else ""
        return f"the robot's pose only{within}"
    if source == "entity":
        return "a remembered entity; its sightings are archived"
    return ""


@dataclass
class LocateResult:
    concept: str
    position: Optional[Position]
    radius: Optional[float]
    confidence: float
    """Probability that the thing lies within ``radius`` of ``position``: the radius' coverage under the
    evidence's model (``geometry.uncertainty.COVERAGE``) times the share of the weighted evidence that
    points here rather than to the places listed in ``elsewhere``."""
    count: int
    last_stamp: Optional[float]
    evidence: list[Hit]
    elsewhere: list[PlaceCluster]
    now: float
    notes: list[str] = field(default_factory=list)
    source: Optional[str] = None
    """What placed it: 'measured' (object positions), 'bearings' (rays from several poses, triangulated),
    'ray' (one pose's direction: ``segment``), 'robot pose' (where the robot stood, within ``view_range``)."""
    poses: int = 0
    """Bearings: distinct poses whose rays meet at ``position``."""
    segment: Any = None
    """Seen from one pose only (``source`` 'ray'): ``geometry.uncertainty.Segment`` (origin, azimuth, range
    interval); ``position`` and ``radius`` are then the circle around that interval."""
    view_range: Optional[float] = None

    @property
    def found(self) -> bool:
        return self.position is not None

    def __str__(self) -> str:
        if self.position is None:
            lines = [f"Could not locate {quoted(self.concept)}: no remembered observation of it has a position."]
            if self.evidence:
                lines.append("Matching memories without a usable position:")
                lines += numbered(self.evidence, self.now, "  ")
        else:
            seen = (f"{self.count} sighting{'s' if self.count != 1 else ''}"
                    + (f", last {fmt_time(self.last_stamp, self.now)}" if self.last_stamp is not None else ""))
            if self.segment is not None:
                seg = self.segment
                lines = [
                    f"{quoted(self.concept)} was seen from one spot only: from ({seg.origin[0]:.1f}, "
                    f"{seg.origin[1]:.1f}) looking {degrees(seg.azimuth)}° ({compass(seg.azimuth)}), "
                    f"{seg.near:.1f}-{seg.far:.1f} m away; that is within {self.radius:.1f} m of "
                    f"{fmt_pos(self.position)} (confidence {self.confidence:.2f}; {seen})"]
            else:
                lines = [f"{quoted(self.concept)} is most likely at {fmt_pos(self.position)}, within "
                         f"{self.radius:.1f} m (confidence {self.confidence:.2f}; {seen})"]
            lines.append("Evidence:")
            lines += numbered(self.evidence, self.now, "  ")
            if self.elsewhere:
                lines.append("Also seen elsewhere:")
                for place in self.elsewhere:
                    how = place.how()
                    lines.append(
                        f"  - {fmt_pos(place.position)} within {place.radius:.1f} m: {quoted(place.label)}"
                        f" ×{place.count}, last {fmt_time(place.last_stamp, self.now)}"
                        f" (weight {place.weight:.2f}{'; ' + how if how else ''})")
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass
class RecallResult:
    query: str
    center: Optional[Position]
    radius: Optional[float]
    matches: list[Hit]
    nearby: list[Hit]
    gists: list[Hit]
    entities: list[Hit]
    now: float
    notes: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)
    """Notes (MemFS files) pinned near the place or to the entities found."""

    def __str__(self) -> str:
        if not (self.matches or self.nearby or self.gists or self.entities or self.pinned):
            return "\n".join([f"Nothing remembered about {quoted(self.query)}."] + [f"Note: {n}" for n in self.notes])
        if self.center is not None:
            lines = [f"About {quoted(self.query)}: it is around {fmt_pos(self.center)};"
                     f" everything within {self.radius:.1f} m of there:"]
        else:
            lines = [f"About {quoted(self.query)} (no position known, so no surroundings):"]
        for title, hits in (("Best matches", self.matches), ("Nearby", self.nearby),
                            ("Summaries", self.gists), ("Entities", self.entities)):
            if hits:
                lines.append(f"{title}:")
                lines += numbered(hits, self.now, "  ")
        if self.pinned:
            lines.append("Notes pinned here (your notes; fs_read to open):")
            lines += [f"  - {p}" for p in self.pinned]
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class BodyReading:
    layer: str
    text: str
    value: Optional[float]
    stamp: float
    obs_id: str
    trend: Optional[str] = None
    """E.g. '-12% over 10 min' (None when there is no earlier reading)."""

    def line(self, now: float) -> str:
        trend = f" ({self.trend})" if self.trend else ""
        return f"[{self.layer}] {self.text}{trend}, {fmt_time(self.stamp, now)} — {self.obs_id}"


@dataclass(frozen=True)
class BodyCrossing:
    """One time a body layer's readings crossed a level (body_status with below/above)."""

    layer: str
    direction: str
    """'below' (fell below) or 'above' (rose above)."""
    threshold: float
    """In the units body_status shows (30 for 30 %)."""
    unit: str
    after: BodyReading
    """The first reading past the threshold."""
    after_level: float
    before: Optional[BodyReading] = None
    """The last reading on the other side; None when the layer's first reading was already past."""
    before_level: Optional[float] = None

    def _level(self, level: float) -> str:
        return fmt_level(level, self.unit)

    def line(self, now: float) -> str:
        limit = self._level(self.threshold)
        if self.before is None or self.before_level is None:
            return (f"[{self.layer}] already {self.direction} {limit} at its first reading: "
                    f"{self._level(self.after_level)} at {fmt_time(self.after.stamp, now)} — {self.after.obs_id}")
        verb = "fell below" if self.direction == "below" else "rose above"
        return (f"[{self.layer}] {verb} {limit}: {self._level(self.after_level)} at "
                f"{fmt_time(self.after.stamp, now)}, after {self._level(self.before_level)} at "
                f"{fmt_time(self.before.stamp, now)} — {self.after.obs_id}")


@dataclass
class BodyStatusResult:
    readings: list[BodyReading]
    now: float
    notes: list[str] = field(default_factory=list)
    at_time: Optional[float] = None
    """Set when the readings are as of a past time rather than the latest."""
    crossings: list[BodyCrossing] = field(default_factory=list)
    """Newest first; filled by a below/above search (``readings`` is then empty)."""
    search: Optional[str] = None
    """What a below/above search looked for, in words ('below 30 after 10:00:00 (2h ago)')."""

    def __str__(self) -> str:
        if self.search is not None:
            if self.crossings:
                noun = "crossing" if len(self.crossings) == 1 else "crossings"
                lines = [f"{len(self.crossings)} body {noun} {self.search}, newest first:"]
                lines += [f"  {i}. {c.line(self.now)}" for i, c in enumerate(self.crossings, 1)]
            else:
                lines = [f"No body reading crossed {self.search}."]
        elif not self.readings:
            lines = ["No body readings are stored." if self.at_time is None
                     else f"No body readings at or before {fmt_time(self.at_time, self.now)}."]
        else:
            head = "Body status:" if self.at_time is None else f"Body status at {fmt_time(self.at_time, self.now)}:"
            lines = [head] + [f"  {r.line(self.now)}" for r in self.readings]
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class EpisodeReport:
    id: str
    name: str
    status: str
    start: float
    end: Optional[float]
    parent_id: Optional[str]
    summary: str
    goal: Optional[str]
    result: Optional[str]
    reflection: Optional[str]
    success: Optional[bool]
    observations: int
    top_texts: list[tuple[str, int]]
    gists: list[Hit]
    subtasks: list[str] = field(default_factory=list)

    def lines(self, now: float) -> list[str]:
        outcome = {True: "succeeded", False: "failed", None: None}[self.success]
        span = f"started {fmt_time(self.start, now)}"
        if self.end is not None:
            span += f", ended {fmt_time(self.end, now)} ({fmt_age(self.end - self.start).replace(' ago', '')})"
        head = f"{self.id} {quoted(self.name)} [{self.status}{', ' + outcome if outcome else ''}] {span}"
        if self.parent_id:
            head += f", subtask of {self.parent_id}"
        out = [head]
        for label, value in (("goal", self.goal), ("summary", self.summary), ("result", self.result),
                             ("reflection", self.reflection)):
            if value:
                out.append(f"  {label}: {value}")
        if self.subtasks:
            out.append(f"  subtasks: {', '.join(self.subtasks)}")
        out.append(f"  {self.observations} observation{'s' if self.observations != 1 else ''}"
                   + (": most seen " + ", ".join(f"{quoted(t, 60)} ×{c}" for t, c in self.top_texts)
                      if self.top_texts else ""))
        for hit in self.gists:
            out.append(f"  - {hit.line(now)}")
        return out


@dataclass
class EpisodeSummaryResult:
    episodes: list[EpisodeReport]
    now: float
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = ["No episodes found."] if not self.episodes else []
        for report in self.episodes:
            lines += report.lines(self.now)
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass
class ContextResult:
    position: Optional[Position]
    position_source: str
    radius: float
    minutes: float
    nearby: list[Hit]
    entities: list[Hit]
    gists: list[Hit]
    recent: list[Hit]
    body: Optional[BodyStatusResult]
    active_episode: Optional[str]
    now: float
    pinned: list[str] = field(default_factory=list)
    """Notes (MemFS files) pinned near the robot."""

    def __str__(self) -> str:
        lines = [f"Now: {fmt_clock(self.now)}"]
        if self.position is not None:
            lines.append(f"Position: {fmt_pos(self.position)} ({self.position_source})")
        else:
            lines.append("Position: unknown (no observation with a position yet)")
        if self.active_episode:
            lines.append(f"Active episode: {self.active_episode}")
        for title, hits in ((f"Nearby (within {self.radius:g} m)", self.nearby),
                            ("Entities nearby", self.entities), ("Area summaries", self.gists),
                            (f"Recent (last {self.minutes:g} min)", self.recent)):
            if hits:
                lines.append(f"{title}:")
                lines += numbered(hits, self.now, "  ")
        if self.position is not None and not (self.nearby or self.entities or self.gists):
            lines.append(f"Nothing remembered within {self.radius:g} m.")
        if self.pinned:
            lines.append("Notes pinned here (your notes; fs_read to open):")
            lines += [f"  - {p}" for p in self.pinned]
        if not self.recent:
            lines.append(f"Nothing observed in the last {self.minutes:g} min.")
        if self.body is not None and self.body.readings:
            lines.append(str(self.body))
        return "\n".join(lines)


@dataclass(frozen=True)
class ActionResult:
    """Outcome of a write action (store_specific_memory, start_episode, end_episode)."""

    action: str
    ok: bool
    message: str
    id: Optional[str] = None

    def __str__(self) -> str:
        return self.message
