"""std_msgs/String: a scene description, a speech transcript, an event name."""

from __future__ import annotations

from typing import Any

from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.base import LayerLike, SkipMessage, draft, message_stamp, text_field


def adapt_string(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    text = text_field(msg.data, "data").strip()
    if not text:
        raise SkipMessage("empty string")
    return [draft(layer, text, message_stamp(msg, receive_time))]
