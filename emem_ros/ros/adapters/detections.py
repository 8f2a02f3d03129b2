"""vision_msgs/Detection2DArray and Detection3DArray: one draft per detection.

Text is the class of the best hypothesis ("red mug"), confidence its score.
A 3-D detection also says where the object is: the best hypothesis' pose, or
the box centre when the detector left the pose unset; the position is in the
detection's header frame. Both vision_msgs 4.x (``hypothesis.class_id``,
``vision_msgs/Pose2D`` centres) and the older 2.x/3.x layouts (``id``,
``geometry_msgs/Pose2D``) are read.
"""

from __future__ import annotations

from typing import Any, Optional

from emem_ros.core.types import Position
from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.base import (
    LayerLike,
    SkipMessage,
    as_float,
    draft,
    frame_of,
    message_stamp,
    note,
    stamp_seconds,
)
from emem_ros.ros.intake import SUBJECT_KEY

OTHER_HYPOTHESES = 4


def adapt_detection2d_array(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    return _adapt_array(msg, layer, receive_time, three_d=False)


def adapt_detection3d_array(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    return _adapt_array(msg, layer, receive_time, three_d=True)


def _adapt_array(msg: Any, layer: LayerLike, receive_time: float, three_d: bool) -> list[ObservationDraft]:
    detections = list(msg.detections)
    if not detections:
        raise SkipMessage("no detections")
    array_stamp = message_stamp(msg, receive_time)
    array_frame = frame_of(msg)
    drafts = []
    for index, detection in enumerate(detections):
        hypotheses = _hypotheses(detection)
        if not hypotheses:
            note(f"detection {index} has no hypothesis with a class and a finite score")
            continue
        best = max(range(len(hypotheses)), key=lambda i: hypotheses[i][1])
        class_id, score, result = hypotheses[best]
        header = getattr(detection, "header", None)
        stamp = stamp_seconds(header) if header is not None else None
        metadata: dict[str, Any] = {SUBJECT_KEY: class_id, "class_id": class_id, "score": score}
        others = [[c, s] for i, (c, s, _) in enumerate(hypotheses) if i != best]
        if others:
            others.sort(key=lambda pair: -float(pair[1]))  # type: ignore[arg-type]  # [class, score] pairs
            metadata["hypotheses"] = others[:OTHER_HYPOTHESES]
        track_id = getattr(detection, "id", "")
        if isinstance(track_id, str) and track_id:
            metadata["track_id"] = track_id
        bbox = _bbox3d(detection.bbox) if three_d else _bbox2d(detection.bbox)
        if bbox is not None:
            metadata["bbox"] = bbox
        position: Optional[Position] = None
        frame = frame_of(detection) or array_frame
        if three_d:
            position, where = _object_position(result, detection.bbox)
            metadata["position_source"] = where
        drafts.append(draft(
            layer, class_id, stamp if stamp is not None else array_stamp,
            confidence=min(1.0, max(0.0, score)), metadata=metadata, position=position,
            frame_id=frame if position is not None else None, sensor_frame=frame,
        ))
    if not drafts:
        raise SkipMessage(f"none of the {len(detections)} detections has a usable hypothesis")
    return drafts


def _hypotheses(detection: Any) -> list[tuple[str, float, Any]]:
    """(class_id, score, result) of every hypothesis with a class and a finite score."""
    out = []
    for result in list(detection.results):
        hypothesis = getattr(result, "hypothesis", None)
        if hypothesis is not None:  # vision_msgs >= 4 (Humble, Jazzy)
            class_id, score = hypothesis.class_id, hypothesis.score
        else:  # vision_msgs 2.x / 3.x: id and score on the result itself
            class_id, score = getattr(result, "class_id", getattr(result, "id", None)), result.score
        if isinstance(class_id, int) and not isinstance(class_id, bool):
            class_id = str(class_id)
        number = as_float(score)
        if not isinstance(class_id, str) or not class_id.strip() or number is None:
            continue
        out.append((class_id.strip(), number, result))
    return out


def _bbox2d(bbox: Any) -> Optional[dict[str, list[float]]]:
    center = bbox.center
    point = getattr(center, "position", center)  # vision_msgs/Pose2D or geometry_msgs/Pose2D
    values = [as_float(getattr(point, "x", None)), as_float(getattr(point, "y", None)),
              as_float(getattr(bbox, "size_x", None)), as_float(getattr(bbox, "size_y", None))]
    cx, cy, sx, sy = values
    if cx is None or cy is None or sx is None or sy is None:
        return None
    return {"center": [round(cx, 3), round(cy, 3)], "size": [round(sx, 3), round(sy, 3)]}


def _bbox3d(bbox: Any) -> Optional[dict[str, list[float]]]:
    center = _point(bbox.center.position)
    size = _point(bbox.size)
    if center is None or size is None:
        return None
    return {"center": [round(c, 3) for c in center], "size": [round(s, 3) for s in size]}


def _object_position(result: Any, bbox: Any) -> tuple[Optional[Position], str]:
    """The best hypothesis' pose unless unset (all zero) or NaN, else the box centre."""
    pose = getattr(getattr(result, "pose", None), "pose", None)
    from_pose = _point(getattr(pose, "position", None))
    from_box = _point(getattr(getattr(bbox, "center", None), "position", None))
    if from_pose is not None and any(from_pose):
        return from_pose, "hypothesis pose"
    if from_box is not None and (any(from_box) or _has_size(bbox)):
        return from_box, "bbox center"
    if from_pose is None and from_box is None:
        return None, "no position: pose and bbox centre are not finite"
    return None, "no position: pose and bbox are unset"


def _point(point: Any) -> Optional[Position]:
    if point is None:
        return None
    x, y, z = (as_float(getattr(point, "x", None)), as_float(getattr(point, "y", None)),
               as_float(getattr(point, "z", None)))
    if x is None or y is None or z is None:
        return None
    return (x, y, z)


def _has_size(bbox: Any) -> bool:
    size = _point(getattr(bbox, "size", None))
    return size is not None and any(s > 0 for s in size)
