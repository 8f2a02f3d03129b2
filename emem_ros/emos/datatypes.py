"""Our layer message types as EmbodiedAgents topic types, so a recipe can write ``Topic(msg_type="Detection3DArray")``.

EmbodiedAgents' ``Topic`` accepts only registered ``SupportedType`` names; its
own Memory takes String, StreamingString, Detections and
DetectionsMultiSource. The emem_ros memory reads more (3-D detections with the
object's own position, battery, temperatures, diagnostics), so these are
registered when ``emem_ros.emos`` is imported. Their callbacks hand the
message on unchanged (the component ingests the message, not a rendering);
``get_output`` renders it for EmbodiedAgents' UI and inspection.
"""

from __future__ import annotations

from typing import Any, Optional

from ros_sugar.io.callbacks import GenericCallback
from ros_sugar.io.supported_types import SupportedType, add_additional_datatypes

from emem_ros.ros.adapters.generic import render


class MessageCallback(GenericCallback):
    """Keeps the latest message; its output is the message's fields as text."""

    def _get_output(self, **_: Any) -> Optional[str]:
        msg = self.msg
        return None if msg is None else render(msg)


def _supported(name: str, ros_type: type) -> type:
    return type(name, (SupportedType,), {"_ros_type": ros_type, "callback": MessageCallback,
                                         "__doc__": f"``{ros_type.__module__.split('.')[0]}/msg/{name}`` "
                                                    "(registered by emem_ros.emos)."})


def register() -> list[type]:
    """Register the types (idempotent); the list of classes."""
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import BatteryState, Temperature
    from vision_msgs.msg import Detection2DArray, Detection3DArray

    types = [_supported(t.__name__, t) for t in (Detection2DArray, Detection3DArray, BatteryState, Temperature,
                                                  DiagnosticArray)]
    add_additional_datatypes(types)
    return types
