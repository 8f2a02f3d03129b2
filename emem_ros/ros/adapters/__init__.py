"""Message adapters: one small module per message family, one ``adapt`` entry point.

``adapt(msg, layer, receive_time) -> AdaptResult`` picks the adapter for the
layer's message type (a generic field renderer for unknown types) and never
raises. Each adapter is ``(msg, layer, receive_time) -> list[ObservationDraft]``
and reads messages by attribute access only (rclpy and rosbags alike).
"""

from emem_ros.ros.adapters.base import DEFAULT_MAX_TEXT_LENGTH, Adapter, AdaptResult, SkipMessage, message_stamp
from emem_ros.ros.adapters.generic import message_type, render
from emem_ros.ros.adapters.registry import GENERIC, adapt, adapter_for, register, supported_types

__all__ = [
    "Adapter",
    "AdaptResult",
    "DEFAULT_MAX_TEXT_LENGTH",
    "GENERIC",
    "SkipMessage",
    "adapt",
    "adapter_for",
    "message_stamp",
    "message_type",
    "register",
    "render",
    "supported_types",
]
