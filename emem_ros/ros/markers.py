"""Entities and gist regions as RViz / Foxglove markers, without rclpy.

``marker_specs(memory)`` reads the newest entities and gists from the store
and describes one marker per thing (plain dataclasses); ``to_marker_array``
builds a ``visualization_msgs/MarkerArray`` from them with an injected message
factory. The array starts with a DELETEALL marker and every id is the row id
of its entity or gist, so each publication replaces the last one: markers of
merged or archived things disappear instead of piling up.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from emem_ros.core.types import Entity, Gist, parse_id
from emem_ros.ros.msgtypes import MessageFactory, time_fields

__all__ = ["MarkerSpec", "marker_specs", "specs_for", "to_marker_array",
           "SPHERE", "CYLINDER", "TEXT_VIEW_FACING", "ADD", "DELETEALL"]

# visualization_msgs/Marker constants
SPHERE = 2
CYLINDER = 3
TEXT_VIEW_FACING = 9
ADD = 0
DELETEALL = 3

NS_ENTITIES = "entities"
NS_ENTITY_LABELS = "entity_labels"
NS_GISTS = "gists"
NS_GIST_LABELS = "gist_labels"

ENTITY_SIZE = 0.3
"""Metres: diameter of an entity's sphere."""
LABEL_HEIGHT = 0.25
"""Metres: text height of labels."""
MIN_GIST_DIAMETER = 0.5
GIST_THICKNESS = 0.05
LABEL_CHARS = 48

Color = tuple[float, float, float, float]
GIST_COLOR: Color = (0.2, 0.45, 0.9, 0.25)
LABEL_COLOR: Color = (1.0, 1.0, 1.0, 0.9)


@dataclass(frozen=True)
class MarkerSpec:
    """One marker, as plain data (converted to visualization_msgs/Marker by ``to_marker_array``)."""

    ns: str
    id: int
    type: int
    position: tuple[float, float, float]
    scale: tuple[float, float, float]
    color: Color
    frame: str
    text: str = ""
    action: int = ADD


def _label(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _type_color(entity_type: Optional[str]) -> Color:
    """A stable colour per entity type, so a chair is the same colour in every publication."""
    digest = hashlib.sha1((entity_type or "").encode("utf-8")).digest()
    r, g, b = (0.35 + 0.65 * digest[i] / 255.0 for i in range(3))
    return (r, g, b, 0.9)


def _number(node_id: str) -> int:
    return parse_id(node_id)[1]


def _finite_position(position: Optional[tuple[float, float, float]]) -> Optional[tuple[float, float, float]]:
    if position is None:
        return None
    x, y, z = (float(v) if v is not None else 0.0 for v in position)
    return (x, y, z) if all(math.isfinite(v) for v in (x, y, z)) else None


def specs_for(entities: Sequence[Entity], gists: Sequence[Gist], frame: str) -> list[MarkerSpec]:
    """Markers of these entities and gists; things without a position are left out."""
    specs: list[MarkerSpec] = []
    for entity in entities:
        position = _finite_position(entity.position)
        if position is None:
            continue
        number = _number(entity.id)
        specs.append(MarkerSpec(NS_ENTITIES, number, SPHERE, position, (ENTITY_SIZE,) * 3,
                                _type_color(entity.entity_type), frame))
        x, y, z = position
        label = entity.name if not entity.entity_type else f"{entity.name} ({entity.entity_type})"
        specs.append(MarkerSpec(NS_ENTITY_LABELS, number, TEXT_VIEW_FACING, (x, y, z + ENTITY_SIZE + 0.1),
                                (0.0, 0.0, LABEL_HEIGHT), LABEL_COLOR, frame, _label(label)))
    for gist in gists:
        position = _finite_position(gist.centroid)
        if position is None:
            continue
        number = _number(gist.id)
        radius = gist.radius if gist.radius is not None and math.isfinite(gist.radius) else 0.0
        diameter = max(2.0 * radius, MIN_GIST_DIAMETER)
        x, y, z = position
        specs.append(MarkerSpec(NS_GISTS, number, CYLINDER, (x, y, z), (diameter, diameter, GIST_THICKNESS),
                                GIST_COLOR, frame))
        specs.append(MarkerSpec(NS_GIST_LABELS, number, TEXT_VIEW_FACING, (x, y, z + 0.5),
                                (0.0, 0.0, LABEL_HEIGHT), LABEL_COLOR, frame, _label(gist.text)))
    return specs


def marker_specs(memory: Any, max_entities: int = 200, max_gists: int = 200) -> list[MarkerSpec]:
    """The newest entities and gists of ``memory`` (with positions), as markers."""
    store = memory.store
    conn = store.reader()
    entities = [store.entity_from_row(row) for row in conn.execute(
        f"SELECT {store.ENTITY_COLUMNS} FROM entities WHERE x IS NOT NULL"
        " ORDER BY last_seen DESC, id DESC LIMIT ?", (int(max_entities),))]
    gists = [store.gist_from_row(row) for row in conn.execute(
        f"SELECT {store.GIST_COLUMNS} FROM gists WHERE cx IS NOT NULL"
        " ORDER BY time_end DESC, id DESC LIMIT ?", (int(max_gists),))]
    return specs_for(entities, gists, str(memory.config.frame_id))


def to_marker_array(specs: Sequence[MarkerSpec], make: MessageFactory, stamp: Optional[float] = None,
                    frame: str = "") -> Any:
    """A MarkerArray: DELETEALL first (clears the last publication), then every spec."""
    time_msg = make("builtin_interfaces/msg/Time", **time_fields(stamp))
    clear = make("visualization_msgs/msg/Marker",
                 header=make("std_msgs/msg/Header", stamp=time_msg,
                             frame_id=specs[0].frame if specs else frame),
                 action=DELETEALL)
    markers = [clear]
    for spec in specs:
        x, y, z = spec.position
        sx, sy, sz = spec.scale
        r, g, b, a = spec.color
        markers.append(make(
            "visualization_msgs/msg/Marker",
            header=make("std_msgs/msg/Header", stamp=make("builtin_interfaces/msg/Time", **time_fields(stamp)),
                        frame_id=spec.frame),
            ns=spec.ns, id=int(spec.id), type=int(spec.type), action=int(spec.action),
            pose=make("geometry_msgs/msg/Pose",
                      position=make("geometry_msgs/msg/Point", x=float(x), y=float(y), z=float(z)),
                      orientation=make("geometry_msgs/msg/Quaternion", x=0.0, y=0.0, z=0.0, w=1.0)),
            scale=make("geometry_msgs/msg/Vector3", x=float(sx), y=float(sy), z=float(sz)),
            color=make("std_msgs/msg/ColorRGBA", r=float(r), g=float(g), b=float(b), a=float(a)),
            text=spec.text))
    return make("visualization_msgs/msg/MarkerArray", markers=markers)
