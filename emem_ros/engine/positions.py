"""What a stored position means: the thing's own place, or where the robot stood when it perceived it.

Every door that stores a position (``Memory.add``, ``store_specific_memory``
from Python, an LLM or MCP, the ROS ``StoreSpecificMemory`` service) takes
``position_is``: ``"thing"`` (the position is where the thing is: a 3-D
detection, a place a person names) or ``"robot"`` (where the robot stood
when it perceived it: a 2-D detector, a caption, a microphone), and for
``"robot"`` how far the layer perceives (``view_range``, metres). Say it
once per layer (``Memory.declare_layer``: kept in the memory file, so every
process that opens it knows) or per call (the call wins).

It is stored the way the ROS adapters always marked it, in the
observation's metadata: ``position_source: "odometry"`` plus ``view_range``
for the robot's pose, ``position_source: "object"`` for the thing's own;
so locate, entities, export and the fleet read one convention.

A caller who says nothing (eMEM's and EmbodiedAgents' ``memory.add(text,
x, y)`` with the robot's odometry) gets an answer whose radius still holds
the thing: an undeclared layer is read as perceived from where the robot
stood, within ``DEFAULT_VIEW_RANGE``, unless its own data shows positions
of things (``infer``: at one moment it reported different things at
different places). A thing's own position lies within view of itself, so
that reading is true for both meanings, only wider; docs/locate.md says it
in full.
"""

from __future__ import annotations

import bisect
import json
import math
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from emem_ros.core.errors import InvalidInputError

THING = "thing"
ROBOT = "robot"
SOURCE_KEY = "position_source"
ROBOT_SOURCE = "odometry"
"""The ROS adapters' mark of a robot-pose sighting (kept: files written before say it this way)."""
THING_SOURCE = "object"
VIEW_RANGE_KEY = "view_range"
META_KEY = "layer_positions"
"""meta row: {layer: {"position_is": ..., "view_range": ...}} (JSON)."""

_SAYINGS = {THING: THING, "object": THING, "thing's own": THING, "own": THING,
            ROBOT: ROBOT, "robot pose": ROBOT, "robot_pose": ROBOT, "odometry": ROBOT, "perceived from": ROBOT,
            "seen from": ROBOT}


@dataclass(frozen=True)
class LayerPositions:
    """A layer's declaration: what its positions are, and (robot) how far it perceives."""

    position_is: str
    view_range: Optional[float] = None

    def to_json(self) -> dict[str, Any]:
        return {"position_is": self.position_is, **({"view_range": self.view_range} if self.view_range else {})}


def check_position_is(value: Any) -> Optional[str]:
    """``THING``, ``ROBOT`` or None (not said) from what a caller wrote; a plain-words error otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if not text:
            return None
        if text in _SAYINGS:
            return _SAYINGS[text]
    raise InvalidInputError(f"position_is must be 'thing' (the position is where the thing itself is) or 'robot' "
                            f"(where the robot stood when it perceived it), got {value!r}")


def check_view_range(value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidInputError(f"view_range must be a positive number of metres (how far the layer perceives), "
                                f"got {value!r}")
    return float(value)


def read_declarations(conn: sqlite3.Connection) -> dict[str, LayerPositions]:
    """The layers' declarations recorded in a memory file (any connection: the maintenance process reads them)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()
    if row is None:
        return {}
    try:
        raw = json.loads(row[0])
    except ValueError:
        return {}
    out = {}
    for layer, said in (raw.items() if isinstance(raw, dict) else ()):
        if not isinstance(said, dict):
            continue
        try:
            meaning = check_position_is(said.get("position_is"))
            view_range = check_view_range(said.get("view_range"))
        except InvalidInputError:
            continue
        if meaning is not None:
            out[str(layer)] = LayerPositions(meaning, view_range)
    return out


class Declarations:
    """The layers' declarations of one memory: read at open, written through on ``declare``."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._layers = read_declarations(store.reader())
        self._inferred: dict[str, tuple[str, int]] = {}
        """Undeclared layers: (what their data showed, the newest observation id then)."""

    def get(self, layer: str) -> Optional[LayerPositions]:
        return self._layers.get(layer)

    def all(self) -> dict[str, LayerPositions]:
        return dict(self._layers)

    def declare(self, layer: str, position_is: Any, view_range: Any = None) -> LayerPositions:
        meaning = check_position_is(position_is)
        if meaning is None:
            raise InvalidInputError("declare_layer needs position_is: 'thing' or 'robot'")
        reach = check_view_range(view_range)
        if meaning == THING and reach is not None:
            raise InvalidInputError("view_range is how far a layer perceives from the robot's pose: "
                                    "give it with position_is='robot' only")
        said = LayerPositions(meaning, reach)
        with self._lock:
            layers = {**self._layers, layer: said}
            with self._store.write() as conn:
                conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                             (META_KEY, json.dumps({k: v.to_json() for k, v in sorted(layers.items())})))
            self._layers = layers
        return said

    def meaning(self, conn: sqlite3.Connection, layer: str) -> tuple[str, Optional[float]]:
        """(what the layer's unmarked positions are, its declared view range): its declaration, else
        ``infer_layer`` (worked out again once the memory grew by a tenth, at least ``RECHECK`` observations)."""
        said = self._layers.get(layer)
        if said is not None:
            return said.position_is, said.view_range
        top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM observations").fetchone()[0])
        with self._lock:
            known = self._inferred.get(layer)
        if known is not None and top - known[1] < max(RECHECK, known[1] // 10):
            return known[0], None
        verdict = infer_layer(conn, layer)
        with self._lock:
            self._inferred[layer] = (verdict, top)
        return verdict, None

    def mark(self, layer: str, metadata: Optional[dict[str, Any]], position_is: Any = None, view_range: Any = None
             ) -> Optional[dict[str, Any]]:
        """The metadata to store for a positioned observation: the call's word, else the layer's; unchanged
        when neither says anything (``infer`` reads the layer then)."""
        meaning = check_position_is(position_is)
        reach = check_view_range(view_range)
        declared = self._layers.get(layer)
        if meaning is None and declared is not None:
            meaning = declared.position_is
            reach = reach if reach is not None else declared.view_range
        if meaning is None:
            if reach is None:
                return metadata
            meaning = ROBOT  # a view range is only said of sightings from the robot's pose
        out = dict(metadata or {})
        if meaning == ROBOT:
            out[SOURCE_KEY] = ROBOT_SOURCE
            if reach is not None:
                out[VIEW_RANGE_KEY] = reach
        else:
            out[SOURCE_KEY] = THING_SOURCE
            out.pop(VIEW_RANGE_KEY, None)
        return out


# ---------------------------------------------------------------------- a layer nobody declared
SAMPLE = 600
"""Newest positioned observations of a layer read to infer what its positions are."""
SAME_PLACE = 0.05
"""Metres: two sightings closer than this were made at one place."""


ON_TRACK = 0.3
"""Metres: an unmarked position this close to the robot's pose at that moment is the robot's."""
AT_ONCE = 0.5
"""Seconds: a robot pose this close in time is the robot's pose at that moment."""
MIN_PAIRS = 10
RECHECK = 2000
"""New observations after which an undeclared layer's inference is worked out again."""


def infer(samples: Iterable[tuple[float, Optional[float], Optional[float], Any]],
          track: Sequence[tuple[float, float, float]] = ()) -> str:
    """``THING`` or ``ROBOT``: what an undeclared layer's positions are, from its own data.

    ``samples``: (stamp, x, y, text) of a layer's observations; ``track``:
    (stamp, x, y) of the robot's known poses (sightings marked as robot pose,
    body readings), sorted by stamp.

    1. A detector that gives things' own positions reports the things of one
       frame at their places; one stored at the robot's pose reports them all
       at one place: several things at one moment decide.
    2. Else, positions that keep off the robot's track at the same moments
       are things' own (a 3-D detector seeing one thing at a time); on it,
       the robot's.
    3. Without either, nothing tells the two apart, and ``ROBOT`` is the
       reading whose radius holds either way.
    """
    rows = [(float(stamp), float(x), float(y), text) for stamp, x, y, text in samples
            if x is not None and y is not None]
    by_stamp: dict[float, list[tuple[float, float, Any]]] = {}
    for stamp, x, y, text in rows:
        by_stamp.setdefault(round(stamp, 3), []).append((x, y, text))
    apart = together = 0
    for group in by_stamp.values():
        if len({text for _, _, text in group}) < 2:
            continue
        x0, y0, _ = group[0]
        if all(math.hypot(x - x0, y - y0) <= SAME_PLACE for x, y, _ in group[1:]):
            together += 1
        else:
            apart += 1
    if apart + together:
        return THING if apart > together else ROBOT
    if track:
        stamps = [t for t, _, _ in track]
        on = off = 0
        for stamp, x, y, _ in rows:
            at = bisect.bisect_left(stamps, stamp)
            near = [k for k in (at - 1, at) if 0 <= k < len(track) and abs(stamps[k] - stamp) <= AT_ONCE]
            if not near:
                continue
            k = min(near, key=lambda k: abs(stamps[k] - stamp))
            if math.hypot(track[k][1] - x, track[k][2] - y) <= ON_TRACK:
                on += 1
            else:
                off += 1
        if on + off >= MIN_PAIRS:
            return ROBOT if on >= off else THING
    return ROBOT


def infer_layer(conn: sqlite3.Connection, layer: str) -> str:
    """``infer`` over a layer's newest ``SAMPLE`` positioned observations and the robot's poses meanwhile."""
    rows = conn.execute("SELECT stamp, x, y, text_id FROM observations WHERE layer = ? AND x IS NOT NULL"
                        " ORDER BY stamp DESC LIMIT ?", (layer, SAMPLE)).fetchall()
    if not rows:
        return ROBOT
    track = conn.execute(
        "SELECT stamp, x, y FROM observations WHERE stamp BETWEEN ? AND ? AND x IS NOT NULL AND layer != ?"
        " AND (source_type = 'interoception' OR metadata LIKE '%\"position_source\":\"odometry\"%')"
        " ORDER BY stamp LIMIT 20000", (rows[-1][0] - AT_ONCE, rows[0][0] + AT_ONCE, layer)).fetchall()
    return infer(rows, [(float(t), float(x), float(y)) for t, x, y in track])
