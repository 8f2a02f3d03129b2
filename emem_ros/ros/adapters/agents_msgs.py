"""EmbodiedAgents' messages (``automatika_embodied_agents/msg``): what a Vision or LLM component publishes.

- ``Detections2D``: parallel ``labels`` / ``scores`` / ``boxes`` (corner
  boxes in pixels); one draft per label, like a vision_msgs detection: text is
  the label, confidence its score, the box as centre and size.
- ``Detections2DMultiSource``: several ``Detections2D`` (one per camera).
- ``StreamingString``: an LLM's reply. Sent whole (``stream`` false) it is one
  draft; streamed, its chunks are joined per layer and stored once, whole,
  when the message with ``done`` arrives (stamped when the stream began).
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.base import (
    LayerLike,
    SkipMessage,
    as_float,
    draft,
    message_stamp,
    note,
    stamp_seconds,
    text_field,
)
from emem_ros.ros.intake import SUBJECT_KEY

DETECTIONS_2D = "automatika_embodied_agents/msg/Detections2D"
DETECTIONS_MULTI = "automatika_embodied_agents/msg/Detections2DMultiSource"
STREAMING_STRING = "automatika_embodied_agents/msg/StreamingString"

MAX_STREAM_CHARS = 65536
"""A stream longer than this is stored up to here (the rest is dropped, and said so)."""


def adapt_detections2d(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    drafts = _detections(msg, layer, message_stamp(msg, receive_time), "")
    if not drafts:
        raise SkipMessage("no labels" if not list(msg.labels) else "none of the labels has a finite score")
    return drafts


def adapt_detections_multi(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    sources = list(msg.detections)
    if not sources:
        raise SkipMessage("no detection sources")
    outer = message_stamp(msg, receive_time)
    drafts: list[ObservationDraft] = []
    for index, source in enumerate(sources):
        own = stamp_seconds(getattr(source, "header", None))
        drafts.extend(_detections(source, layer, own if own is not None else outer, f"source {index} "))
    if not drafts:
        raise SkipMessage(f"none of the {len(sources)} sources has a label with a finite score")
    return drafts


def _detections(msg: Any, layer: LayerLike, stamp: float, where: str) -> list[ObservationDraft]:
    labels, scores, boxes = list(msg.labels), list(msg.scores), list(msg.boxes)
    drafts = []
    for index, label in enumerate(labels):
        name = text_field(label, "label").strip()
        score = as_float(scores[index]) if index < len(scores) else 1.0
        if not name or score is None:
            note(f"{where}label {index} has no name or no finite score")
            continue
        metadata: dict[str, Any] = {SUBJECT_KEY: name, "class_id": name, "score": score}
        box = _box(boxes[index]) if index < len(boxes) else None
        if box is not None:
            metadata["bbox"] = box
        drafts.append(draft(layer, name, stamp, confidence=min(1.0, max(0.0, score)), metadata=metadata))
    return drafts


def _box(box: Any) -> Optional[dict[str, list[float]]]:
    """Corner box (top-left, bottom-right) as the centre and size the vision_msgs adapter records."""
    x0, y0 = as_float(box.top_left_x), as_float(box.top_left_y)
    x1, y1 = as_float(box.bottom_right_x), as_float(box.bottom_right_y)
    if x0 is None or y0 is None or x1 is None or y1 is None or x1 < x0 or y1 < y0:
        return None
    return {"center": [round((x0 + x1) / 2, 3), round((y0 + y1) / 2, 3)],
            "size": [round(x1 - x0, 3), round(y1 - y0, 3)]}


class _Streams:
    """Chunks of the stream in progress, per layer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], tuple[float, list[str], int]] = {}

    def add(self, key: tuple[str, int], stamp: float, chunk: str, done: bool) -> Optional[tuple[float, str, int]]:
        """Buffer ``chunk``; at ``done`` the stream's (first stamp, whole text, characters dropped)."""
        with self._lock:
            first, parts, dropped = self._open.pop(key, (stamp, [], 0))
            room = MAX_STREAM_CHARS - sum(len(p) for p in parts)
            parts.append(chunk[:max(0, room)])
            dropped += max(0, len(chunk) - max(0, room))
            if not done:
                self._open[key] = (first, parts, dropped)
                return None
        return first, "".join(parts), dropped


_STREAMS = _Streams()


def adapt_streaming_string(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    data = text_field(msg.data, "data")
    stamp = message_stamp(msg, receive_time)
    if not bool(msg.stream):
        text = data.strip()
        if not text:
            raise SkipMessage("empty string")
        return [draft(layer, text, stamp)]
    whole = _STREAMS.add((layer.name, id(layer)), stamp, data, bool(msg.done))
    if whole is None:
        return []  # a chunk: kept until the stream is done
    first, text, dropped = whole
    if not text.strip():
        raise SkipMessage("a streamed text that was empty when it ended")
    metadata = {"streamed": True, "dropped_characters": dropped} if dropped else {"streamed": True}
    return [draft(layer, text.strip(), first, metadata=metadata)]
