"""sensor_msgs/Temperature: "temperature 41.2 °C", value in degrees Celsius."""

from __future__ import annotations

from typing import Any

from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.base import LayerLike, SkipMessage, as_float, draft, finite, frame_of, message_stamp

ABSOLUTE_ZERO_C = -273.15


def adapt_temperature(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    celsius = finite(msg.temperature, "temperature")
    if celsius < ABSOLUTE_ZERO_C:
        raise SkipMessage(f"temperature {celsius} °C is below absolute zero")
    metadata: dict[str, Any] = {"celsius": celsius}
    variance = as_float(getattr(msg, "variance", None))
    if variance is not None and variance > 0:
        metadata["variance"] = variance
    frame = frame_of(msg)
    if frame:
        metadata["sensor_frame"] = frame
    return [draft(layer, f"temperature {celsius:.1f} °C", message_stamp(msg, receive_time),
                  value=celsius, metadata=metadata)]
