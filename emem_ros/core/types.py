"""The memory graph's data model: node kinds, tiers, edges and typed records."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional, Sequence

import numpy as np

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.numbers import storable_int


class NodeKind(str, Enum):
    OBSERVATION = "observation"
    EPISODE = "episode"
    GIST = "gist"
    ENTITY = "entity"


class Tier(str, Enum):
    WORKING = "working"
    SHORT_TERM = "short_term"
    LONG_TERM = "long_term"
    ARCHIVED = "archived"


class SourceType(str, Enum):
    PERCEPTION = "perception"
    INTEROCEPTION = "interoception"
    MANUAL = "manual"


class EdgeKind(str, Enum):
    """Edge kinds. Many-to-one relations (BELONGS_TO, SUMMARIZES) are stored
    as columns of the observation row; the others live in the edges table."""

    BELONGS_TO = "BELONGS_TO"  # observation -> episode
    FOLLOWS = "FOLLOWS"  # episode -> previous episode
    SUBTASK_OF = "SUBTASK_OF"  # episode -> parent episode
    SUMMARIZES = "SUMMARIZES"  # gist -> observation
    OBSERVED_IN = "OBSERVED_IN"  # entity -> observation
    COOCCURS_WITH = "COOCCURS_WITH"  # entity <-> entity (weight = count)


class EpisodeStatus(str, Enum):
    ACTIVE = "active"
    COMPLETED = "completed"
    ABANDONED = "abandoned"


Position = tuple[float, float, float]

_PREFIX = {
    NodeKind.OBSERVATION: "obs",
    NodeKind.EPISODE: "ep",
    NodeKind.GIST: "gist",
    NodeKind.ENTITY: "ent",
}
_KIND_BY_PREFIX = {v: k for k, v in _PREFIX.items()}


def make_id(kind: NodeKind, number: int) -> str:
    """Node ids are ``<prefix>-<rowid>``: short, typed, and cheap to index."""
    return f"{_PREFIX[kind]}-{number}"


def parse_id(node_id: str) -> tuple[NodeKind, int]:
    """Split a node id into its kind and row number; raise ValueError if malformed."""
    prefix, sep, number = str(node_id).partition("-")
    if not sep or prefix not in _KIND_BY_PREFIX or not (number.isascii() and number.isdigit()):
        raise ValueError(
            f"{node_id!r} is not a memory id; ids look like 'obs-12', 'ep-3', 'gist-7' or 'ent-2'"
        )
    if len(number.lstrip("0")) > 19 or not storable_int(int(number)):  # int() of 5000 digits raises
        raise ValueError(f"{node_id!r} is not a memory id: its number is beyond what the memory can hold (2^63 - 1)")
    return _KIND_BY_PREFIX[prefix], int(number)


@dataclass(frozen=True)
class Observation:
    id: str
    text: str
    stamp: float
    layer: str
    source_type: str
    position: Optional[Position]
    frame_id: str = "map"
    confidence: float = 1.0
    episode_id: Optional[str] = None
    gist_id: Optional[str] = None
    tier: str = Tier.SHORT_TERM.value
    value: Optional[float] = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def has_position(self) -> bool:
        return self.position is not None


@dataclass(frozen=True)
class Episode:
    id: str
    name: str
    start: float
    end: Optional[float] = None
    status: str = EpisodeStatus.ACTIVE.value
    parent_id: Optional[str] = None
    previous_id: Optional[str] = None
    summary: str = ""
    goal: Optional[str] = None
    action: Optional[str] = None
    result: Optional[str] = None
    reflection: Optional[str] = None
    success: Optional[bool] = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Gist:
    id: str
    text: str
    centroid: Optional[Position]
    radius: float
    time_start: float
    time_end: float
    source_count: int
    layers: tuple[str, ...] = ()
    episode_id: Optional[str] = None
    created_at: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Entity:
    id: str
    name: str
    entity_type: Optional[str]
    position: Optional[Position]
    spread: float
    first_seen: float
    last_seen: float
    sightings: int = 1
    confidence: float = 1.0
    layer: str = "default"
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Edge:
    source_id: str
    target_id: str
    kind: EdgeKind
    weight: float = 1.0


MAX_COORDINATE = 1.0e6
"""Largest |x|, |y|, |z| in metres a position may have (1000 km from the map origin).

No robot map is larger; anything beyond is a broken pose (an uninitialised
filter, a unit mix-up) and would overflow the place grid (``cell_of``)."""


MAX_RADIUS = 4.0e6
"""Largest radius in metres a question may ask about: wider than the whole ±1000 km map from any point in it."""


def real_number(value: Any) -> Optional[float]:
    """``value`` as a float when it is a real number (int, float, numpy scalar), else None.

    bool is not a number here: ``True`` as a coordinate or a confidence is a bug.
    """
    kind = type(value)
    if kind is float or kind is int:  # the common case, without the ABC check (ingest hot path)
        return float(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def rounded(position: Sequence[float], digits: int = 3) -> Position:
    """A position for an answer: three floats, rounded to the millimetre."""
    return (round(float(position[0]), digits), round(float(position[1]), digits), round(float(position[2]), digits))


def finite_position(x: Any, y: Any, z: Any = 0.0) -> Optional[Position]:
    """Return (x, y, z) as floats, None when x and y are both None; reject NaN/inf and absurd sizes."""
    if x is None and y is None:
        return None
    if x is None or y is None:
        raise InvalidInputError("give both x and y, or neither (position unknown)")
    fx, fy, fz = real_number(x), real_number(y), 0.0 if z is None else real_number(z)
    if fx is None or fy is None or fz is None:
        raise InvalidInputError(f"coordinates must be numbers, got x={x!r} y={y!r} z={z!r}")
    # Plain comparisons, not generators: this runs once per observation on the ingest path.
    # A NaN fails every comparison, so it is caught with infinities here.
    if not (-MAX_COORDINATE <= fx <= MAX_COORDINATE and -MAX_COORDINATE <= fy <= MAX_COORDINATE
            and -MAX_COORDINATE <= fz <= MAX_COORDINATE):
        if not (math.isfinite(fx) and math.isfinite(fy) and math.isfinite(fz)):
            raise InvalidInputError(f"coordinates must be finite numbers, got x={x!r} y={y!r} z={z!r}")
        raise InvalidInputError(
            f"coordinates must lie within {MAX_COORDINATE:g} m of the map origin, got x={x!r} y={y!r} z={z!r};"
            " a pose that far away is a broken pose"
        )
    return (fx, fy, fz)
