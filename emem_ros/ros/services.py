"""ROS services of the memory: typed requests in, typed responses out, no rclpy.

One table, ``SERVICES``, names every service (``~/<tool>`` on the node), its
``.srv`` type and the tool or action it runs. ``handle(memory, service,
request, response, make)`` reads a request by attribute access, turns the
ROS "unset" conventions of the ``.srv`` comments into tool arguments (empty
string = any, NaN = not given, 0 = the tool's default), calls the typed tool
on ``memory.tools``, and fills the response: ``success``, ``message``, the
typed lists and ``text`` (the LLM rendering, ``str(result)``).

Nothing escapes a handler: a bad argument or an unknown id becomes
``success = false`` with a plain-words ``message`` (and ``text``), because an
exception in a service callback leaves the caller without an answer.

Messages are built with an injected factory, ``make(type_name, **fields)``,
so the node passes generated rclpy classes and the tests ``rosbags`` ones.
Tools without a typed Python signature we depend on (the experience ledger,
``memory_stats``) and ``CallTool`` go through the tool registry by name.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from emem_ros.core.errors import EmemError
from emem_ros.core.types import NodeKind, Position, parse_id
from emem_ros.ros.msgtypes import MessageFactory, time_fields
from emem_ros.tools.registry import ToolCallError
from emem_ros.tools.results import ActionResult, BodyCrossing, BodyReading, EpisodeReport, Hit

log = logging.getLogger(__name__)

__all__ = ["SERVICES", "SERVICES_BY_NAME", "ServiceSpec", "ServiceError", "handle", "to_jsonable"]

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


class ServiceError(Exception):
    """A request that cannot run as given; the message is the answer the caller gets."""


Filler = Callable[["Converter", Any, Any], None]


@dataclass(frozen=True)
class ServiceSpec:
    """One ROS service: its name under the node, its .srv type, and the tool it runs."""

    name: str
    """Service name relative to the node (``~/<name>``); the tool's name, except ``call_tool``."""
    srv_type: str
    """``emem_ros/srv/<Type>``."""
    tool: str
    """The registry tool it runs ('*' for call_tool: any)."""
    fill: Filler
    via_registry: bool = False
    """True when the tool is called by name through the registry (no typed signature relied on)."""

    @property
    def srv_name(self) -> str:
        return self.srv_type.rsplit("/", 1)[1]


# ---------------------------------------------------------------------- request conventions
def _text(value: Any) -> Optional[str]:
    """Empty string = any / not given."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _given(value: Any) -> Optional[float]:
    """NaN = not given; anything else is passed on (the tool rejects infinities in words)."""
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _or_default(value: Any) -> Optional[float]:
    """0 (a fresh request) or NaN = the tool's default."""
    number = _given(value)
    return None if number is None or number == 0.0 else number


def _count(value: Any) -> Optional[int]:
    """0 = the tool's default."""
    number = int(value)
    return None if number == 0 else number


def _place(near_x: Any, near_y: Any, radius: Any) -> dict[str, Any]:
    """near_x/near_y/spatial_radius as tool arguments.

    NaN = not given. A fresh request holds 0.0 everywhere (ROS cannot default to
    NaN), so near_x = near_y = spatial_radius = 0 also means "no place filter";
    to search around the map origin give a spatial_radius.
    """
    x, y, r = _given(near_x), _given(near_y), _or_default(radius)
    if x == 0.0 and y == 0.0 and r is None:
        x = y = None
    return {"near_x": x, "near_y": y, "spatial_radius": r if (x is not None or y is not None) else None}


def _success_flag(value: Any, field: str = "success") -> Optional[bool]:
    """-1 = not given, 0 = false, 1 = true."""
    number = int(value)
    if number == -1:
        return None
    if number in (0, 1):
        return bool(number)
    raise ServiceError(f"{field} must be -1 (not given), 0 (failed) or 1 (succeeded), got {number}")


def _json_object(text: Any, field: str) -> Optional[dict[str, Any]]:
    """Empty = none; otherwise a JSON object."""
    raw = _text(text)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ServiceError(f"{field} is not valid JSON ({exc}); send an object such as "
                           '{"source": "operator"}') from None
    if not isinstance(value, dict):
        raise ServiceError(f"{field} must be a JSON object such as {{\"source\": \"operator\"}}, "
                           f"not {type(value).__name__}")
    return value


def _strings(values: Any) -> Optional[list[str]]:
    items = [str(v).strip() for v in (values or []) if str(v).strip()]
    return items or None


def _kwargs(**values: Any) -> dict[str, Any]:
    """Only the arguments that were given: the tool's own defaults apply to the rest."""
    return {k: v for k, v in values.items() if v is not None}


# ---------------------------------------------------------------------- typed results -> messages
def _float(value: Any, unset: float = math.nan) -> float:
    if value is None:
        return unset
    number = float(value)
    return number


def _uint32(value: Any, minimum: int = 0) -> int:
    return max(minimum, min(int(value or 0), _UINT32_MAX))


def _finite(value: Optional[float]) -> Optional[float]:
    return value if value is not None and math.isfinite(value) else None


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
    def _lookup(self, kind: NodeKind, ids: Iterable[Optional[str]], fetch: Callable[[list[int]], list]) -> dict:
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

    def observations(self, ids: Iterable[Optional[str]]) -> dict:
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
            stamp=self.time(hit.stamp), score=_float(_finite(hit.score)), episode_id=hit.episode_id or "",
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
        def fetch(numbers: list[int]) -> list:
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
            BODY_READING, layer=reading.layer, text=reading.text, value=_float(_finite(reading.value)),
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
                before_level=_float(_finite(crossing.before_level)),
                after=self.body_reading(crossing.after, found.get(crossing.after.obs_id)),
                after_level=_float(_finite(crossing.after_level))))
        return out


# ---------------------------------------------------------------------- the services
def _search_response(conv: Converter, result: Any, response: Any) -> None:
    response.hits = conv.hits(result.hits)
    response.text = str(result)


def _semantic_search(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.semantic_search(**_kwargs(
        query=req.query, n_results=_count(req.n_results), layer=_text(req.layer),
        time_after=_text(req.time_after), time_before=_text(req.time_before),
        **_place(req.near_x, req.near_y, req.spatial_radius), episode_id=_text(req.episode_id)))
    _search_response(conv, result, res)


def _spatial_query(conv: Converter, req: Any, res: Any) -> None:
    x, y = _given(req.x), _given(req.y)
    if x is None or y is None:
        raise ServiceError("spatial_query needs x and y (the point to look around, metres in the map frame)")
    z = _given(req.z)
    result = conv.memory.tools.spatial_query(**_kwargs(
        x=x, y=y, z=z if z else None, radius=_or_default(req.radius), layer=_text(req.layer),
        time_after=_text(req.time_after), time_before=_text(req.time_before), n_results=_count(req.n_results)))
    _search_response(conv, result, res)


def _temporal_query(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.temporal_query(**_kwargs(
        time_after=_text(req.time_after), time_before=_text(req.time_before),
        last_n_minutes=_or_default(req.last_n_minutes), layer=_text(req.layer),
        **_place(req.near_x, req.near_y, req.spatial_radius), order=_text(req.order),
        n_results=_count(req.n_results)))
    _search_response(conv, result, res)


def _episode_summary(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.episode_summary(**_kwargs(
        episode_id=_text(req.episode_id), task_name=_text(req.task_name), last_n=_count(req.last_n)))
    res.episodes = conv.episodes(result.episodes)
    res.text = str(result)


def _get_current_context(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.get_current_context(**_kwargs(
        radius=_or_default(req.radius), include_recent_minutes=_or_default(req.include_recent_minutes)))
    res.position = conv.point_stamped(result.position, result.now if result.position is not None else None)
    res.has_position = result.position is not None
    res.position_source = result.position_source or "" if result.position is not None else ""
    res.active_episode_id = result.active_episode or ""
    res.nearby = conv.hits(result.nearby)
    res.entities = conv.hits(result.entities)
    res.gists = conv.hits(result.gists)
    res.recent = conv.hits(result.recent)
    res.body = conv.body(result.body.readings if result.body is not None else [])
    res.text = str(result)


def _search_gists(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.search_gists(**_kwargs(
        query=req.query, n_results=_count(req.n_results), time_after=_text(req.time_after),
        time_before=_text(req.time_before)))
    res.gists = conv.gists(result.hits)
    res.text = str(result)


def _entity_query(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.entity_query(**_kwargs(
        name=_text(req.name), entity_type=_text(req.entity_type),
        **_place(req.near_x, req.near_y, req.spatial_radius), last_seen_after=_text(req.last_seen_after),
        n_results=_count(req.n_results)))
    res.entities = conv.entities(result.hits)
    res.text = str(result)


def _locate(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.locate(**_kwargs(
        concept=req.concept, n_results=_count(req.n_results), layer=_text(req.layer),
        time_after=_text(req.time_after), time_before=_text(req.time_before)))
    res.found = result.found
    res.location = conv.point_stamped(result.position, result.last_stamp if result.found else None)
    res.radius = _float(result.radius) if result.found else math.nan
    res.hits = conv.hits(result.evidence)
    res.text = str(result)


def _recall(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.recall(**_kwargs(
        query=req.query, n_results=_count(req.n_results), radius_multiplier=_or_default(req.radius_multiplier)))
    found = result.center is not None
    latest = max((h.stamp for h in result.matches if h.stamp is not None), default=None)
    res.found = found
    res.center = conv.point_stamped(result.center, latest if found else None)
    res.radius = _float(result.radius) if found else math.nan
    res.hits = conv.hits(result.matches)
    res.nearby = conv.hits([*result.nearby, *result.gists, *result.entities])
    res.text = str(result)


def _thresholds(below: Any, above: Any) -> tuple[Optional[float], Optional[float]]:
    """NaN = not given; 0 in both (a fresh request) = no crossing search; 0 next to NaN is a real 0."""
    low, high = _given(below), _given(above)
    if low == 0.0 and high == 0.0:
        return None, None
    if low == 0.0 and high is not None:
        low = None  # a fresh 0 beside a given 'above'
    if high == 0.0 and low is not None:
        high = None
    return low, high


def _body_status(conv: Converter, req: Any, res: Any) -> None:
    below, above = _thresholds(req.below, req.above)
    result = conv.memory.tools.body_status(_strings(req.layers), **_kwargs(
        at_time=_text(req.at_time), below=below, above=above, time_after=_text(req.time_after),
        time_before=_text(req.time_before), n_results=_count(req.n_results)))
    res.readings = conv.body(result.readings)
    res.crossings = conv.crossings(result.crossings)
    res.text = str(result)


def _action_response(result: ActionResult, res: Any, id_field: str) -> None:
    setattr(res, id_field, result.id or "" if result.ok else "")
    res.text = str(result)
    if not result.ok:
        raise _ActionRefused(result.message)


class _ActionRefused(ServiceError):
    """The action ran and said no (e.g. no active episode): success false, text kept."""


def _store_specific_memory(conv: Converter, req: Any, res: Any) -> None:
    x, y, z = _given(req.x), _given(req.y), _given(req.z)
    if x == 0.0 and y == 0.0 and not z:  # a fresh request: no position was given
        x = y = None
    result = conv.memory.tools.store_specific_memory(**_kwargs(
        text=req.text, x=x, y=y, z=z if z else None, layer_name=_text(req.layer_name),
        metadata=_json_object(req.metadata_json, "metadata_json")))
    _action_response(result, res, "id")


def _start_episode(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.start_episode(**_kwargs(
        name=req.name, parent_episode_id=_text(req.parent_episode_id), goal=_text(req.goal)))
    _action_response(result, res, "episode_id")


def _end_episode(conv: Converter, req: Any, res: Any) -> None:
    result = conv.memory.tools.end_episode(**_kwargs(
        consolidate=bool(req.consolidate), result=_text(req.result), reflection=_text(req.reflection),
        success=_success_flag(req.success)))
    _action_response(result, res, "episode_id")


# -- through the registry, by name
def call_registered(memory: Any, name: str, arguments: Any) -> Any:
    """Run a registered tool by name with JSON-style arguments; its typed result.

    Uses the registry's own argument checks (names, types, times), so the
    errors read exactly as an LLM caller would get them.
    """
    registry = memory.tools.registry
    spec = registry.get(str(name).strip()) if isinstance(name, str) else None
    if spec is None:
        # dispatch() of an unknown name runs nothing and explains (close names, the list).
        raise ServiceError(_strip_error(registry.dispatch(name, {})))
    try:
        kwargs = registry.check(spec, arguments)
    except ToolCallError as exc:
        raise ServiceError(str(exc)) from None
    return spec.handler(**kwargs)


def _strip_error(text: str) -> str:
    return text[len("Error: "):] if text.startswith("Error: ") else text


def _registry_result(result: Any, res: Any) -> None:
    res.text = str(result)
    if isinstance(result, ActionResult) and not result.ok:
        raise _ActionRefused(result.message)
    if isinstance(result, str) and result.startswith("Error: "):
        raise _ActionRefused(_strip_error(result))


def _record_id(result: Any) -> str:
    """The content id of a recorded experience, whatever shape the tool returns it in."""
    for candidate in (getattr(result, "id", None), result.get("id") if isinstance(result, dict) else None):
        if isinstance(candidate, str) and candidate:
            return candidate
    match = _SHA256.search(str(result))
    return match.group(0) if match else ""


def _record_experience(conv: Converter, req: Any, res: Any) -> None:
    result = call_registered(conv.memory, "record_experience", _kwargs(
        goal=req.goal, action=_text(req.action), result=_text(req.result), reflection=_text(req.reflection),
        success=_success_flag(req.success), tags=_strings(req.tags),
        metadata=_json_object(req.metadata_json, "metadata_json")))
    res.id = _record_id(result)
    _registry_result(result, res)


def _find_experiences(conv: Converter, req: Any, res: Any) -> None:
    result = call_registered(conv.memory, "find_experiences", _kwargs(
        query=_text(req.query), success=_success_flag(req.success), tags=_strings(req.tags),
        time_after=_text(req.time_after), time_before=_text(req.time_before), episode_id=_text(req.episode_id),
        n_results=_count(req.n_results)))
    res.result_json = _dumps(to_jsonable(result))
    _registry_result(result, res)


def _memory_stats(conv: Converter, req: Any, res: Any) -> None:
    result = call_registered(conv.memory, "memory_stats", {})
    res.stats_json = _dumps(to_jsonable(result))
    _registry_result(result, res)


def _call_tool(conv: Converter, req: Any, res: Any) -> None:
    name = _text(req.tool)
    if name is None:
        raise ServiceError("call_tool needs a tool name, e.g. 'semantic_search'; available tools: "
                           + ", ".join(conv.memory.tools.registry.names))
    result = call_registered(conv.memory, name, _text(req.arguments_json))
    res.result_json = _dumps(to_jsonable(result))
    _registry_result(result, res)


def _spec(tool: str, srv: str, fill: Filler, via_registry: bool = False) -> ServiceSpec:
    return ServiceSpec(tool, f"{PKG}/srv/{srv}", tool, fill, via_registry)


SERVICES: tuple[ServiceSpec, ...] = (
    _spec("semantic_search", "SemanticSearch", _semantic_search),
    _spec("spatial_query", "SpatialQuery", _spatial_query),
    _spec("temporal_query", "TemporalQuery", _temporal_query),
    _spec("episode_summary", "EpisodeSummary", _episode_summary),
    _spec("get_current_context", "GetCurrentContext", _get_current_context),
    _spec("search_gists", "SearchGists", _search_gists),
    _spec("entity_query", "EntityQuery", _entity_query),
    _spec("locate", "Locate", _locate),
    _spec("recall", "Recall", _recall),
    _spec("body_status", "BodyStatus", _body_status),
    _spec("store_specific_memory", "StoreSpecificMemory", _store_specific_memory),
    _spec("start_episode", "StartEpisode", _start_episode),
    _spec("end_episode", "EndEpisode", _end_episode),
    _spec("record_experience", "RecordExperience", _record_experience, via_registry=True),
    _spec("find_experiences", "FindExperiences", _find_experiences, via_registry=True),
    _spec("memory_stats", "MemoryStats", _memory_stats, via_registry=True),
    ServiceSpec("call_tool", f"{PKG}/srv/CallTool", "*", _call_tool, via_registry=True),
)
SERVICES_BY_NAME: dict[str, ServiceSpec] = {s.name: s for s in SERVICES}


# ---------------------------------------------------------------------- entry point
def handle(memory: Any, service: str, request: Any, response: Any, make: MessageFactory) -> Any:
    """Answer one service call; never raises (failures are ``success = false`` with a message)."""
    spec = SERVICES_BY_NAME.get(service)
    try:
        if spec is None:
            raise ServiceError(f"there is no memory service named {service!r}; services: "
                               + ", ".join(SERVICES_BY_NAME))
        if memory is None or getattr(memory, "closed", False):
            raise ServiceError("the memory is not open (is the node configured and active?)")
        spec.fill(Converter(memory, make), request, response)
        response.success = True
        response.message = ""
    except _ActionRefused as exc:
        _fail(response, str(exc), keep_text=True)
    except (ServiceError, EmemError, ValueError, TypeError, KeyError) as exc:
        _fail(response, _words(exc))
    except Exception as exc:  # the caller must get an answer, whatever broke underneath
        log.exception("service %s failed", service)
        _fail(response, f"{service} failed unexpectedly ({type(exc).__name__}: {_words(exc)})")
    return response


def _words(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return text or type(exc).__name__


def _fail(response: Any, message: str, keep_text: bool = False) -> None:
    try:
        response.success = False
        response.message = message
        if not keep_text or not getattr(response, "text", ""):
            response.text = f"Error: {message}"
    except Exception:  # a response we cannot even fill: log, return what we have
        log.exception("could not fill a failed service response (%s)", message)
