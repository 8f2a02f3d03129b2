"""Node parameters as plain Python: parse, validate, declare.

A ROS node sees its parameters as one flat dict with dotted names
(``layers.scene.topic``); ``parse_params`` turns that dict into typed
dataclasses and rejects anything wrong with one sentence that names the
parameter, so a lifecycle ``configure`` can fail with a useful log line.
``load_params_yaml`` reads the standard ROS 2 params file, and
``declarations`` lists what the node must declare (types explicit, because
rclpy types an empty list default as a byte array).

Memory parameters keep the names of ``MemoryConfig`` (eMEM's names) at the top
level; node parameters use dotted groups (``embedding.backend``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import InvalidInputError
from emem_ros.core.types import SourceType
from emem_ros.geometry.rays import DEFAULT_VIEW_RANGE, Mounting
from emem_ros.ros import distro
from emem_ros.ros.camera import DEFAULT_HEADING_NOISE, DEFAULT_PIXEL_NOISE, CameraSpec
from emem_ros.ros.intake import IntakeConfig

__all__ = [
    "ParamError",
    "LayerSpec",
    "NodeParams",
    "parse_params",
    "load_params_yaml",
    "declarations",
    "layer_declarations",
    "layer_param_applies",
    "normalize_msg_type",
    "EMBEDDING_BACKENDS",
    "LLM_BACKENDS",
    "RELIABILITIES",
]

EMBEDDING_BACKENDS = ("auto", "onnx", "sentence_transformers", "ollama", "hashing")
LLM_BACKENDS = ("none", "ollama")
RELIABILITIES = ("reliable", "best_effort")
DEFAULT_ST_MODEL = "all-MiniLM-L6-v2"


# MemoryConfig fields that are fed from a node parameter instead of their own name.
_MEMORY_FROM_NODE = {"embedding_model": "embedding.model", "retention_max_age": "retention.max_age",
                     "retention_rules": "retention.rules"}

_LAYER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ROBOT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TOPIC = re.compile(r"^(~/|/)?[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$")
_MSG_TYPE = re.compile(r"^([a-z][a-z0-9_]*)/(?:(msg)/)?([A-Z][A-Za-z0-9]*)$")


class ParamError(InvalidInputError):
    """A node parameter was rejected; the message names it."""


@dataclass(frozen=True)
class LayerSpec:
    """One subscribed topic and how its messages become observations."""

    name: str
    topic: str
    msg_type: str
    """Normalized ROS type name, ``pkg/msg/Type``."""
    is_internal_state: bool = False
    """Body state (battery, temperatures, diagnostics): stored as interoception."""
    intake: IntakeConfig = field(default_factory=IntakeConfig)
    qos_depth: int = 10
    reliability: str = "reliable"
    view_range: float = DEFAULT_VIEW_RANGE
    """Metres within which this layer's sensor perceives things: the uncertainty of a sighting stored at
    the robot's pose."""
    camera: CameraSpec = field(default_factory=CameraSpec)
    """Detection2DArray layers: intrinsics and mounting that turn box centres into rays."""

    @property
    def source_type(self) -> str:
        source: str = (SourceType.INTEROCEPTION if self.is_internal_state else SourceType.PERCEPTION).value
        return source


@dataclass
class NodeParams:
    """Everything the memory node is configured with, validated."""

    memory: MemoryConfig
    layers: list[LayerSpec] = field(default_factory=list)
    odom_topic: str = "/odom"
    odom_frame: str = ""
    """Expected odometry frame ('' = take any); poses in another frame are ignored."""
    odom_history_seconds: float = 60.0
    odom_max_extrapolation: float = 0.5
    odom_max_gap: float = 5.0
    fixed_frame: str = ""
    """Frame positions are stored and answered in ('map'); '' = the odometry frame (no TF)."""
    base_frame: str = "base_link"
    tf_timeout: float = 0.2
    tf_max_jump: float = 0.25
    tf_topic: str = "/tf"
    tf_static_topic: str = "/tf_static"
    embedding_backend: str = "sentence_transformers"
    """Resolved backend ('auto' is resolved when parsing)."""
    embedding_model: str = DEFAULT_ST_MODEL
    """Resolved model name (never empty for onnx / sentence_transformers / ollama)."""
    ollama_host: str = ""
    llm_backend: str = "none"
    llm_model: str = ""
    flush_period: float = 0.0
    consolidation_period: float = 60.0
    archive_period: float = 600.0
    index_save_period: float = 0.0
    marker_period: float = 2.0
    markers_enabled: bool = True
    fleet_url: str = ""
    """Fleet store (PostgreSQL) the node ships its operation log to; '' = no fleet."""
    fleet_robot_id: str = ""
    fleet_sync_period: float = 5.0

    @property
    def max_text_length(self) -> int:
        """Adapters cap texts to the memory's limit, so the store never rejects one."""
        return int(self.memory.max_text_length)

    def layer(self, name: str) -> LayerSpec:
        for spec in self.layers:
            if spec.name == name:
                return spec
        raise KeyError(f"no layer named {name!r}; layers: {', '.join(s.name for s in self.layers) or 'none'}")


# ---------------------------------------------------------------------- declarations
@dataclass(frozen=True)
class _Param:
    name: str
    default: Any
    type_name: str  # rclpy ParameterType suffix: BOOL, INTEGER, DOUBLE, STRING, STRING_ARRAY
    description: str


_NODE_PARAMS: tuple[_Param, ...] = (
    _Param("layer_names", [], "STRING_ARRAY",
           "Layers to subscribe; each needs layers.<name>.topic and layers.<name>.msg_type."),
    _Param("odom_topic", "/odom", "STRING",
           "nav_msgs/Odometry topic whose poses, interpolated at each message stamp, place observations."),
    _Param("odom_frame", "", "STRING",
           "Expected frame of the odometry poses; '' accepts any frame."),
    _Param("odom_history_seconds", 60.0, "DOUBLE",
           "Seconds of odometry (and of /tf) kept for interpolating late messages."),
    _Param("odom_max_extrapolation", 0.5, "DOUBLE",
           "Seconds a stamp may lie outside the odometry history and still take the nearest pose."),
    _Param("odom_max_gap", 5.0, "DOUBLE",
           "Odometry gaps longer than this are not interpolated across (nearest pose or none)."),
    _Param("fixed_frame", "", "STRING",
           "Frame positions are stored and answered in (REP 105: 'map'), from TF at each message's stamp; "
           "'' = the odometry frame, no TF."),
    _Param("base_frame", "base_link", "STRING", "The robot's base frame: the robot's pose is fixed_frame <- base_frame."),
    _Param("tf_timeout", 0.2, "DOUBLE",
           "Seconds of transforms past a message's stamp that it waits for its own; then it is stored with the "
           "newest transform within odom_max_extrapolation, else without a position (counted as 'no transform')."),
    _Param("tf_max_jump", 0.25, "DOUBLE",
           "Metres (and radians) between two consecutive transforms of one frame that count as a jump "
           "(relocalization, odometry restart): never interpolated across; 0 = no jump detection."),
    _Param("tf_topic", "/tf", "STRING", "tf2_msgs/TFMessage topic of the dynamic transforms (with fixed_frame)."),
    _Param("tf_static_topic", "/tf_static", "STRING",
           "tf2_msgs/TFMessage topic of the static transforms, latched (with fixed_frame)."),
    _Param("embedding.backend", "auto", "STRING",
           "Embedding backend: auto (onnx if onnxruntime is installed, else sentence_transformers), onnx, "
           "sentence_transformers, ollama or hashing (tests only)."),
    _Param("embedding.model", "", "STRING",
           "Embedding model name or path; '' = all-MiniLM-L6-v2 (onnx: also all-MiniLM-L6-v2-int8; "
           "required for ollama)."),
    _Param("ollama_host", "", "STRING",
           "Ollama server URL for embeddings and summaries; '' = OLLAMA_HOST or http://127.0.0.1:11434."),
    _Param("llm.backend", "none", "STRING",
           "LLM for gist summaries: none (extractive summaries) or ollama."),
    _Param("llm.model", "", "STRING", "Ollama chat model for summaries (required when llm.backend is ollama)."),
    _Param("flush_period", 0.0, "DOUBLE",
           "Seconds between node-timer flushes of working memory; 0 = the memory's own thread (flush_interval)."),
    _Param("consolidation_period", 60.0, "DOUBLE",
           "Seconds between node-timer consolidation runs (entities, gists); 0 = off."),
    _Param("archive_period", 600.0, "DOUBLE", "Seconds between node-timer archival runs; 0 = off."),
    _Param("retention.max_age", "", "STRING",
           "Seconds each layer is kept, applied by maintenance: JSON, e.g. '{\"scene\": 86400}'; empty = forever."),
    _Param("retention.rules", "", "STRING",
           "Words forgotten after their own age, applied by maintenance: JSON list, e.g. "
           "'[{\"match\": \"person|man|woman|child\", \"max_age\": 86400}]'; empty = none."),
    _Param("index_save_period", 0.0, "DOUBLE",
           "Seconds between node-timer index saves; 0 = the memory's own thread (index_save_interval)."),
    _Param("marker_period", 2.0, "DOUBLE", "Wall-clock seconds between checks of the entities and gists "
           "shown; the MarkerArray is published when they change."),
    _Param("markers_enabled", True, "BOOL", "Publish entities and gist regions as visualization_msgs/MarkerArray."),
    _Param("fleet.url", "", "STRING",
           "Fleet store to sync the operation log to (postgresql://user@host:port/dbname); '' = no fleet."),
    _Param("fleet.robot_id", "", "STRING", "This robot's id in the fleet store (required with fleet.url)."),
    _Param("fleet.sync_period", 5.0, "DOUBLE",
           "Seconds between fleet syncs (on a worker thread, never the ingest path)."),
)

_MEMORY_DESCRIPTIONS = {
    "db_path": "SQLite memory file; derived index files sit beside it.",
    "index_save_interval": "Seconds between the memory's own index saves (0 = only on close).",
    "working_memory_size": "Observations buffered in RAM before add() flushes synchronously.",
    "flush_interval": "Seconds between the memory's own working-memory flushes (0 = no flush thread).",
    "flush_batch_size": "Buffered observations that trigger a flush.",
    "max_text_length": "Longest observation text; adapters truncate to it.",
    "embedding_cache_size": "Distinct texts whose ids are kept in RAM.",
    "rebuild_on_model_change": "Re-embed everything when the file was built with another model.",
    "consolidation_window": "Seconds an observation stays short-term before time-window consolidation takes it.",
    "consolidation_spatial_eps": "Metres from a place's centre within which the robot is still at that place.",
    "consolidation_min_samples": "Observations a place (and a departure from it) needs; fewer is noise.",
    "consolidation_time_gap": "Seconds without an observation that split a cluster in time.",
    "consolidation_max_extent": "Metres; wider clusters are split.",
    "consolidation_max_size": "Largest cluster summarized at once.",
    "consolidation_per_layer": "Cluster each layer separately.",
    "consolidation_min_dwell": "Seconds away from a place before a new place starts.",
    "consolidation_close_timeout": "Seconds close() lets queued consolidation finish.",
    "consolidation_gc_pause": "Seconds at most that garbage collection stays off during a consolidation job (0 = never).",
    "maintenance_process": "Maintenance reads and plans (entities, gists, archival) in a child process; false: in the node's own.",
    "maintenance_interval": "Seconds between the memory's own maintenance runs (0 = only on call).",
    "llm_timeout": "Wall-clock seconds one LLM summary may take before the plain summary is used.",
    "archive_after_seconds": "Seconds after promotion to long_term before raw text is archived.",
    "archive_retention": "'keep' moves archived raw text to the cold store; 'drop' deletes it.",
    "archive_batch_size": "Observations archived per transaction.",
    "entity_similarity_threshold": "Cosine similarity above which two sightings are one entity.",
    "entity_spatial_radius": "Metres within which two sightings can be one entity.",
    "recency_weight": "Weight of recency in search scores (0 = off).",
    "recency_halflife": "Seconds for the recency boost to halve.",
    "similarity_floor": "Vector hits below this cosine similarity are dropped.",
    "allow_llm_forget": "Offer the forget tool to LLM tool calling (the ~/forget service is always there).",
    "query_cache_enabled": "Answer a repeated question from cache while nothing it depends on was written.",
    "query_cache_threshold": "Cosine of two questions' embeddings from which they count as the same question.",
    "query_cache_size": "Cached answers kept (least recently used dropped first).",
    "query_cache_ttl": "Seconds (wall clock) a cached answer may be served at most.",
    "hnsw_ef_construction": "hnswlib ef_construction.",
    "hnsw_m": "hnswlib M.",
    "hnsw_ef_search": "hnswlib ef at query time.",
    "hnsw_max_elements": "Initial hnswlib capacity (grows by doubling).",
    "gist_graph_hours": "Gists that ended more than this many hours before the newest leave the gists' vector graph "
                        "(its RAM stops growing; filters and keywords still find them; 0 = keep all).",
    "log_enabled": "Append every write to the operation log before SQLite commits it.",
    "log_segment_bytes": "Operation-log segment size in bytes.",
    "log_keep_segments": "Log segments kept behind a checkpoint (0 = keep the whole log).",
    "frame_id": "Frame of stored positions when fixed_frame is empty (the odometry frame); with fixed_frame set, "
                "the memory's frame is fixed_frame.",
    "timezone": "Time zone of time words ('today', 'this morning', 'since 9:00'): 'UTC', 'Europe/Berlin', '+01:00'.",
}

_LAYER_PARAMS: tuple[_Param, ...] = (
    _Param("topic", "", "STRING", "Topic to subscribe (required)."),
    _Param("msg_type", "", "STRING", "Message type, e.g. vision_msgs/msg/Detection2DArray (required)."),
    _Param("is_internal_state", False, "BOOL", "Body state: stored as interoception, seen only by body_status."),
    _Param("qos_depth", 10, "INTEGER", "Subscription queue depth."),
    _Param("reliability", "reliable", "STRING", "Subscription QoS reliability: reliable or best_effort."),
    _Param("intake.mode", "all", "STRING", "'all' keeps every message; 'sampled' thins the stream."),
    _Param("intake.min_period", 1.0, "DOUBLE", "Sampled: seconds between kept drafts of one subject."),
    _Param("intake.change_only", False, "BOOL", "Sampled: keep a draft only when it says something new."),
    _Param("intake.value_tolerance", 0.0, "DOUBLE", "Sampled: a numeric value must move this much to count as new."),
    _Param("intake.max_silence", 60.0, "DOUBLE", "Sampled + change_only: keep an unchanged draft after this long."),
    _Param("view_range", DEFAULT_VIEW_RANGE, "DOUBLE",
           "Metres within which the sensor perceives things: how far a sighting stored at the robot's pose may be."),
    _Param("camera_info_topic", "", "STRING",
           "Detection2DArray layers: sensor_msgs/CameraInfo topic of the camera (intrinsics for bearings)."),
    _Param("camera.fx", 0.0, "DOUBLE", "Detection2DArray layers without CameraInfo: focal length in pixels."),
    _Param("camera.cx", 0.0, "DOUBLE", "Principal point column in pixels (0 = image_width / 2)."),
    _Param("camera.image_width", 0, "INTEGER", "Image width in pixels (with camera.fx when there is no CameraInfo)."),
    _Param("camera.x", 0.0, "DOUBLE", "Camera position on the robot, metres forward of the odometry's base frame."),
    _Param("camera.y", 0.0, "DOUBLE", "Camera position on the robot, metres to the left."),
    _Param("camera.z", 0.0, "DOUBLE", "Camera height above the base frame in metres."),
    _Param("camera.yaw", 0.0, "DOUBLE", "Camera heading relative to the robot in radians (counter-clockwise)."),
    _Param("camera.pixel_noise", DEFAULT_PIXEL_NOISE, "DOUBLE",
           "Pixels (1 sigma) a box centre wanders by: the angular noise of a bearing."),
    _Param("camera.heading_noise", DEFAULT_HEADING_NOISE, "DOUBLE",
           "Radians (1 sigma) of odometry heading and mounting error in a bearing."),
)
_LAYER_BY_KEY = {p.name: p for p in _LAYER_PARAMS}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, int):
        return "INTEGER"
    if isinstance(value, float):
        return "DOUBLE"
    if isinstance(value, str):
        return "STRING"
    raise TypeError(f"no ROS parameter type for {value!r}")


def _memory_params() -> list[_Param]:
    defaults = MemoryConfig()
    out = []
    for f in fields(MemoryConfig):
        if f.name in _MEMORY_FROM_NODE:
            continue
        default = getattr(defaults, f.name)
        description = _MEMORY_DESCRIPTIONS[f.name]  # a new MemoryConfig field needs its sentence here
        out.append(_Param(f.name, default, _type_name(default), description))
    return out


def _top_params() -> dict[str, _Param]:
    return {p.name: p for p in (*_memory_params(), *_NODE_PARAMS)}


def declarations() -> list[tuple[str, Any, str, str]]:
    """Every top-level parameter: (name, default, type name, one-line description).

    The type name is the rclpy ``ParameterType.PARAMETER_<name>`` suffix; declare
    ``STRING_ARRAY`` explicitly (an empty list default would be typed as bytes).
    Per-layer parameters come from ``layer_declarations`` once layer_names is read.
    """
    return [(p.name, _copy(p.default), p.type_name, p.description) for p in _top_params().values()]


def layer_declarations(layer: str) -> list[tuple[str, Any, str, str]]:
    """The parameters of one layer, fully named (``layers.<layer>.topic``, ...)."""
    return [(f"layers.{layer}.{p.name}", p.default, p.type_name, p.description) for p in _LAYER_PARAMS]


# ---------------------------------------------------------------------- parsing
def parse_params(flat: dict[str, Any], *, strict_types: bool = False) -> NodeParams:
    """Validate a flat dotted parameter dict into ``NodeParams``; raise ``ParamError``.

    ``strict_types`` rejects an integer where a double is declared, as rclpy
    does for a params file (``1`` vs ``1.0``); Python callers may leave it off.
    """
    if not isinstance(flat, dict):
        raise ParamError(f"parameters must be a mapping of names to values, got {type(flat).__name__}")
    top = _top_params()
    values: dict[str, Any] = {}
    layer_values: dict[str, dict[str, Any]] = {}
    for name, raw in flat.items():
        if not isinstance(name, str):
            raise ParamError(f"parameter names must be strings, got {name!r}")
        if distro.is_ros_parameter(name):  # every rclpy node has them, or ROS adds them: not ours
            continue
        if name.startswith("layers."):
            layer, _, key = name[len("layers."):].partition(".")
            if not layer or not key:
                raise ParamError(f"parameter {name} is incomplete; use layers.<name>.<setting>")
            spec = _LAYER_BY_KEY.get(key)
            if spec is None:
                raise ParamError(
                    f"unknown parameter {name}; a layer takes {', '.join(p.name for p in _LAYER_PARAMS)}"
                )
            layer_values.setdefault(layer, {})[key] = _typed(name, raw, spec.type_name, strict_types)
            continue
        spec = top.get(name)
        if spec is None:
            raise ParamError(f"unknown parameter {name}{_suggest(name, top)}")
        values[name] = _typed(name, raw, spec.type_name, strict_types)

    def get(name: str) -> Any:
        return values[name] if name in values else _copy(top[name].default)

    layer_names = get("layer_names")
    layers = _parse_layers(layer_names, layer_values)
    embedding_backend, embedding_model = _parse_embedding(get("embedding.backend"), get("embedding.model"))
    llm_backend, llm_model = _parse_llm(get("llm.backend"), get("llm.model"))

    memory_values = {p.name: get(p.name) for p in _memory_params()}
    memory_values["embedding_model"] = embedding_model or MemoryConfig().embedding_model
    memory_values["retention_max_age"] = _json_param("retention.max_age", get("retention.max_age"), {})
    memory_values["retention_rules"] = _json_param("retention.rules", get("retention.rules"), [])
    fixed_frame, base_frame = _frame_param("fixed_frame", get("fixed_frame")), _frame_param("base_frame",
                                                                                           get("base_frame"))
    if fixed_frame:
        if not base_frame:
            raise ParamError("base_frame must name the robot's base frame (e.g. 'base_link') when fixed_frame is set")
        if base_frame == fixed_frame:
            raise ParamError(f"base_frame and fixed_frame are both {fixed_frame!r}: the robot's pose would always "
                             "be the origin")
        memory_values["frame_id"] = fixed_frame  # the memory's frame is the fixed frame
    try:
        memory = MemoryConfig(**memory_values).validate()
    except InvalidInputError as exc:  # its messages already name the field
        raise ParamError(str(exc)) from exc

    odom_topic = get("odom_topic")
    _check_topic("odom_topic", odom_topic)
    _check_positive("odom_history_seconds", get("odom_history_seconds"))
    for topic_param in ("tf_topic", "tf_static_topic"):
        _check_topic(topic_param, get(topic_param))
    if get("tf_topic") == get("tf_static_topic"):
        raise ParamError("tf_topic and tf_static_topic must differ (static transforms are latched)")
    for name in ("tf_timeout", "tf_max_jump", "odom_max_extrapolation", "odom_max_gap", "flush_period", "consolidation_period", "archive_period", "index_save_period"):
        _check_non_negative(name, get(name))
    if get("markers_enabled"):
        _check_positive("marker_period", get("marker_period"))
    else:
        _check_non_negative("marker_period", get("marker_period"))
    fleet_url, fleet_robot_id = get("fleet.url").strip(), get("fleet.robot_id").strip()
    if fleet_url:
        if not fleet_url.startswith(("postgresql://", "postgres://")):
            raise ParamError(f"fleet.url must be a PostgreSQL URL (postgresql://user@host:port/dbname), "
                             f"got {fleet_url.split('@')[-1]!r}")
        if not _ROBOT_ID.match(fleet_robot_id):
            raise ParamError("fleet.robot_id must be 1-64 letters, digits, '_', '.' or '-' (starting with a letter "
                             f"or digit) when fleet.url is set, got {fleet_robot_id!r}")
        _check_positive("fleet.sync_period", get("fleet.sync_period"))
    if get("consolidation_period") > 0 and memory.maintenance_interval > 0:
        raise ParamError(
            "consolidation_period and maintenance_interval both schedule consolidation; set one of them to 0"
        )
    return NodeParams(
        memory=memory,
        layers=layers,
        odom_topic=odom_topic,
        odom_frame=get("odom_frame").strip(),
        odom_history_seconds=float(get("odom_history_seconds")),
        odom_max_extrapolation=float(get("odom_max_extrapolation")),
        odom_max_gap=float(get("odom_max_gap")),
        fixed_frame=fixed_frame,
        base_frame=base_frame,
        tf_timeout=float(get("tf_timeout")),
        tf_max_jump=float(get("tf_max_jump")),
        tf_topic=get("tf_topic"),
        tf_static_topic=get("tf_static_topic"),
        embedding_backend=embedding_backend,
        embedding_model=embedding_model,
        ollama_host=get("ollama_host").strip(),
        llm_backend=llm_backend,
        llm_model=llm_model,
        flush_period=float(get("flush_period")),
        consolidation_period=float(get("consolidation_period")),
        archive_period=float(get("archive_period")),
        index_save_period=float(get("index_save_period")),
        marker_period=float(get("marker_period")),
        markers_enabled=bool(get("markers_enabled")),
        fleet_url=fleet_url,
        fleet_robot_id=fleet_robot_id,
        fleet_sync_period=float(get("fleet.sync_period")),
    )


def _parse_layers(layer_names: list[str], layer_values: dict[str, dict[str, Any]]) -> list[LayerSpec]:
    seen: set[str] = set()
    for name in layer_names:
        if not _LAYER_NAME.match(name):
            raise ParamError(
                f"layer_names entry {name!r} is not a valid layer name (letters, digits and _; starts with a letter)"
            )
        if name in seen:
            raise ParamError(f"layer_names lists {name!r} twice")
        seen.add(name)
    for name, given in layer_values.items():
        if name not in seen:
            key = next(iter(given))
            raise ParamError(f"layers.{name}.{key} configures layer {name!r}, which is not in layer_names")

    layers: list[LayerSpec] = []
    topics: dict[str, str] = {}
    for name in layer_names:
        given = layer_values.get(name, {})

        def get(key: str, given: dict[str, Any] = given) -> Any:
            return given[key] if key in given else _LAYER_BY_KEY[key].default

        prefix = f"layers.{name}"
        topic = get("topic").strip()
        if not topic:
            raise ParamError(f"{prefix}.topic is missing; every layer in layer_names needs a topic")
        _check_topic(f"{prefix}.topic", topic)
        if topic in topics:
            raise ParamError(f"{prefix}.topic {topic!r} is already the topic of layer {topics[topic]!r}; "
                             "one topic feeds one layer")
        topics[topic] = name
        raw_type = get("msg_type").strip()
        if not raw_type:
            raise ParamError(f"{prefix}.msg_type is missing, e.g. 'std_msgs/msg/String'")
        try:
            msg_type = normalize_msg_type(raw_type)
        except ValueError as exc:
            raise ParamError(f"{prefix}.msg_type {exc}") from exc
        qos_depth = get("qos_depth")
        if qos_depth < 1:
            raise ParamError(f"{prefix}.qos_depth must be a positive integer, got {qos_depth!r}")
        reliability = get("reliability").strip()
        if reliability not in RELIABILITIES:
            raise ParamError(f"{prefix}.reliability must be 'reliable' or 'best_effort', got {reliability!r}")
        intake = IntakeConfig(
            mode=get("intake.mode").strip(),
            min_period=float(get("intake.min_period")),
            change_only=get("intake.change_only"),
            value_tolerance=float(get("intake.value_tolerance")),
            max_silence=float(get("intake.max_silence")),
        )
        try:
            intake.validate(prefix=f"{prefix}.intake")
        except InvalidInputError as exc:
            raise ParamError(str(exc)) from exc
        view_range = get("view_range")
        _check_positive(f"{prefix}.view_range", view_range)
        camera = _parse_camera(prefix, msg_type, given, get)
        layers.append(LayerSpec(name=name, topic=topic, msg_type=msg_type,
                                is_internal_state=get("is_internal_state"), intake=intake,
                                qos_depth=qos_depth, reliability=reliability, view_range=float(view_range),
                                camera=camera))
    infos = {spec.camera.info_topic for spec in layers if spec.camera.info_topic}
    clash = infos & set(topics)
    if clash:
        topic = sorted(clash)[0]
        raise ParamError(f"{topic!r} is both the topic of layer {topics[topic]!r} and a camera_info_topic")
    return layers


CAMERA_LAYER_TYPE = "vision_msgs/msg/Detection2DArray"


def layer_param_applies(key: str, msg_type: str, is_internal_state: bool) -> bool:
    """Whether a layer parameter means anything for a layer of this type (a params file lists those)."""
    if key == "camera_info_topic" or key.startswith("camera."):
        return normalize_msg_type(msg_type) == CAMERA_LAYER_TYPE
    if key == "view_range":
        return not is_internal_state
    return True


def _parse_camera(prefix: str, msg_type: str, given: dict[str, Any], get: Any) -> CameraSpec:
    """A layer's camera settings; refused on a layer that has no boxes to turn into bearings.

    Values equal to the defaults are no settings (the node passes every declared parameter).
    """
    keys = [key for key in given if (key == "camera_info_topic" or key.startswith("camera."))
            and given[key] != _LAYER_BY_KEY[key].default]
    if not keys:
        return CameraSpec()
    if msg_type != CAMERA_LAYER_TYPE:
        raise ParamError(f"{prefix}.{keys[0]} is set, but bearings come only from {CAMERA_LAYER_TYPE} layers "
                         f"(this one is {msg_type})")
    info_topic = get("camera_info_topic").strip()
    if info_topic:
        _check_topic(f"{prefix}.camera_info_topic", info_topic)
    fx, cx, width = float(get("camera.fx")), float(get("camera.cx")), get("camera.image_width")
    for key, value in (("camera.fx", fx), ("camera.cx", cx), ("camera.pixel_noise", get("camera.pixel_noise")),
                       ("camera.heading_noise", get("camera.heading_noise"))):
        _check_non_negative(f"{prefix}.{key}", value)
    if width < 0:
        raise ParamError(f"{prefix}.camera.image_width must be zero or a positive integer, got {width!r}")
    if (fx > 0.0) != (width > 0):
        raise ParamError(f"{prefix}.camera.fx and {prefix}.camera.image_width go together: set both "
                         "(or neither, and camera_info_topic)")
    if width > 0 and cx > width:
        raise ParamError(f"{prefix}.camera.cx {cx:g} lies outside the {width} px wide image")
    yaw = float(get("camera.yaw"))
    if abs(yaw) > 2 * math.pi:
        raise ParamError(f"{prefix}.camera.yaw is in radians and must lie within ±2π, got {yaw!r}")
    if get("camera.heading_noise") > 0.5:
        raise ParamError(f"{prefix}.camera.heading_noise is in radians (1 sigma); {get('camera.heading_noise')!r}"
                         " would make every bearing meaningless")
    spec = CameraSpec(info_topic=info_topic, fx=fx, cx=cx, image_width=width,
                      mounting=Mounting(float(get("camera.x")), float(get("camera.y")), float(get("camera.z")), yaw),
                      pixel_noise=float(get("camera.pixel_noise")),
                      heading_noise=float(get("camera.heading_noise")))
    if not spec.configured:
        raise ParamError(f"{prefix} has camera settings but no intrinsics: set {prefix}.camera_info_topic, "
                         f"or {prefix}.camera.fx and {prefix}.camera.image_width")
    return spec


def normalize_msg_type(name: str) -> str:
    """'std_msgs/String' or 'std_msgs/msg/String' -> 'std_msgs/msg/String'; ValueError otherwise."""
    text = str(name).strip()
    match = _MSG_TYPE.match(text)
    if match is None:
        if re.match(r"^[a-z][a-z0-9_]*/(srv|action)/", text):
            raise ValueError(f"{text!r} is a service or action type; a layer subscribes to a message type")
        raise ValueError(f"{text!r} is not a message type name like 'std_msgs/msg/String'")
    return f"{match.group(1)}/msg/{match.group(3)}"


def _parse_embedding(backend: str, model: str) -> tuple[str, str]:
    backend, model = backend.strip(), model.strip()
    if backend not in EMBEDDING_BACKENDS:
        raise ParamError(f"embedding.backend must be one of {', '.join(EMBEDDING_BACKENDS)}, got {backend!r}")
    if backend == "auto":
        from emem_ros.embeddings.factory import default_backend

        backend = default_backend()
    if backend == "onnx":
        from emem_ros.embeddings.factory import check_onnx_model

        try:
            check_onnx_model(model)
        except InvalidInputError as exc:
            raise ParamError(str(exc)) from exc
        model = model or DEFAULT_ST_MODEL
    if backend == "sentence_transformers" and not model:
        model = DEFAULT_ST_MODEL
    if backend == "ollama" and not model:
        raise ParamError("embedding.model must name an Ollama embedding model (e.g. 'nomic-embed-text') "
                         "when embedding.backend is 'ollama'")
    return backend, model


_FRAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$")


def _frame_param(name: str, value: str) -> str:
    """A TF frame name ('/map' is 'map'); '' stays ''. Spaces and other characters are refused."""
    frame = str(value).strip().lstrip("/")
    if frame and not _FRAME.match(frame):
        raise ParamError(f"{name} {value!r} is not a TF frame name (letters, digits, '_', '.', '/', '-')")
    return frame


def _json_param(name: str, text: str, empty: Any) -> Any:
    """A structured parameter given as JSON text (ROS parameters cannot be maps or lists of maps)."""
    if not str(text).strip():
        return empty
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ParamError(f"{name} must be JSON, e.g. {json.dumps(empty) or '{}'}: {exc}") from None
    if type(value) is not type(empty):
        raise ParamError(f"{name} must be a JSON {'object' if isinstance(empty, dict) else 'list'}, got {text!r}")
    return value


def _parse_llm(backend: str, model: str) -> tuple[str, str]:
    backend, model = backend.strip(), model.strip()
    if backend not in LLM_BACKENDS:
        raise ParamError(f"llm.backend must be one of {', '.join(LLM_BACKENDS)}, got {backend!r}")
    if backend == "ollama" and not model:
        raise ParamError("llm.model must name an Ollama chat model when llm.backend is 'ollama'")
    return backend, model


def _typed(name: str, value: Any, type_name: str, strict: bool) -> Any:
    if type_name == "BOOL":
        if isinstance(value, bool):
            return value
        raise ParamError(f"{name} must be true or false, got {value!r}")
    if type_name == "INTEGER":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ParamError(f"{name} must be an integer, got {value!r}")
    if type_name == "DOUBLE":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamError(f"{name} must be a number, got {value!r}")
        if strict and isinstance(value, int):
            raise ParamError(f"{name} must be written as a floating-point number ({value}.0): "
                             "ROS 2 rejects an integer for a double parameter")
        if not math.isfinite(value):
            raise ParamError(f"{name} must be a finite number, got {value!r}")
        return float(value)
    if type_name == "STRING":
        if isinstance(value, str):
            return value
        raise ParamError(f"{name} must be a string, got {value!r}")
    if type_name == "STRING_ARRAY":
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return [v.strip() for v in value]
        raise ParamError(f"{name} must be a list of strings, got {value!r}")
    raise AssertionError(f"unhandled parameter type {type_name}")


def _check_topic(name: str, topic: str) -> None:
    if not _TOPIC.match(topic):
        raise ParamError(f"{name} {topic!r} is not a valid ROS topic name (e.g. '/detections')")


def _check_positive(name: str, value: float) -> None:
    if value <= 0:
        raise ParamError(f"{name} must be a positive number, got {value!r}")


def _check_non_negative(name: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ParamError(f"{name} must be zero or a positive number, got {value!r}")


def _suggest(name: str, known: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


# ---------------------------------------------------------------------- YAML
def load_params_yaml(path: Union[str, Path], node_name: Optional[str] = None, *,
                     strict_types: bool = True, overrides: Optional[dict[str, Any]] = None) -> NodeParams:
    """Read a ROS 2 params file (``<node or /**>: ros__parameters: {...}``) and parse it.

    ``overrides`` (dotted names) win over the file, as ``--ros-args -p`` does.

    Sections whose key matches ``node_name`` (``/**``, ``/**/name``, ``/ns/name``,
    ``name``) are merged in file order; without a node name the file must hold
    one node's parameters (``/**`` sections plus at most one named node).
    """
    import yaml

    file = Path(path)
    try:
        document = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ParamError(f"cannot read params file {file}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ParamError(f"params file {file} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict) or not document:
        raise ParamError(f"params file {file} must map node names to 'ros__parameters'")
    sections = [key for key in document if _node_matches(str(key), node_name)]
    named = [key for key in sections if str(key) != "/**"]
    if node_name is None and len(named) > 1:
        raise ParamError(f"params file {file} has sections for several nodes ({', '.join(map(str, named))}); "
                         "pass node_name")
    if not sections:
        raise ParamError(f"params file {file} has no section for node {node_name!r}")
    flat: dict[str, Any] = {}
    for key in sections:
        body = document[key]
        if not isinstance(body, dict) or "ros__parameters" not in body:
            raise ParamError(f"section {key} of {file} must contain 'ros__parameters'")
        params = body["ros__parameters"]
        if params is None:
            continue
        if not isinstance(params, dict):
            raise ParamError(f"{key}.ros__parameters in {file} must be a mapping")
        _flatten(params, "", flat)
    flat.update(overrides or {})
    return parse_params(flat, strict_types=strict_types)


def _node_matches(key: str, node_name: Optional[str]) -> bool:
    if key == "/**":
        return True
    if node_name is None:
        return True
    full = node_name if node_name.startswith("/") else "/" + node_name
    pattern = key if key.startswith("/") else "/" + key
    if pattern == full:
        return True
    # ROS wildcards: '**' any number of tokens, '*' one token.
    regex = re.escape(pattern).replace(r"/\*\*", "(/[^/]+)*").replace(r"\*", "[^/]+")
    return re.fullmatch(regex, full) is not None


def _flatten(tree: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, name + ".", out)
        else:
            out[name] = value
