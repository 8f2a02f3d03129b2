"""Typed tool results as ROS responses: which result fills which fields is decided by its type.

Hits carry what the tools rank by; the messages also want what only the
store knows (an observation's source_type and frame, an entity's
confidence, an episode's previous_id). Those are looked up in one batch per
response, and a failed lookup only leaves those fields at their defaults.
Messages are built with an injected factory, ``make(type_name, **fields)``,
so the node passes generated rclpy classes and the tests ``rosbags`` ones.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from typing import Any, Callable, Iterable, Optional, Sequence

from emem_ros.core.numbers import finite_or_none
from emem_ros.core.types import NodeKind, Position, parse_id
from emem_ros.ros.msgtypes import MessageFactory, time_fields
from emem_ros.ros.requests import ServiceError
from emem_ros.tools.results import (
    ActionResult,
    BodyCrossing,
    BodyReading,
    BodyStatusResult,
    ContextResult,
    EpisodeReport,
    EpisodeSummaryResult,
    Hit,
    LocateResult,
    RecallResult,
    SearchResult,
)

log = logging.getLogger(__name__)

PKG = "emem_ros"
MEMORY_HIT = f"{PKG}/msg/MemoryHit"
ENTITY = f"{PKG}/msg/Entity"
GIST = f"{PKG}/msg/Gist"
EPISODE = f"{PKG}/msg/Episode"
BODY_READING = f"{PKG}/msg/BodyReading"
BODY_CROSSING = f"{PKG}/msg/BodyCrossing"
POINT = "geometry_msgs/msg/Point"
POINT_STAMPED = "geometry_msgs/msg/PointStamped"
HEADER = "std_msgs/msg/Header"
TIME = "builtin_interfaces/msg/Time"

_UINT32_MAX = 2**32 - 1
_SHA256 = re.compile(r"\b[0-9a-f]{64}\b")


# ---------------------------------------------------------------------- typed results -> messages
def _float(value: Any, unset: float = math.nan) -> float:
    if value is None:
        return unset
    number = float(value)
    return number


def _uint32(value: Any, minimum: int = 0) -> int:
    return max(minimum, min(int(value or 0), _UINT32_MAX))




def _jsonable(value: Any) -> Any:
    """JSON-safe copy: a result's own ``to_dict`` first, dataclasses as dicts, non-finite floats as null."""
    if not isinstance(value, type):
        for method in ("to_dict", "as_dict"):
            convert = getattr(value, method, None)
            if callable(convert):
                return _jsonable(convert())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "value") and hasattr(value, "name"):  # an Enum
        return _jsonable(value.value)
    try:
        number = float(value)  # numpy scalars
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


def to_jsonable(value: Any) -> Any:
    """A typed tool result as JSON-ready data (what ``result_json`` carries)."""
    if isinstance(value, str):
        return {"text": value}
    return _jsonable(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)


class Converter:
    """Typed tool results -> ROS messages, through the injected factory.

    Hits carry what the tools rank by; the messages also want what only the
    store knows (an observation's source_type and frame, an entity's
    confidence, an episode's previous_id). Those are looked up in one batch per
    response, and a failed lookup only leaves those fields at their defaults.
    """

    def __init__(self, memory: Any, make: MessageFactory) -> None:
        self.memory = memory
        self.make = make
        self.frame = str(getattr(getattr(memory, "config", None), "frame_id", "") or "map")

    # -- basic types
    def time(self, seconds: Optional[float]) -> Any:
        return self.make(TIME, **time_fields(seconds))

    def point(self, position: Optional[Position]) -> Any:
        x, y, z = position if position is not None else (0.0, 0.0, 0.0)
        return self.make(POINT, x=float(x), y=float(y), z=float(z if z is not None else 0.0))

    def point_stamped(self, position: Optional[Position], stamp: Optional[float]) -> Any:
        header = self.make(HEADER, stamp=self.time(stamp), frame_id=self.frame if position is not None else "")
        return self.make(POINT_STAMPED, header=header, point=self.point(position))

    # -- store lookups (best effort)
    def _lookup(self, kind: NodeKind, ids: Iterable[Optional[str]],
                fetch: Callable[[list[int]], list[Any]]) -> dict[Any, Any]:
        numbers = []
        for node_id in ids:
            if not node_id:
                continue
            try:
                parsed_kind, number = parse_id(node_id)
            except ValueError:
                continue
            if parsed_kind is kind:
                numbers.append(number)
        if not numbers:
            return {}
        try:
            return {item.id: item for item in fetch(sorted(set(numbers)))}
        except Exception:  # enrichment only: the answer stands without it
            log.debug("looking up %s rows for a service response failed", kind.value, exc_info=True)
            return {}

    def observations(self, ids: Iterable[Optional[str]]) -> dict[Any, Any]:
        return self._lookup(NodeKind.OBSERVATION, ids, self.memory.store.get_observations)

    # -- memory hits
    def hits(self, hits: Sequence[Hit]) -> list[Any]:
        found = self.observations(h.id for h in hits if h.kind == "observation")
        return [self.memory_hit(h, found.get(h.id)) for h in hits]

    def memory_hit(self, hit: Hit, observation: Any = None) -> Any:
        extra: dict[str, Any] = {}
        for key, value in (("first_seen", hit.first_stamp), ("distance", hit.distance), ("radius", hit.radius),
                           ("similarity", hit.similarity), ("entity_type", hit.entity_type)):
            if value is not None and (not isinstance(value, float) or math.isfinite(value)):
                extra[key] = value
        if hit.layers:
            extra["layers"] = list(hit.layers)
        if hit.count_is_lower_bound:
            extra["count_is_lower_bound"] = True
        source_type = ""
        frame = self.frame if hit.position is not None else ""
        if observation is not None:
            source_type = observation.source_type or ""
            if hit.position is not None and observation.frame_id:
                frame = observation.frame_id
            extra["confidence"] = observation.confidence
            if observation.metadata:
                extra["metadata"] = observation.metadata
        return self.make(
            MEMORY_HIT, id=hit.id, kind=hit.kind, text=hit.text, layer=hit.layer or "", source_type=source_type,
            position=self.point(hit.position), has_position=hit.position is not None, frame_id=frame,
            stamp=self.time(hit.stamp), score=_float(finite_or_none(hit.score)), episode_id=hit.episode_id or "",
            count=_uint32(hit.count, 1), metadata_json=_dumps(_jsonable(extra)) if extra else "{}")

    # -- entities, gists, episodes, body readings
    def entities(self, hits: Sequence[Hit]) -> list[Any]:
        rows = self._lookup(NodeKind.ENTITY, (h.id for h in hits), self.memory.store.get_entities)
        out = []
        for hit in hits:
            if hit.kind != "entity":
                continue
            row = rows.get(hit.id)
            position = row.position if row is not None else hit.position
            spread = row.spread if row is not None else hit.radius
            out.append(self.make(
                ENTITY, id=hit.id, name=row.name if row is not None else hit.text,
                entity_type=(row.entity_type if row is not None else hit.entity_type) or "",
                position=self.point(position), frame_id=self.frame if position is not None else "",
                spread=_float(spread) if position is not None else math.nan,
                first_seen=self.time(row.first_seen if row is not None else hit.first_stamp),
                last_seen=self.time(row.last_seen if row is not None else hit.stamp),
                sightings=_uint32(row.sightings if row is not None else hit.count),
                confidence=_float(row.confidence if row is not None else None),
                layer=(row.layer if row is not None else hit.layer) or ""))
        return out

    def gists(self, hits: Sequence[Hit]) -> list[Any]:
        rows = self._lookup(NodeKind.GIST, (h.id for h in hits), self.memory.store.get_gists)
        out = []
        for hit in hits:
            if hit.kind != "gist":
                continue
            row = rows.get(hit.id)
            centroid = row.centroid if row is not None else hit.position
            radius = row.radius if row is not None else hit.radius
            out.append(self.make(
                GIST, id=hit.id, text=row.text if row is not None else hit.text, centroid=self.point(centroid),
                radius=_float(radius) if centroid is not None else math.nan,
                time_start=self.time(row.time_start if row is not None else hit.first_stamp),
                time_end=self.time(row.time_end if row is not None else hit.stamp),
                source_count=_uint32(row.source_count if row is not None else hit.count),
                layers=[str(layer) for layer in (row.layers if row is not None else hit.layers)],
                episode_id=(row.episode_id if row is not None else hit.episode_id) or ""))
        return out

    def episodes(self, reports: Sequence[EpisodeReport]) -> list[Any]:
        def fetch(numbers: list[int]) -> list[Any]:
            return [self.memory.store.get_episode(n) for n in numbers]

        rows = self._lookup(NodeKind.EPISODE, (r.id for r in reports), fetch)
        out = []
        for report in reports:
            row = rows.get(report.id)
            success = {True: 1, False: 0, None: -1}[report.success]
            out.append(self.make(
                EPISODE, id=report.id, name=report.name, status=report.status, start=self.time(report.start),
                end=self.time(report.end), parent_id=report.parent_id or "",
                previous_id=(row.previous_id if row is not None else None) or "", summary=report.summary or "",
                goal=report.goal or "", action=(row.action if row is not None else None) or "",
                result=report.result or "", reflection=report.reflection or "", success=success,
                observation_count=_uint32(report.observations)))
        return out

    def body(self, readings: Sequence[BodyReading]) -> list[Any]:
        found = self.observations(r.obs_id for r in readings)
        return [self.body_reading(reading, found.get(reading.obs_id)) for reading in readings]

    def body_reading(self, reading: Optional[BodyReading], observation: Any = None) -> Any:
        if reading is None:  # an unset field: empty text, zero time, no position
            return self.make(BODY_READING, layer="", text="", value=math.nan, stamp=self.time(None),
                             position=self.point(None), has_position=False)
        position = observation.position if observation is not None else None
        return self.make(
            BODY_READING, layer=reading.layer, text=reading.text, value=_float(finite_or_none(reading.value)),
            stamp=self.time(reading.stamp), position=self.point(position), has_position=position is not None)

    def crossings(self, crossings: Sequence[BodyCrossing]) -> list[Any]:
        found = self.observations(r.obs_id for c in crossings for r in (c.before, c.after) if r is not None)
        out = []
        for crossing in crossings:
            before = crossing.before
            out.append(self.make(
                BODY_CROSSING, layer=crossing.layer, direction=crossing.direction,
                threshold=float(crossing.threshold), unit=crossing.unit, has_before=before is not None,
                before=self.body_reading(before, found.get(before.obs_id) if before is not None else None),
                before_level=_float(finite_or_none(crossing.before_level)),
                after=self.body_reading(crossing.after, found.get(crossing.after.obs_id)),
                after_level=_float(finite_or_none(crossing.after_level))))
        return out



# ---------------------------------------------------------------------- results -> response fields
class ActionRefused(ServiceError):
    """The tool ran and said no (e.g. no active episode): success false, text kept."""


def _search(conv: Converter, result: SearchResult, res: Any) -> None:
    if hasattr(res, "hits"):
        res.hits = conv.hits(result.hits)
    elif hasattr(res, "gists"):
        res.gists = conv.gists(result.hits)
    elif hasattr(res, "entities"):
        res.entities = conv.entities(result.hits)


def _episodes(conv: Converter, result: EpisodeSummaryResult, res: Any) -> None:
    res.episodes = conv.episodes(result.episodes)


def _context(conv: Converter, result: ContextResult, res: Any) -> None:
    res.position = conv.point_stamped(result.position, result.now if result.position is not None else None)
    res.has_position = result.position is not None
    res.position_source = result.position_source or "" if result.position is not None else ""
    res.active_episode_id = result.active_episode or ""
    res.nearby = conv.hits(result.nearby)
    res.entities = conv.hits(result.entities)
    res.gists = conv.hits(result.gists)
    res.recent = conv.hits(result.recent)
    res.body = conv.body(result.body.readings if result.body is not None else [])


def _locate(conv: Converter, result: LocateResult, res: Any) -> None:
    res.found = result.found
    res.location = conv.point_stamped(result.position, result.last_stamp if result.found else None)
    res.radius = _float(result.radius) if result.found else math.nan
    res.hits = conv.hits(result.evidence)


def _recall(conv: Converter, result: RecallResult, res: Any) -> None:
    found = result.center is not None
    latest = max((h.stamp for h in result.matches if h.stamp is not None), default=None)
    res.found = found
    res.center = conv.point_stamped(result.center, latest if found else None)
    res.radius = _float(result.radius) if found else math.nan
    res.hits = conv.hits(result.matches)
    res.nearby = conv.hits([*result.nearby, *result.gists, *result.entities])


def _body(conv: Converter, result: BodyStatusResult, res: Any) -> None:
    res.readings = conv.body(result.readings)
    res.crossings = conv.crossings(result.crossings)


def _action(conv: Converter, result: ActionResult, res: Any) -> None:
    for field in ("id", "episode_id"):
        if hasattr(res, field):
            setattr(res, field, result.id or "" if result.ok else "")


FILLERS: dict[type, Callable[[Converter, Any, Any], None]] = {
    SearchResult: _search, EpisodeSummaryResult: _episodes, ContextResult: _context, LocateResult: _locate,
    RecallResult: _recall, BodyStatusResult: _body, ActionResult: _action,
}
"""Result types with typed response fields; any other result fills ``result_json``/``stats_json``/``id``."""


def fill_response(conv: Converter, result: Any, res: Any) -> None:
    """The response fields ``result`` has; raises ``ActionRefused`` when the tool ran and said no."""
    filler = FILLERS.get(type(result))
    if filler is not None:
        filler(conv, result, res)
    else:
        for field in ("result_json", "stats_json"):
            if hasattr(res, field):
                setattr(res, field, _dumps(to_jsonable(result)))
        if hasattr(res, "id"):
            res.id = _record_id(result)
    res.text = str(result)
    refuse_if_said_no(result)


def refuse_if_said_no(result: Any) -> None:
    """``ActionRefused`` when the tool ran and said no (an action refused, an error answer)."""
    if isinstance(result, ActionResult) and not result.ok:
        raise ActionRefused(result.message)
    if isinstance(result, str) and result.startswith("Error: "):
        raise ActionRefused(result[len("Error: "):])


def _record_id(result: Any) -> str:
    """The content id of a recorded experience, whatever shape the tool returns it in."""
    for candidate in (getattr(result, "id", None), result.get("id") if isinstance(result, dict) else None):
        if isinstance(candidate, str) and candidate:
            return candidate
    match = _SHA256.search(str(result))
    return match.group(0) if match else ""
