"""ObservationDraft: what an adapter (ROS message, bag record, API call) produces.

A draft has no id and no position yet; the ingest path resolves the position
from odometry at the draft's stamp unless the draft carries its own (a 3-D
detection knows where the object is).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from emem_ros.core.types import Position, SourceType


@dataclass(frozen=True)
class ObservationDraft:
    text: str
    stamp: float
    layer: str
    source_type: str = SourceType.PERCEPTION.value
    confidence: float = 1.0
    metadata: dict[str, Any] = field(default_factory=dict)
    position: Optional[Position] = None
    """Object position when the message says where the thing is (3-D detections)."""
    frame_id: Optional[str] = None
    """Frame of ``position`` (the message's header.frame_id); the ingest path turns it into the fixed frame."""
    value: Optional[float] = None
    """The numeric reading of a body-state message (battery fraction, degrees C, ...)."""
    sensor_frame: Optional[str] = None
    """Frame of the sensor that perceived it (a camera's optical frame): where a 2-D detection's bearing
    starts. Not stored; the ingest path asks TF for it."""
