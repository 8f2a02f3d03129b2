"""std_msgs numbers and booleans: one reading named after its layer ("cpu_load: 0.73")."""

from __future__ import annotations

from typing import Any

from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.base import LayerLike, byte_value, draft, finite, format_number, message_stamp

NUMERIC_TYPES = (
    "std_msgs/msg/Float32", "std_msgs/msg/Float64",
    "std_msgs/msg/Int8", "std_msgs/msg/Int16", "std_msgs/msg/Int32", "std_msgs/msg/Int64",
    "std_msgs/msg/UInt8", "std_msgs/msg/UInt16", "std_msgs/msg/UInt32", "std_msgs/msg/UInt64",
    "std_msgs/msg/Byte",
)
BOOL_TYPE = "std_msgs/msg/Bool"


def adapt_number(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    data = msg.data
    if isinstance(data, (bytes, bytearray)):  # std_msgs/Byte in rclpy
        data = byte_value(data)
    if type(data).__name__ in ("bool", "bool_"):
        raise TypeError(f"data is a boolean ({data!r}) on a numeric layer")
    value = finite(data, "data")
    # Integers print exactly (a float would round a large UInt64); floats compactly.
    text = str(int(data)) if _is_integer(data) else format_number(value)
    return [draft(layer, f"{layer.name}: {text}", message_stamp(msg, receive_time), value=value)]


def adapt_bool(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    data = msg.data
    if type(data).__name__ not in ("bool", "bool_"):
        raise TypeError(f"data must be a boolean, got {type(data).__name__}")
    flag = bool(data)
    return [draft(layer, f"{layer.name}: {'true' if flag else 'false'}", message_stamp(msg, receive_time),
                  value=1.0 if flag else 0.0)]


def _is_integer(data: Any) -> bool:
    return hasattr(data, "__index__") and not isinstance(data, bool)
