"""The memory graph's data model: node kinds, tiers, edges and typed records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from emem_ros.core.errors import InvalidInputError


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
    if not sep or prefix not in _KIND_BY_PREFIX or not number.isdigit():
        raise ValueError(
            f"{node_id!r} is not a memory id; ids look like 'obs-12', 'ep-3', 'gist-7' or 'ent-2'"
        )
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


def finite_position(x: Any, y: Any, z: Any = 0.0) -> Optional[Position]:
    """Return (x, y, z) as floats, None when x and y are both None; reject NaN/inf."""
    if x is None and y is None:
        return None
    if x is None or y is None:
        raise InvalidInputError("give both x and y, or neither (position unknown)")
    try:
        pos = (float(x), float(y), float(0.0 if z is None else z))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"coordinates must be numbers, got x={x!r} y={y!r} z={z!r}") from exc
    if not all(math.isfinite(c) for c in pos):
        raise InvalidInputError(f"coordinates must be finite numbers, got x={x!r} y={y!r} z={z!r}")
    return pos
