"""Entities: the objects a robot keeps seeing, merged across sightings.

Where sightings come from
- Detection layers name their class (metadata ``class_id`` / ``class_name`` /
  ``label``, or texts that are short labels): entities need no LLM at all.
- Free text (scene descriptions) goes through ``Summarizer.extract_entities``
  when an LLM is configured (one call per distinct text, cached: robots repeat
  themselves); without one it is skipped.

A run reads the observations written since the last one (marks in ``meta``,
see ``state.py``) and cuts them into place visits with the same clustering as
gists (all layers together). In each visit, the rows of one label form one
sighting, or several when 3-D detections put them more than
``INSTANCE_SEPARATION`` apart (two chairs at one table).

2-D versus 3-D positions
- A 2-D detection's position is the *robot's* (``position_source:
  odometry``): the object is somewhere in view, meters away.
- Anything else with a position (3-D detections, positions given by the
  caller) is the object's own position.
- A 2-D detection of a camera layer also carries its ray (``geometry.rays``):
  a visit's rays of one label are split into the objects they meet at
  (``entity_bearings.partition``: each a sighting of its own), and an entity
  keeps compact rays across visits (``entity_bearings.BearingTrack``).
An entity keeps running moments (weight, sum, sum of squares) of both kinds
apart. Its position comes from the object positions once it has any, else
from where its rays meet (``position_source: bearings``), and from where the
robot stood only until then: many vague sightings never drag a precise
estimate. Its metadata ``radius`` holds it with the probability ``locate``'s
radii do (``EntityState.radius``; for a robot-only entity: every spot within
view of where it was seen from).

Merging a sighting into a known entity requires
1. meaning: cosine of the name embeddings >= ``entity_similarity_threshold``;
2. rays, where they say something (``_bearing_verdict``): rays that point
   elsewhere than a placed entity (three or more: one or two stray boxes say
   nothing), or a triangulated spot away from it, are another object; rays
   that point at it, or meet with its rays from another pose, are it;
3. otherwise distance, which depends on what each side's position is:
   - both measured (a 3-D sighting, an entity with object positions): within
     ``INSTANCE_SEPARATION`` plus twice the entity's spread (``same_object_reach``).
     ``entity_spatial_radius`` is far too wide here: two chairs 1.5 m apart
     are two chairs, wherever the robot stood. The same mug seen through a
     doorway from the next room still merges (same spot);
   - one measured, the other where the robot stood (a 2-D sighting of a
     measured entity, or a 3-D sighting of a robot-only one): within
     ``entity_spatial_radius + VIEW_RANGE``. A 2-D detection is evidence the
     object is still there, metres from the robot; without this rule an
     object seen from several viewpoints left a trail of robot-pose entities
     (the patrol bag had three fire extinguishers);
   - both where the robot stood: within ``entity_spatial_radius`` *and* the
     same place: the robot's mean position within ``consolidation_spatial_eps``
     of a place the entity was seen from before;
4. not an entity another sighting of the same name and kind took in this
   visit: ``_sightings`` split them as separate instances, so they stay
   apart (before this rule, the second of two mugs 4 m apart in one view
   merged into the first and both became one phantom mug between them).
Among the entities that qualify: the most similar name, then a measured one,
then the nearest. Measured sightings of a run are matched before robot-pose
ones, so a 2-D detection finds the object a later visit measured.

Decided cases
- *Two mugs 4 m apart in different rooms* stay two entities: measured, they
  are farther apart than one object spreads; robot-pose only, they were seen
  from different places. Merging would average two real objects into a
  phantom between rooms (possibly inside a wall), worse for "where is the
  mug?" than a second entry. The price: an object seen only by 2-D
  detections from two places more than ``eps`` apart gets two entries, both
  at real places.
- An object that moved further than its reach (mug carried to the counter)
  becomes a second entity; the old one keeps its older ``last_seen``.
- The price of the view rule: a second object of the same class that is
  never measured, within ``entity_spatial_radius + VIEW_RANGE`` of a
  measured one, is folded into it. Its observations stay searchable by
  label, time and place; only its own entity is missing.

Edges
- OBSERVED_IN entity -> one observation per sighting (the visit's most
  confident, latest on ties), weight = how many observations of the visit
  saw it. One edge per visit rather than per detection: at 10 Hz a robot
  would otherwise add millions of edges a day that say the same thing; the
  other observations of the visit are found by label, time and place.
- COOCCURS_WITH between entities seen in the same visit, +1 per visit, stored
  once per pair in canonical order: ``src`` is the entity with the lower
  number (``cooccurrences()`` reads both columns). Never duplicated.

Only the consolidation worker writes entities (one thread: read-modify-write
of an entity's running statistics is safe). A step's writes are planned first
and committed in short transactions (``entity_journal.py``): a crash between
them never counts a sighting twice.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import operator
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np

from emem_ros.consolidation import entity_journal
from emem_ros.consolidation.entity_bearings import BearingTrack, fix_radius, partition, points_at
from emem_ros.consolidation.entity_journal import EntityPlan, Progress, encode_vector
from emem_ros.consolidation.gists import cluster_params, clusters_of, geometry
from emem_ros.consolidation.offload import MaintenanceProcess, planned
from emem_ros.consolidation.rows import LayerKind, ObsRow, RowMemo, classify_layers, detection_labels, fetch_rows
from emem_ros.consolidation.state import ENTITY_MARKS, Marks, read_marks
from emem_ros.consolidation.summaries import SummarizerLike
from emem_ros.consolidation.text_things import HOUSEHOLD, names_in
from emem_ros.core.config import MemoryConfig
from emem_ros.core.types import EdgeKind, NodeKind, SourceType, make_id
from emem_ros.engine.positions import ROBOT, SAMPLE, infer, read_declarations
from emem_ros.geometry.rays import DEFAULT_VIEW_RANGE, RaySet
from emem_ros.geometry.triangulation import Fix
from emem_ros.geometry.uncertainty import MEASURED_FLOOR, Region, circle_radius, pose_region
from emem_ros.storage.budget import TransactionBudget
from emem_ros.storage.sqlutil import chunked, marks
from emem_ros.tools.pose_places import TrackEvidence

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)

INSTANCE_SEPARATION = 1.0
"""Metres: 3-D sightings of one label in one visit farther apart than this are different objects."""
VIEW_RANGE = 2.0
"""Metres beyond ``entity_spatial_radius`` a robot-pose sighting may lie from an object's measured position
and still count as that object: 2-D detectors see household objects 6-7 m away (the patrol bag's, 6 m)."""
MAX_PLACES = 16
ROWS_PER_STEP = 20_000
TEXT_CACHE = 4096
_INTEROCEPTION = SourceType.INTEROCEPTION.value
_SIGNATURE = operator.attrgetter("source_type", "layer", "text", "metadata_json")
"""What decides a row's part in a visit's sightings (``_plan``)."""
_SKIP = "skip"
_FREE_TEXT = "free text"
Plan = str | tuple[str, ...] | list[list[ObsRow]]
"""``_SKIP``, ``_FREE_TEXT``, labels placed where the object is, or the row lists of robot-pose sightings."""
Groups = dict[tuple[str, bool], list["Sighting"]]
"""A visit's sightings by (label, precise)."""
_ID, _STAMP, _CONFIDENCE = (operator.attrgetter(name) for name in ("id", "stamp", "confidence"))
_VIEW_RANGE = re.compile(r'"view_range":\s*([0-9]+(?:\.[0-9]+)?)')


@dataclass
class EntityReport:
    observations: int = 0
    sightings: int = 0
    created: int = 0
    merged: int = 0
    observed_in: int = 0
    cooccurrences: int = 0
    llm_calls: int = 0
    deferred: int = 0
    transactions: int = 0
    seconds: float = 0.0
    complete: bool = True


@dataclass
class Moments:
    """Running weight, sum and sum of squares of positions: an exact mean and spread, mergeable."""

    w: float = 0.0
    s: np.ndarray = field(default_factory=lambda: np.zeros(3))
    q: float = 0.0

    def add(self, point: np.ndarray, weight: float = 1.0) -> None:
        self.w += weight
        self.s = self.s + weight * point
        self.q += weight * float(point @ point)

    def copy(self) -> "Moments":
        return Moments(self.w, self.s, self.q)  # ``add`` and ``merge`` replace ``s``, never change it in place

    def merge(self, other: "Moments") -> None:
        self.w += other.w
        self.s = self.s + other.s
        self.q += other.q

    @property
    def mean(self) -> Optional[np.ndarray]:
        return self.s / self.w if self.w > 0 else None

    @property
    def spread(self) -> float:
        """RMS distance from the mean."""
        if self.w <= 0:
            return 0.0
        mean = self.s / self.w
        return math.sqrt(max(0.0, self.q / self.w - float(mean @ mean)))

    def to_json(self) -> dict[str, Any]:
        return {"w": self.w, "s": [float(v) for v in self.s], "q": self.q}

    @classmethod
    def from_json(cls, value: Any) -> "Moments":
        if not isinstance(value, dict) or "w" not in value:
            return cls()
        return cls(float(value["w"]), np.asarray(value["s"], dtype=np.float64), float(value["q"]))


@dataclass
class Sighting:
    """One label seen in one visit; rows are collected first and folded once in ``close``."""

    name: str
    entity_type: Optional[str]
    layer: str
    place: Optional[tuple[float, float]]
    observation_ids: list[int] = field(default_factory=list)
    best_id: int = 0
    first: float = math.inf
    last: float = -math.inf
    confidence: float = 0.0
    moments: Moments = field(default_factory=Moments)
    precise: bool = False
    text_id: Optional[int] = None
    anchor: Optional[tuple[float, float]] = None
    """The first position added: where 3-D rows of one label are split into instances (cheap and stable)."""
    rows: list[ObsRow] = field(default_factory=list, repr=False)
    rays: Optional[RaySet] = field(default=None, repr=False)
    """Robot-pose sightings of a camera layer: their rows' rays."""
    fix: Optional[Fix] = field(default=None, repr=False)
    """Where the rays of this visit meet (``entity_bearings.partition``): a bearings-placed sighting."""
    view_range: float = 0.0
    """Robot-pose sightings: how far from the robot the thing may have been (its rows' ``view_range``)."""

    def add(self, row: ObsRow) -> None:
        if self.anchor is None and row.x is not None and row.y is not None:
            self.anchor = (row.x, row.y)
        self.rows.append(row)

    def close(self) -> "Sighting":
        """Fold the collected rows into ids, times, confidence and moments (per sighting, not per row).

        The best row is the most confident, latest on ties (the last of equal keys).
        """
        rows, self.rows = self.rows, []
        if not rows:
            return self
        self.observation_ids.extend(map(_ID, rows))
        stamps = list(map(_STAMP, rows))
        confidences = list(map(_CONFIDENCE, rows))
        self.first = min(self.first, min(stamps))
        self.last = max(self.last, max(stamps))
        self.confidence = max(self.confidence, max(confidences))
        top = max(zip(confidences, stamps))
        self.best_id = next(rows[k].id for k in range(len(rows) - 1, -1, -1)
                            if confidences[k] == top[0] and stamps[k] == top[1])
        points = [(r.x, r.y, r.z or 0.0) for r in rows if r.x is not None and r.y is not None]
        if points:
            array = np.asarray(points, dtype=np.float64)
            self.moments.merge(Moments(float(len(array)), array.sum(axis=0), float((array * array).sum())))
        if not self.precise:  # one row says it for the layer: no need to parse them all
            found = _VIEW_RANGE.search(rows[-1].metadata_json or "")
            if found:
                self.view_range = max(self.view_range, float(found.group(1)))
        return self

    @property
    def position(self) -> Optional[np.ndarray]:
        return self.moments.mean

    @property
    def placed(self) -> Optional[np.ndarray]:
        """Where the thing itself is: a measured position, the rays' meeting point, or None (robot pose only)."""
        if self.precise:
            return self.moments.mean
        if self.fix is not None:
            return self.fix.position
        return None

    @property
    def seen_from(self) -> Optional[tuple[float, float]]:
        """Where the robot stood: its mean position for 2-D rows, the visit's centroid for 3-D ones."""
        pos = self.position
        if not self.precise and pos is not None:
            return float(pos[0]), float(pos[1])
        return self.place


@dataclass
class EntityState:
    number: Optional[int]
    name: str
    entity_type: Optional[str]
    layer: str
    vector: np.ndarray
    first: float
    last: float
    sightings: int
    confidence: float
    object: Moments = field(default_factory=Moments)
    robot: Moments = field(default_factory=Moments)
    places: list[list[float]] = field(default_factory=list)
    visits: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    key: int = 0
    bearing: BearingTrack = field(default_factory=BearingTrack)
    """Compact rays of its camera sightings; they place it when no object position was measured."""
    view_range: float = 0.0
    """The farthest its robot-pose sightings may have been from the robot (0: not said)."""
    track: Optional[Region] = None
    """Robot-pose only: where the layer's track puts it (``tools.pose_places``), worked out at each write."""

    @property
    def best(self) -> Moments:
        return self.object if self.object.w > 0 else self.robot

    @property
    def bearing_fix(self) -> Optional[Fix]:
        """Where its rays meet, when no object position was measured (measured positions come first)."""
        return self.bearing.fix() if self.object.w <= 0 and len(self.bearing) else None

    @property
    def placed(self) -> Optional[np.ndarray]:
        """The thing's own position (measured, or where its rays meet); None when only robot poses place it."""
        if self.object.w > 0:
            return self.object.mean
        found = self.bearing_fix
        return np.array([found.position[0], found.position[1], found.z]) if found is not None else None

    @property
    def position(self) -> Optional[np.ndarray]:
        placed = self.placed
        if placed is None and self.track is not None and self.robot.mean is not None:
            return np.array([self.track.centre[0], self.track.centre[1], float(self.robot.mean[2])])
        return placed if placed is not None else self.robot.mean

    @property
    def spread(self) -> float:
        """RMS spread of the sightings (measured, robot), or the RMS error of the rays' meeting point."""
        if self.object.w > 0:
            return self.object.spread
        found = self.bearing_fix
        return found.sigma if found is not None else self.robot.spread

    @property
    def sources(self) -> set[str]:
        return {name for name, m in (("object", self.object), ("robot", self.robot)) if m.w > 0}

    def copy(self) -> "EntityState":
        """A copy whose changes (``absorb``, ``add_place``, ``track``) leave this one as it is."""
        return dataclasses.replace(self, object=self.object.copy(), robot=self.robot.copy(),
                                   places=[list(p) for p in self.places], extra=dict(self.extra),
                                   bearing=self.bearing.copy())

    def absorb(self, sighting: Sighting) -> None:
        self.first = min(self.first, sighting.first)
        self.last = max(self.last, sighting.last)
        self.sightings += len(sighting.observation_ids)
        self.confidence = max(self.confidence, sighting.confidence)
        (self.object if sighting.precise else self.robot).merge(sighting.moments)
        if sighting.rays is not None and len(sighting.rays):
            self.bearing.add(sighting.rays)
        self.view_range = max(self.view_range, sighting.view_range)
        self.visits += 1
        if sighting.seen_from is not None:
            self.add_place(sighting.seen_from)

    def add_place(self, place: tuple[float, float], merge_within: float = 1.0) -> None:
        for p in self.places:
            if math.hypot(p[0] - place[0], p[1] - place[1]) <= merge_within:
                return
        self.places.append([round(place[0], 3), round(place[1], 3)])
        del self.places[:-MAX_PLACES]

    def metadata(self) -> dict[str, Any]:
        meta = dict(self.extra)
        source = "mixed" if len(self.sources) > 1 else next(iter(self.sources), "none")
        found = self.bearing_fix
        if found is not None:
            source = "bearings"
        meta.update({
            "stats": {"object": self.object.to_json(), "robot": self.robot.to_json()},
            "places": self.places, "visits": self.visits, "position_source": source,
        })
        if len(self.bearing):
            meta["rays"] = self.bearing.to_json()
        if self.view_range > 0:
            meta["view_range"] = self.view_range
        radius = self.radius()
        if radius is not None:
            meta["radius"] = round(radius, 3)
        if found is not None:
            meta["poses"] = found.poses
        return meta

    def radius(self) -> Optional[float]:
        """Metres around ``position`` that hold the thing with probability ``COVERAGE`` (the models of
        ``tools.placement``): measured positions' spread over the visits plus a floor, the rays' fit, or
        every spot within view of the places it was seen from."""
        if self.object.w > 0:
            variance = self.object.spread ** 2 / 2.0 * (1.0 / max(self.visits, 1) + 0.25) + MEASURED_FLOOR ** 2
            return circle_radius(np.eye(2) * variance)
        found = self.bearing_fix
        if found is not None:
            return found.radius()
        if self.track is not None:
            return self.track.radius
        if self.places:
            return pose_region(np.asarray(self.places), self.view_range or DEFAULT_VIEW_RANGE).radius
        return None


def _state_from_row(row: Sequence[Any], vector: np.ndarray) -> EntityState:
    (number, name, etype, x, y, z, spread, first, last, sightings, confidence, layer, metadata) = row
    try:
        meta = json.loads(metadata) if metadata else {}
    except ValueError:
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    state = EntityState(number=number, name=name, entity_type=etype, layer=layer, vector=vector, first=first,
                        last=last, sightings=sightings, confidence=confidence, key=number)
    stats = meta.pop("stats", None)
    if isinstance(stats, dict):
        state.object = Moments.from_json(stats.get("object"))
        state.robot = Moments.from_json(stats.get("robot"))
    elif x is not None:  # made elsewhere (a tool, the peer's format): start the statistics from it
        p = np.array([x, y, z or 0.0])
        w = float(max(1, sightings))
        state.object = Moments(w, w * p, w * (float(p @ p) + spread * spread))
    state.places = [list(p) for p in meta.pop("places", []) if isinstance(p, (list, tuple)) and len(p) == 2]
    state.visits = int(meta.pop("visits", 0) or 0)
    state.bearing = BearingTrack.from_json(meta.pop("rays", None))
    view_range = meta.pop("view_range", 0.0)
    state.view_range = float(view_range) if isinstance(view_range, (int, float)) and view_range > 0 else 0.0
    for derived in ("position_source", "radius", "poses"):
        meta.pop(derived, None)
    state.extra = meta
    return state


class ParsedEntities:
    """Entity rows parsed once, rays fitted once: each step reloads its candidates, and most of them have not
    changed since the last step (parsing the metadata and refitting the rays grew with the history).

    A row is reused only while it is the same row, byte for byte (embedding included); ``state`` gives a
    copy, so a step's changes never reach the parsed one.
    """

    def __init__(self, limit: int = TEXT_CACHE) -> None:
        self.limit = limit
        self._parsed: dict[int, tuple[tuple[Any, ...], EntityState]] = {}

    def state(self, row: tuple[Any, ...], vector_of: Callable[[tuple[Any, ...]], np.ndarray]) -> EntityState:
        """The state of an entity row (``ENTITY_COLUMNS`` and the embedding), parsed when new or changed."""
        known = self._parsed.get(row[0])
        if known is None or known[0] != row:
            parsed = _state_from_row(row[:-1], vector_of(row))
            _ = parsed.bearing_fix  # fitted here, once for as long as the row stays the same
            if len(self._parsed) >= self.limit:
                self._parsed.clear()
            known = self._parsed[row[0]] = (row, parsed)
        return known[1].copy()

    def clear(self) -> None:
        self._parsed.clear()

    def __len__(self) -> int:
        return len(self._parsed)


def _bearing_verdict(sighting: Sighting, state: EntityState) -> Optional[bool]:
    """Whether rays say this sighting is this entity: True, False, or None (no rays to say it).

    - A triangulated sighting and a placed entity (measured, or triangulated):
      the same thing when their spots are within their radii (and one
      object's separation) of each other.
    - Rays from one pose and a placed entity: the same thing when they point
      at it (``points_at``).
    - Rays from one pose and an entity with rays from another pose: the same
      thing when all the rays meet at one spot (the entity becomes placed).
    """
    if sighting.precise:
        return None
    placed = state.placed
    if sighting.fix is not None:
        if placed is None:
            return None
        if state.object.w > 0:
            reach = INSTANCE_SEPARATION + 2.0 * state.object.spread
        else:
            reach = INSTANCE_SEPARATION + fix_radius(state.bearing_fix)
        return bool(math.dist(sighting.fix.position[:2], placed[:2]) <= reach + fix_radius(sighting.fix))
    rays = sighting.rays
    if rays is None or not len(rays):
        return None
    if placed is not None:
        radius = 2.0 * state.object.spread if state.object.w > 0 else fix_radius(state.bearing_fix)
        return points_at(rays, placed, min(radius, VIEW_RANGE))
    if len(state.bearing) and state.bearing.meets(rays) is not None:
        return True
    return None


def _by_bearings(sighting: Sighting) -> list[Sighting]:
    """A robot-pose sighting split by the objects its rays meet at (``entity_bearings.partition``)."""
    if sighting.precise or not sighting.rows:
        return [sighting]
    parts = partition(sighting.rows)
    if len(parts) == 1 and parts[0].fix is None:
        sighting.rays = parts[0].rays if len(parts[0].rays) else None
        return [sighting]
    out = []
    for part in parts:
        piece = Sighting(name=sighting.name, entity_type=sighting.entity_type, layer=sighting.layer,
                         place=sighting.place, precise=False, text_id=sighting.text_id)
        piece.rows = [sighting.rows[i] for i in part.rows]
        piece.rays = part.rays if len(part.rays) else None
        piece.fix = part.fix
        out.append(piece)
    return out


def _let_questions_go(stop: Optional[threading.Event]) -> None:
    """Pause while a question runs (the worker's stop event does, ``worker._StopEvent``): planning a step is
    pure Python, and a question sharing the interpreter with it waits. A set stop is honoured between steps."""
    if stop is not None:
        stop.is_set()


def _rank(sighting: Sighting) -> int:
    return 0 if sighting.precise else 1 if sighting.fix is not None else 2


def same_object_reach(state: EntityState, radius: float) -> float:
    """How far a measured sighting may lie from an entity's measured position and still be that object.

    As far as one view keeps two objects apart (``INSTANCE_SEPARATION``),
    widened by twice the entity's own spread (a large object's centre wanders
    with the viewpoint), never beyond ``entity_spatial_radius``. Not the whole
    radius: that is for positions where the robot stood, metres from the object.
    """
    return min(radius, INSTANCE_SEPARATION + 2.0 * state.object.spread)


def cooccurrences(conn: sqlite3.Connection, entity_number: int) -> list[tuple[str, float]]:
    """Entities seen in the same visits as this one, with how many visits, most first."""
    me = make_id(NodeKind.ENTITY, entity_number)
    kind = EdgeKind.COOCCURS_WITH.value
    rows = conn.execute(
        "SELECT dst, weight FROM edges WHERE kind = ? AND src = ?"
        " UNION ALL SELECT src, weight FROM edges WHERE kind = ? AND dst = ?", (kind, me, kind, me)).fetchall()
    return sorted(((other, float(w)) for other, w in rows), key=lambda r: (-r[1], int(r[0].split("-")[1])))


@dataclass
class SightingStep:
    """One step's reading, as plain data: its visits' sightings and the marks to write with them."""

    sightings: list[list[Sighting]]
    marks: Marks
    deferred: int
    observations: int
    more: bool
    llm_calls: int = 0


class EntityPlanner:
    """The reading half of entity extraction: a step's visits and sightings, from a read connection alone.

    No engine and no writes, so the maintenance process runs it by itself
    (``offload_child.py``); ``EntityExtractor`` adds the writing half.
    """

    def __init__(self, summarizer: Optional[SummarizerLike] = None, rows: Optional[RowMemo] = None) -> None:
        self.summarizer = summarizer
        self.rows = rows
        """Rows a time-window pass already read (shared with it; None: read everything)."""
        self._text_names: OrderedDict[str, Optional[list[str]]] = OrderedDict()
        self._row_labels: dict[tuple[str, Optional[str], str], tuple[tuple[str, ...], bool]] = {}
        """A detection's labels and whether it was placed by odometry, by (text, metadata): robots repeat."""
        self._robot_layers: dict[str, bool] = {}
        """Per layer of the step being planned: its unmarked positions are the robot's (``_meanings``)."""
        self._vocabulary: tuple[str, ...] = ()
        """Names looked for in free text when no LLM reads it (``text_things``)."""
        self._llm_failures = 0

    def forget_memos(self) -> None:
        """After a forget: drop the texts and names kept between steps (they may quote what went)."""
        self._text_names.clear()
        self._row_labels.clear()

    def plan_step(self, conn: sqlite3.Connection, config: MemoryConfig, now: float, final: bool,
                  stop: Optional[threading.Event] = None) -> Optional["SightingStep"]:
        """Read what is new since the marks, cut it into visits and those into sightings (no writes).

        Needs only a read connection, so the maintenance process runs it too
        (``offload.py``); None when nothing is new.
        """
        marks = read_marks(conn, ENTITY_MARKS)
        top_id = conn.execute("SELECT COALESCE(MAX(id), 0) FROM observations").fetchone()[0]
        base = "o.text_id IS NOT NULL AND o.tier != 'archived'"
        read = functools.partial(self.rows.fetch, reader="entities") if self.rows is not None else fetch_rows
        if marks.stamp is None:
            fresh = read(conn, base, limit=ROWS_PER_STEP)
        else:
            fresh = read(conn, f"{base} AND o.stamp >= ?", [marks.stamp], limit=ROWS_PER_STEP)
        limited = len(fresh) >= ROWS_PER_STEP
        late: list[ObsRow] = []
        late_limited = False
        if marks.stamp is not None:
            late = fetch_rows(conn, f"{base} AND o.id > ? AND o.stamp < ?", [marks.id, marks.stamp],
                              order="o.id", limit=ROWS_PER_STEP)
            late_limited = len(late) >= ROWS_PER_STEP
            if late_limited:
                top_id = min(top_id, late[-1].id)
        if not fresh and not late:
            return None
        params = cluster_params(config, min_samples=1)
        if final and not limited:
            horizon = None
        else:
            horizon = fresh[-1].stamp if limited else max(now, fresh[-1].stamp if fresh else -math.inf)
        clusters, _, deferred, deferred_from = clusters_of(fresh, params, False, horizon)
        if limited and deferred_from is not None and marks.stamp is not None and deferred_from <= marks.stamp:
            clusters, _, deferred, deferred_from = clusters_of(fresh, params, False, None)
        if late:
            late.sort(key=lambda r: (r.stamp, r.id))
            clusters += clusters_of(late, params, False, None)[0]
        new_stamp: Optional[float]
        if deferred_from is not None:
            new_stamp = deferred_from
        elif fresh:
            new_stamp = math.nextafter(fresh[-1].stamp, math.inf)
        else:
            new_stamp = marks.stamp
        if marks.stamp is not None and new_stamp is not None:
            new_stamp = max(new_stamp, marks.stamp)
        calls = EntityReport()
        rows = [r for c in clusters for r in c]
        kinds = classify_layers(rows)
        self._meanings(conn, rows, kinds)
        sightings_by_cluster = []
        for cluster in clusters:
            _let_questions_go(stop)
            sightings_by_cluster.append(self._sightings(cluster, kinds, calls))
        return SightingStep(sightings=sightings_by_cluster, marks=Marks(stamp=new_stamp, id=max(marks.id, int(top_id))),
                            deferred=len(deferred), observations=sum(len(c) for c in clusters),
                            more=limited or late_limited, llm_calls=calls.llm_calls)

    # ------------------------------------------------------------------ sightings
    def _sightings(self, rows: Sequence[ObsRow], kinds: dict[str, LayerKind], report: EntityReport) -> list[Sighting]:
        """The visit's sightings: its rows grouped by label (and instance, for 3-D rows).

        What a row contributes depends only on its kind, layer, text and
        metadata, and a robot sends the same few of those again and again; so
        it is worked out once per distinct one in the visit (``_plan``) and each
        row is only filed.
        """
        centroid, _ = geometry(rows)
        place = (centroid[0], centroid[1]) if centroid is not None else None
        groups: Groups = {}
        vague: dict[str, Sighting] = {}  # robot-pose sightings: one per label in a visit
        free_text: list[ObsRow] = []
        plans: dict[tuple[Any, ...], Plan] = {}
        for row, signature in zip(rows, map(_SIGNATURE, rows)):
            plan = plans.get(signature)
            if plan is None:
                plan = plans[signature] = self._plan(row, kinds, groups, vague, place)
            if isinstance(plan, list):  # robot-pose labels: the lists their sightings collect
                for collected in plan:
                    collected.append(row)
            elif plan is _SKIP:
                continue
            elif plan is _FREE_TEXT:
                free_text.append(row)
            elif row.x is not None:  # labels of an object placed where it is
                for label in plan:
                    self._group(groups, label, True, row, place)
            else:  # ... but this one has no position
                for label in plan:
                    self._vague(groups, vague, label, row, place).add(row)
        if free_text:
            self._text_sightings(free_text, place, groups, report)
        if len(self._row_labels) > TEXT_CACHE:
            self._row_labels.clear()
        out = [part.close() for items in groups.values() for s in items for part in _by_bearings(s)]
        out.sort(key=lambda s: (not s.precise, -len(s.observation_ids)))
        return out

    def _meanings(self, conn: sqlite3.Connection, rows: Sequence[ObsRow], kinds: dict[str, LayerKind]) -> None:
        """Per layer of the step, whether its unmarked positions are the robot's (``engine.positions``: its
        declaration, else what its rows show); and the names free text is read for when no LLM reads it."""
        declared = read_declarations(conn)
        by_layer: dict[str, list[tuple[float, Optional[float], Optional[float], Any]]] = {}
        for row in rows:
            if row.layer not in declared and row.x is not None:
                by_layer.setdefault(row.layer, []).append((row.stamp, row.x, row.y, row.text_id))
        track = sorted((r.stamp, float(r.x), float(r.y)) for r in rows if r.x is not None and r.y is not None
                       and (r.robot_pose or r.is_reading))
        robot_layers = {layer: said.position_is == ROBOT for layer, said in declared.items()}
        robot_layers.update({layer: infer(samples[-SAMPLE:], track) == ROBOT for layer, samples in by_layer.items()})
        if any(self._robot_layers.get(layer, verdict) != verdict for layer, verdict in robot_layers.items()):
            self._row_labels.clear()  # it remembers, per text and layer, whether the position is the robot's
        self._robot_layers = {**self._robot_layers, **robot_layers}
        self._vocabulary = ()
        if self.summarizer is None and LayerKind.TEXT in kinds.values():
            labels = {label for r in rows if kinds.get(r.layer) is LayerKind.LABELS for label in detection_labels(r)}
            known = {n for (n,) in conn.execute("SELECT DISTINCT name FROM entities LIMIT 5000")}
            self._vocabulary = tuple(sorted(labels | known | set(HOUSEHOLD)))

    def _robot_pose(self, row: ObsRow) -> bool:
        """Where the robot stood: marked so, or unmarked in a layer whose positions are the robot's."""
        if row.robot_pose:
            return True
        meta = row.metadata_json
        return (meta is None or '"position_source"' not in meta) and self._robot_layers.get(row.layer, False)

    def _plan(self, row: ObsRow, kinds: dict[str, LayerKind], groups: Groups, vague: dict[str, Sighting],
              place: Optional[tuple[float, float]]) -> Plan:
        """What rows like this one contribute: ``_SKIP``, ``_FREE_TEXT``, a tuple of labels (placed where
        the object is) or, for robot-pose detections, the row lists of the sightings of their labels.

        Free text without an LLM: the things it names (``text_things``), perceived from where it was said.
        """
        if row.source_type == _INTEROCEPTION:
            return _SKIP
        kind = kinds.get(row.layer)
        if kind is LayerKind.TEXT and self.summarizer is not None:
            return _FREE_TEXT
        if kind is LayerKind.TEXT and self._vocabulary and row.x is not None:
            names = tuple(names_in(row.text, self._vocabulary))
            if not names:
                return _SKIP
            if not (row.robot_pose or '"position_source"' not in (row.metadata_json or "")):
                return names  # a note placed where the thing itself is
            return [self._vague(groups, vague, name, row, place).rows for name in names]
        if kind is not LayerKind.LABELS:
            return _SKIP
        key = (row.text, row.metadata_json, row.layer)
        found = self._row_labels.get(key)
        if found is None:
            found = self._row_labels[key] = (tuple(dict.fromkeys(detection_labels(row))), self._robot_pose(row))
        labels, robot_pose = found
        if not robot_pose:
            return labels
        return [self._vague(groups, vague, label, row, place).rows for label in labels]

    def _vague(self, groups: Groups, vague: dict[str, Sighting], label: str, row: ObsRow,
               place: Optional[tuple[float, float]]) -> Sighting:
        """The visit's robot-pose sighting of a label, made (from this row) when new."""
        sighting = vague.get(label)
        if sighting is None:
            sighting = vague[label] = Sighting(
                name=label, entity_type="object", layer=row.layer, place=place, precise=False,
                text_id=row.text_id if row.text.strip().lower() == label else None)
            groups.setdefault((label, False), []).append(sighting)
        return sighting

    @staticmethod
    def _group(groups: Groups, label: str, precise: bool, row: ObsRow, place: Optional[tuple[float, float]],
               entity_type: Optional[str] = "object") -> Sighting:
        """Add the row to its sighting (made when new); 3-D rows go to the instance within reach."""
        bucket = groups.setdefault((label, precise), [])
        target = None
        if precise and row.x is not None and row.y is not None:
            best = INSTANCE_SEPARATION
            for s in bucket:
                if s.anchor is not None:
                    fx, fy = s.anchor
                    d = math.hypot(fx - row.x, fy - row.y)
                    if d <= best:
                        best, target = d, s
        elif bucket:
            target = bucket[0]
        if target is None:
            target = Sighting(name=label, entity_type=entity_type, layer=row.layer, place=place, precise=precise,
                              text_id=row.text_id if row.text.strip().lower() == label else None)
            bucket.append(target)
        target.add(row)
        return target

    def _text_sightings(self, rows: Sequence[ObsRow], place: Optional[tuple[float, float]], groups: Groups,
                        report: EntityReport) -> None:
        """Names an LLM finds in free text, placed where the robot was (vague, like 2-D detections)."""
        for text in dict.fromkeys(r.text for r in rows):
            names = self._names_in(text, report)
            if not names:
                continue
            for row in (r for r in rows if r.text == text):
                for name in names:
                    self._group(groups, name, False, row, place, entity_type=None)

    def _names_in(self, text: str, report: EntityReport) -> Optional[list[str]]:
        if text in self._text_names:
            self._text_names.move_to_end(text)
            return self._text_names[text]
        if self._llm_failures >= 3 or self.summarizer is None:
            return None  # the LLM keeps failing this run; try again next run
        report.llm_calls += 1
        names = self.summarizer.extract_entities([text])
        if names is None:
            self._llm_failures += 1
            return None
        self._llm_failures = 0
        self._text_names[text] = names
        while len(self._text_names) > TEXT_CACHE:
            self._text_names.popitem(last=False)
        return names


class EntityExtractor(EntityPlanner):
    """``offload``: read steps in the maintenance process (``offload.py``) when no LLM is configured."""

    def __init__(self, engine: "Engine", summarizer: Optional[SummarizerLike] = None, rows: Optional[RowMemo] = None,
                 offload: Optional[MaintenanceProcess] = None) -> None:
        super().__init__(summarizer, rows)
        self.engine = engine
        self.offload = offload
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._parsed = ParsedEntities()
        self.budget = TransactionBudget(first=64, most=1024)
        """Statements per entity transaction, adapted to ~25 ms of writer lock (kept across runs)."""

    # ------------------------------------------------------------------ the run
    def run(self, stop: Optional[threading.Event] = None, final: bool = False) -> EntityReport:
        """Extract from everything new; ``final`` also closes the visit in progress."""
        started = time.perf_counter()
        report = EntityReport()
        self._llm_failures = 0
        while True:
            if stop is not None and stop.is_set():
                report.complete = False
                break
            more = self._step(report, final, stop)
            if not more:
                break
        report.seconds = time.perf_counter() - started
        return report

    def _step(self, report: EntityReport, final: bool, stop: Optional[threading.Event] = None) -> bool:
        store = self.engine.store
        left = entity_journal.pending(store)
        if left is not None:  # a crashed or stopped step: finish it before reading anything new
            return self._apply(*left, stop, report)
        step = self._read(final, stop)
        if step is None:
            return False
        report.deferred = step.deferred
        report.llm_calls += step.llm_calls
        self._resolve_and_write(step.sightings, step.marks, report, stop)
        report.observations += step.observations
        return step.more

    def _read(self, final: bool, stop: Optional[threading.Event]) -> Optional["SightingStep"]:
        """The next step's sightings: from the maintenance process when there is one and no LLM reads free
        text (it calls the LLM from here), else read here."""
        engine = self.engine
        now = engine.now()
        return planned(self.offload if self.summarizer is None else None, "plan_entities",
                       (SightingStep, type(None)), stop, "entities",
                       lambda: self.plan_step(engine.store.reader(), engine.config, now, final, stop),
                       config=engine.config, now=now, final=final)

    def forget_memos(self) -> None:
        """After a forget: drop the parsed entities and name vectors kept between steps (they may be of what went)."""
        super().forget_memos()
        self._parsed.clear()
        self._vectors.clear()

    # ------------------------------------------------------------------ merging and writing
    def _name_vectors(self, sightings: Sequence[Sighting]) -> None:
        store = self.engine.store
        missing = [s for s in sightings if s.name not in self._vectors]
        by_text = {s.text_id: s.name for s in missing if s.text_id is not None}
        if by_text:
            ids = list(by_text)
            for text_id, vector in zip(ids, store.text_vectors(ids)):
                if np.any(vector):
                    self._remember(by_text[text_id], vector)
        names = list(dict.fromkeys(s.name for s in missing if s.name not in self._vectors))
        if names:
            for name, vector in zip(names, self.engine.embed_texts(names)):
                self._remember(name, vector)

    def _remember(self, name: str, vector: np.ndarray) -> None:
        self._vectors[name] = np.asarray(vector, dtype=np.float32)
        while len(self._vectors) > TEXT_CACHE:
            self._vectors.popitem(last=False)

    def _candidates(self, sighting: Sighting, vector: np.ndarray, cache: dict[int, EntityState],
                    new: list[EntityState], known: dict[str, set[int]]) -> list[tuple[float, EntityState]]:
        """Stored entities with this name or a similar one (looked up once per name and run), plus new ones."""
        store, config = self.engine.store, self.engine.config
        threshold = config.entity_similarity_threshold
        numbers = known.get(sighting.name)
        if numbers is None:
            conn = store.reader()
            numbers = {r[0] for r in conn.execute("SELECT id FROM entities WHERE name = ?", (sighting.name,))}
            labels, sims = store.vectors["entities"].search(vector, 16)
            numbers |= {int(l) for l, s in zip(labels, sims) if s >= threshold}
            known[sighting.name] = numbers
            self._load(numbers - set(cache), cache)
        out = []
        for number in numbers:
            state = cache.get(number)
            if state is not None:
                out.append((float(state.vector @ vector), state))
        out += [(float(state.vector @ vector), state) for state in new]
        return [(sim, st) for sim, st in out if sim >= threshold - 1e-6]

    def _load(self, numbers: set[int], cache: dict[int, EntityState]) -> None:
        if not numbers:
            return
        store = self.engine.store
        rows = [row for chunk in chunked(sorted(numbers)) for row in store.reader().execute(
            f"SELECT {store.ENTITY_COLUMNS}, embedding FROM entities WHERE id IN ({marks(len(chunk))})", chunk)]
        for row in rows:
            cache[row[0]] = self._parsed.state(tuple(row), self._vector_of)

    def _vector_of(self, row: tuple[Any, ...]) -> np.ndarray:
        blob = row[-1]
        vector: np.ndarray = np.frombuffer(blob, dtype=np.float32) if blob else self.engine.embed_texts([row[1]])[0]
        return vector

    def _match(self, sighting: Sighting, candidates: list[tuple[float, EntityState]],
               claimed: set[int]) -> Optional[EntityState]:
        """The entity this sighting is of, or None for a new one (rules in the module docstring).

        ``claimed``: entities other sightings of this name and kind took in this
        visit; the split into instances already said they are other objects.
        Rays decide where they can (``_bearing_verdict``); distances otherwise.
        """
        config = self.engine.config
        pos = sighting.placed if sighting.fix is not None else sighting.position
        placed_sighting = sighting.precise or sighting.fix is not None
        best: Optional[tuple[tuple[float, int, float], EntityState]] = None
        for sim, state in candidates:
            if state.key in claimed:
                continue
            epos = state.position
            measured = state.object.w > 0  # it has object positions ("object" in its sources)
            placed = measured or state.bearing_fix is not None
            verdict = _bearing_verdict(sighting, state)
            if verdict is False:
                continue  # its rays point elsewhere, or the two triangulated spots are apart
            if pos is None or epos is None:
                if pos is not None or epos is not None:
                    continue  # one is placed and the other is not: no evidence they are the same
                distance = 0.0
            else:
                distance = math.hypot(pos[0] - epos[0], pos[1] - epos[1])
                if verdict is True:
                    pass
                elif sighting.precise and measured:
                    if distance > same_object_reach(state, config.entity_spatial_radius):
                        continue  # two measured positions this far apart: two objects
                elif placed_sighting and placed:
                    if distance > INSTANCE_SEPARATION + fix_radius(sighting.fix) + fix_radius(state.bearing_fix):
                        continue
                elif placed_sighting or placed:
                    if distance > config.entity_spatial_radius + VIEW_RANGE:
                        continue  # one side where the robot stood: the object was within view of it
                else:
                    if distance > config.entity_spatial_radius:
                        continue
                    where = sighting.seen_from
                    if where is not None and state.places and not any(
                            math.hypot(p[0] - where[0], p[1] - where[1]) <= config.consolidation_spatial_eps
                            for p in state.places):
                        continue  # seen from another place: another object (see module docstring)
            key = (-sim, 0 if measured else 1, distance)
            if best is None or key < best[0]:
                best = (key, state)
        return best[1] if best else None

    def _resolve_and_write(self, by_cluster: list[list[Sighting]], marks: Marks, report: EntityReport,
                           stop: Optional[threading.Event] = None) -> None:
        """Match every sighting to an entity (or make one), then write all (``_write``).

        Measured sightings of the whole run go first, then the robot-pose ones:
        a 2-D detection then finds the object a 3-D detection placed, even one
        measured in a later visit, instead of starting an entity where the
        robot stood.
        """
        self._name_vectors([s for group in by_cluster for s in group])
        cache: dict[int, EntityState] = {}
        new: list[EntityState] = []
        touched: dict[int, EntityState] = {}
        observed: list[tuple[EntityState, int, int]] = []
        pairs: dict[tuple[int, int], int] = {}
        next_key = -1
        known: dict[str, set[int]] = {}
        seen: list[dict[int, EntityState]] = [{} for _ in by_cluster]
        claimed: list[dict[tuple[str, int], set[int]]] = [{} for _ in by_cluster]
        for rank in (0, 1, 2):  # measured, then triangulated, then robot-pose sightings
            for visit, sightings in enumerate(by_cluster):
                _let_questions_go(stop)
                for sighting in sightings:
                    if _rank(sighting) != rank:
                        continue
                    vector = self._vectors.get(sighting.name)
                    if vector is None:
                        continue
                    report.sightings += 1
                    taken = claimed[visit].setdefault((sighting.name, rank), set())
                    state = self._match(sighting, self._candidates(sighting, vector, cache, new, known), taken)
                    if state is None:
                        state = EntityState(number=None, name=sighting.name, entity_type=sighting.entity_type,
                                            layer=sighting.layer, vector=vector, first=sighting.first,
                                            last=sighting.last, sightings=0, confidence=0.0, key=next_key)
                        next_key -= 1
                        new.append(state)
                        report.created += 1
                    else:
                        report.merged += 1
                    state.absorb(sighting)
                    taken.add(state.key)
                    touched[state.key] = state
                    observed.append((state, sighting.best_id, len(sighting.observation_ids)))
                    seen[visit][state.key] = state
        for in_visit in seen:
            keys = sorted(in_visit)
            for i, a in enumerate(keys):
                for b in keys[i + 1:]:
                    pairs[(a, b)] = pairs.get((a, b), 0) + 1
        self._write(touched, observed, pairs, marks, report, stop)

    def _write(self, touched: dict[int, EntityState], observed: list[tuple[EntityState, int, int]],
               pairs: dict[tuple[int, int], int], marks: Marks, report: EntityReport,
               stop: Optional[threading.Event] = None) -> None:
        """Plan the step's writes, then commit them in short transactions (``entity_journal.py``).

        Everything is computed before the writer lock (positions, metadata: a
        first call loads scipy for the uncertainty factors), so each
        transaction holds it only for its statements.
        """
        plan = EntityPlan(marks=marks, now=self.engine.now())
        for state in touched.values():
            if state.object.w <= 0 and state.bearing_fix is None and state.places:
                evidence = TrackEvidence(self.engine.store, state.name, set())
                state.track = evidence.region(np.asarray(state.places, dtype=np.float64), [state.layer],
                                              state.view_range or DEFAULT_VIEW_RANGE)
            pos = state.position
            x, y, z = (float(pos[0]), float(pos[1]), float(pos[2])) if pos is not None else (None, None, None)
            plan.entities.append([
                state.key, state.number, state.name, state.entity_type, x, y, z, float(state.spread),
                float(state.first), float(state.last), int(state.sightings), float(state.confidence), state.layer,
                json.dumps(state.metadata(), separators=(",", ":")),
                encode_vector(state.vector) if state.number is None else None])
        plan.observed = [[state.key, int(oid), int(n)] for state, oid, n in observed]
        plan.pairs = [[a, b, int(count)] for (a, b), count in pairs.items()]
        self._apply(plan, None, stop, report)
        report.observed_in += len(observed)
        report.cooccurrences += sum(pairs.values())

    def _apply(self, plan: EntityPlan, progress: Optional[Progress], stop: Optional[threading.Event],
               report: EntityReport) -> bool:
        """Commit a plan (or what is left of one); False when ``stop`` interrupted it between parts."""
        vectors = self.engine.store.vectors["entities"]

        def index(created: list[tuple[int, np.ndarray]]) -> None:
            vectors.add(np.asarray([n for n, _ in created], dtype=np.int64),
                        np.stack([v for _, v in created]).astype(np.float32))

        applied = entity_journal.apply(self.engine.store, plan, self.budget, progress, stop, index)
        report.transactions += applied.transactions
        if not applied.finished:
            report.complete = False
        return applied.finished
