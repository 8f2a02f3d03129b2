"""Message type -> adapter, and ``adapt``: one message in, drafts or a reason out.

``adapt`` never raises: a node callback must survive any message, so an
adapter's ``SkipMessage`` and the attribute/type errors of a malformed or
mistyped message all become ``AdaptResult(drafts=[], skipped_reason=...)``.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Any, Optional

from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.agents_msgs import (
    DETECTIONS_2D,
    DETECTIONS_MULTI,
    STREAMING_STRING,
    adapt_detections2d,
    adapt_detections_multi,
    adapt_streaming_string,
)
from emem_ros.ros.adapters.base import (
    DEFAULT_MAX_TEXT_LENGTH,
    Adapter,
    AdaptResult,
    LayerLike,
    SkipMessage,
    cap_text,
    collecting_notes,
)
from emem_ros.ros.adapters.battery import adapt_battery
from emem_ros.ros.adapters.detections import adapt_detection2d_array, adapt_detection3d_array
from emem_ros.ros.adapters.diagnostics import adapt_diagnostics
from emem_ros.ros.adapters.generic import adapt_generic, message_type
from emem_ros.ros.adapters.scalars import BOOL_TYPE, NUMERIC_TYPES, adapt_bool, adapt_number
from emem_ros.ros.adapters.temperature import adapt_temperature
from emem_ros.ros.adapters.text import adapt_string
from emem_ros.ros.params import normalize_msg_type

GENERIC = "generic"

_ADAPTERS: dict[str, Adapter] = {
    "std_msgs/msg/String": adapt_string,
    BOOL_TYPE: adapt_bool,
    **{name: adapt_number for name in NUMERIC_TYPES},
    "sensor_msgs/msg/BatteryState": adapt_battery,
    "sensor_msgs/msg/Temperature": adapt_temperature,
    "vision_msgs/msg/Detection2DArray": adapt_detection2d_array,
    "vision_msgs/msg/Detection3DArray": adapt_detection3d_array,
    "diagnostic_msgs/msg/DiagnosticArray": adapt_diagnostics,
    DETECTIONS_2D: adapt_detections2d,  # EmbodiedAgents' Vision component
    DETECTIONS_MULTI: adapt_detections_multi,
    STREAMING_STRING: adapt_streaming_string,  # EmbodiedAgents' LLM / VLM output
}
_LOCK = threading.Lock()
_MALFORMED = (AttributeError, TypeError, ValueError, IndexError, KeyError, OverflowError)


def register(msg_type: str, adapter: Adapter, *, replace: bool = False) -> None:
    """Add an adapter for a message type ('pkg/msg/Type' or 'pkg/Type')."""
    name = normalize_msg_type(msg_type)
    with _LOCK:
        if name in _ADAPTERS and not replace:
            raise ValueError(f"{name} already has an adapter; pass replace=True to override it")
        _ADAPTERS[name] = adapter


def supported_types() -> list[str]:
    """Message types with a dedicated adapter (everything else gets the generic one)."""
    return sorted(_ADAPTERS)


def adapter_for(msg_type: Optional[str]) -> tuple[str, Adapter]:
    """(type name or 'generic', adapter) for a type name in either spelling."""
    if msg_type:
        try:
            name = normalize_msg_type(msg_type)
        except ValueError:
            return GENERIC, adapt_generic
        adapter = _ADAPTERS.get(name)
        if adapter is not None:
            return name, adapter
    return GENERIC, adapt_generic


def adapt(msg: Any, layer: LayerLike, receive_time: float, *,
          max_text_length: int = DEFAULT_MAX_TEXT_LENGTH) -> AdaptResult:
    """Turn one message of ``layer`` into drafts; never raises.

    The adapter is chosen by ``layer.msg_type`` (else by the message's own type).
    A message whose own type is known and differs from the layer's is skipped.
    """
    adapter_name = GENERIC
    notes: list[str] = []
    try:
        receive = float(receive_time)
        if not math.isfinite(receive):
            return AdaptResult(skipped_reason=f"receive time {receive_time!r} is not finite")
        declared = getattr(layer, "msg_type", None) or None
        actual = message_type(msg)
        if declared and actual and _same_type(declared, actual) is False:
            return AdaptResult(skipped_reason=f"got a {actual} message on a layer of type {declared}")
        adapter_name, adapter = adapter_for(declared or actual)
        with collecting_notes(notes):
            drafts = adapter(msg, layer, receive)
        return AdaptResult(drafts=_finish(drafts, max_text_length), partial=tuple(notes), adapter=adapter_name)
    except SkipMessage as exc:
        reason = str(exc)
    except _MALFORMED as exc:
        reason = f"malformed message for the {adapter_name} adapter: {exc}"
    except Exception as exc:  # an adapter bug must not take the node down
        reason = f"{adapter_name} adapter failed: {type(exc).__name__}: {exc}"
    return AdaptResult(skipped_reason=reason, partial=tuple(notes), adapter=adapter_name)


def _same_type(declared: str, actual: str) -> Optional[bool]:
    try:
        return normalize_msg_type(declared) == normalize_msg_type(actual)
    except ValueError:
        return None


def _finish(drafts: list[ObservationDraft], limit: int) -> list[ObservationDraft]:
    """Cap texts, drop blank ones; a capped text keeps its original length in metadata."""
    limit = max(1, int(limit))
    out = []
    for item in drafts:
        if not isinstance(item, ObservationDraft):
            raise TypeError(f"adapter returned {type(item).__name__}, not an ObservationDraft")
        text = item.text.strip()
        if not text:
            continue
        if not math.isfinite(item.stamp):
            raise ValueError(f"draft stamp {item.stamp!r} is not finite")
        if len(text) > limit:
            item = dataclasses.replace(item, text=cap_text(text, limit),
                                       metadata={**item.metadata, "text_length": len(text)})
        elif text != item.text:
            item = dataclasses.replace(item, text=text)
        out.append(item)
    if not out and drafts:
        raise SkipMessage("every draft had an empty text")
    return out
