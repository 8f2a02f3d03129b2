"""EmbodiedAgents Memory's constructor arguments as emem_ros node parameters (the flat dotted dict).

``flat_params(layers, position, config, trigger, overrides)`` reads the
``MemLayer``s, the position ``Topic`` and the ``MemoryConfig`` by attribute
(no EmbodiedAgents import) and returns what ``emem_ros.ros.params.parse_params``
validates, so the component's memory is configured exactly like the node's:

- a layer is named after its topic, as EmbodiedAgents names it ('scene',
  'robot/scene' -> 'robot_scene'); its message type is the topic's ROS type;
  ``is_internal_state`` keeps its meaning (body state, seen by body_status);
- a float ``trigger`` (EmbodiedAgents stores each layer's latest message every
  ``trigger`` seconds) becomes each layer's intake: at most one observation
  per subject (a detected class, a caption) every ``trigger`` seconds of
  message time; ``temporal_change`` keeps only what changed;
- ``MemoryConfig`` fields keep their eMEM names; a field is passed on only when
  it differs from EmbodiedAgents' default, so their defaults give ours;
- ``overrides`` (dotted emem_ros parameter names) go on top: anything the
  node takes (``embedding.backend``, ``frame_id``, ``layers.<name>.view_range``...).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional

from emem_ros.core.errors import InvalidInputError

SAME_NAME = ("db_path", "working_memory_size", "flush_interval", "flush_batch_size", "consolidation_window",
             "consolidation_spatial_eps", "consolidation_min_samples", "archive_after_seconds",
             "entity_similarity_threshold", "entity_spatial_radius", "recency_weight", "recency_halflife",
             "hnsw_ef_construction", "hnsw_m", "hnsw_ef_search", "hnsw_max_elements")
"""EmbodiedAgents MemoryConfig fields that are emem_ros MemoryConfig fields of the same name and meaning."""
RENAMED = {"entity_extract_time_interval": "maintenance_interval"}
"""EmbodiedAgents' name -> ours (entities and gists are made by the memory's own maintenance runs)."""
NOT_USED = ("entity_extract_flush_interval",)
"""No counterpart: maintenance runs on time only."""
DEFAULT_CHECKPOINT = "all-MiniLM-L6-v2"
DEFAULT_TRIGGER = 1.0
"""Seconds between kept observations of one subject when the trigger is a topic or an event."""

_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_]")


def layer_name(topic_name: str) -> str:
    """Our layer name for an EmbodiedAgents layer (its topic name): letters, digits and '_'."""
    name = _NOT_A_NAME.sub("_", topic_name.strip().strip("/"))
    if not name:
        raise InvalidInputError(f"topic name {topic_name!r} gives no layer name")
    return name if name[0].isalpha() else f"layer_{name}"


def ros_type_name(msg_class: Any) -> str:
    """'pkg/msg/Type' of an rclpy message class (module 'pkg.msg._type')."""
    module = getattr(msg_class, "__module__", "") or ""
    package = module.split(".")[0]
    if not package or ".msg" not in module:
        raise InvalidInputError(f"{msg_class!r} is not a ROS message class")
    return f"{package}/msg/{msg_class.__name__}"


def topic_path(topic_name: str) -> str:
    name = topic_name.strip()
    return name if name.startswith(("/", "~/")) else f"/{name}"


def flat_params(layers: Iterable[Any], position: Any, config: Any = None, trigger: Any = None,
                overrides: Optional[Mapping[str, Any]] = None, config_defaults: Any = None) -> dict[str, Any]:
    """The node parameters these constructor arguments mean (``parse_params`` validates them)."""
    period = float(trigger) if isinstance(trigger, (int, float)) and not isinstance(trigger, bool) else DEFAULT_TRIGGER
    flat: dict[str, Any] = {"odom_topic": topic_path(position.name), "consolidation_period": 0.0,
                            "archive_period": 0.0, "markers_enabled": False, "marker_period": 0.0}
    names: list[str] = []
    for layer in layers:
        topic = layer.subscribes_to
        name = layer_name(topic.name)
        if name in names:
            raise InvalidInputError(f"two layers are named {name!r} (topics are named after their layer)")
        names.append(name)
        prefix = f"layers.{name}."
        flat[prefix + "topic"] = topic_path(topic.name)
        flat[prefix + "msg_type"] = ros_type_name(topic.ros_msg_type)
        flat[prefix + "is_internal_state"] = bool(getattr(layer, "is_internal_state", False))
        flat[prefix + "intake.mode"] = "sampled"
        flat[prefix + "intake.min_period"] = period
        flat[prefix + "intake.change_only"] = bool(getattr(layer, "temporal_change", False))
    flat["layer_names"] = names
    flat.update(_config_params(config, config_defaults))
    flat.update(overrides or {})
    return flat


def _config_params(config: Any, defaults: Any) -> dict[str, Any]:
    """The MemoryConfig fields the recipe set (those that differ from EmbodiedAgents' defaults)."""
    if config is None:
        return {"maintenance_interval": 60.0}
    out: dict[str, Any] = {}

    def given(name: str) -> bool:
        return defaults is None or getattr(defaults, name, None) != getattr(config, name)

    for name in SAME_NAME:
        if hasattr(config, name) and (name == "db_path" or given(name)):
            out[name] = getattr(config, name)
    for theirs, ours in RENAMED.items():
        if hasattr(config, theirs):
            out[ours] = float(getattr(config, theirs))
    checkpoint = getattr(config, "embedding_checkpoint", DEFAULT_CHECKPOINT)
    if checkpoint and checkpoint != DEFAULT_CHECKPOINT:
        out["embedding.backend"] = "sentence_transformers"
        out["embedding.model"] = checkpoint
    return out
