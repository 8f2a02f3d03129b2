"""Fallback for message types without an adapter: the fields, rendered compactly.

``linear={x=0.5 y=0 z=0} angular={x=0 y=0 z=0.1}``. Big arrays and byte
buffers become their length ("<921600 bytes>"), nesting is bounded, and
rendering stops once the text budget is spent, so a point cloud costs
nothing. The header is left out: its stamp is the draft's stamp.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.base import LayerLike, SkipMessage, cap_text, draft, format_number, frame_of, message_stamp

MAX_ITEMS = 8
MAX_DEPTH = 4
MAX_CHARS = 512
MAX_STRING = 120
_FIELD = re.compile(r"^[a-z][a-z0-9_]*$")


def adapt_generic(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    if field_names(msg) is None:
        raise SkipMessage(f"{type(msg).__name__} object is not a ROS message")
    text = render(msg)
    if not text:
        text = f"{layer.name} event"  # std_msgs/Empty and friends: the arrival is the news
    metadata: dict[str, Any] = {}
    msg_type = message_type(msg)
    if msg_type:
        metadata["msg_type"] = msg_type
    frame = frame_of(msg)
    if frame:
        metadata["frame_id"] = frame
    return [draft(layer, text, message_stamp(msg, receive_time), metadata=metadata)]


def message_type(msg: Any) -> Optional[str]:
    """'pkg/msg/Type' of a rosbags or rclpy message, None for anything else."""
    name = getattr(msg, "__msgtype__", None)
    if isinstance(name, str) and name:
        return name
    cls = type(msg)
    if hasattr(cls, "get_fields_and_field_types"):  # rclpy: module 'pkg.msg._type'
        parts = cls.__module__.split(".")
        if len(parts) >= 2 and parts[1] == "msg":
            return f"{parts[0]}/msg/{cls.__name__}"
    return None


def field_names(obj: Any) -> Optional[list[str]]:
    """Field names of a message object (rclpy or rosbags), None for a plain value."""
    getter = getattr(type(obj), "get_fields_and_field_types", None)
    if getter is not None:
        names = list(getter())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = [f.name for f in dataclasses.fields(obj)]
    else:
        return None
    # rosbags dataclasses also carry the constants (UPPER_CASE) and __msgtype__; ROS field
    # names are lower case. Empty messages have a placeholder member in the IDL.
    return [n for n in names if _FIELD.match(n) and n != "structure_needs_at_least_one_member"]


def render(msg: Any, limit: int = MAX_CHARS) -> str:
    """Compact one-line rendering of a message's fields, at most ``limit`` characters."""
    out: list[str] = []
    budget = [limit + 1]  # one past the limit tells cap_text to add the ellipsis

    def emit(piece: str) -> bool:
        if budget[0] <= 0:
            return False
        out.append(piece[: budget[0]])
        budget[0] -= len(piece)
        return budget[0] > 0

    def walk(value: Any, depth: int) -> None:
        names = field_names(value)
        if names is not None:
            if depth >= MAX_DEPTH:
                emit("{…}")
                return
            if depth:
                emit("{")
            first = True
            for name in names:
                if depth == 0 and name == "header":
                    continue
                if not first and not emit(" "):
                    return
                first = False
                if not emit(f"{name}="):
                    return
                walk(getattr(value, name, None), depth + 1)
                if budget[0] <= 0:
                    return
            if depth:
                emit("}")
            return
        emit(_leaf(value, depth, walk))

    walk(msg, 0)
    return cap_text("".join(out).strip(), limit)


def _leaf(value: Any, depth: int, walk: Any) -> str:
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "true" if value else "false"
    if isinstance(value, str):
        return cap_text(value, MAX_STRING) if " " not in value else f'"{cap_text(value, MAX_STRING)}"'
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if value is None:
        return "none"
    items = _sequence(value)
    if items is not None:
        if len(items) > MAX_ITEMS or _is_byte_array(value):
            unit = "bytes" if _is_byte_array(value) else "items"
            return f"<{len(items)} {unit}>"
        parts = []
        for item in items:
            if field_names(item) is not None:
                parts.append(render(item, MAX_CHARS // 2).join("{}"))
            else:
                parts.append(_leaf(item, depth + 1, walk))
        return "[" + ", ".join(parts) + "]"
    if hasattr(value, "__index__"):
        return str(int(value))
    if isinstance(value, float) or type(value).__name__ in ("float32", "float64", "float16"):
        return format_number(float(value))
    return cap_text(str(value), MAX_STRING)


def _sequence(value: Any) -> Optional[Any]:
    if isinstance(value, (list, tuple)):
        return value
    if hasattr(value, "tolist") and hasattr(value, "__len__"):  # numpy arrays (rosbags)
        return value
    if type(value).__name__ == "array" and hasattr(value, "typecode"):  # array.array (rclpy)
        return value
    return None


def _is_byte_array(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return str(dtype) in ("uint8", "int8")
    return getattr(value, "typecode", None) in ("B", "b")
