"""The one ingest path from messages to memory, shared by the live node and bag replay.

odometry -> ``PoseHistory``; a layer message -> adapter -> intake policy ->
position (the draft's own, else the robot's pose interpolated at the draft's
stamp) -> ``Memory.add_draft``. A draft placed at the robot's pose records the
layer's ``view_range``, and a 2-D detection of a layer with a camera its ray
(``emem_ros.geometry.rays``): box centre, intrinsics (``on_camera_info`` or
parameters), mounting and the robot's interpolated heading. Nothing here raises on bad input: a message
that cannot be stored is counted with its reason and logged once per layer and
reason, because a node callback must survive any message and a replay must
finish with a truthful summary.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from emem_ros.core.errors import EmemError
from emem_ros.core.types import Position, SourceType
from emem_ros.geometry.rays import RAY_KEY, VIEW_RANGE_KEY
from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.registry import adapt
from emem_ros.ros.camera import LayerCamera
from emem_ros.ros.intake import IntakePolicy
from emem_ros.ros.params import LayerSpec, NodeParams
from emem_ros.ros.pose_history import PoseHistory, PoseSample

log = logging.getLogger(__name__)

_DIGITS = re.compile(r"\d+(\.\d+)?")
MAX_SKIP_REASONS = 64
"""Distinct skip reasons counted word for word per layer; later ones are counted with their numbers as '#'
(a reason that quotes a value would otherwise add a key per message, for days)."""
_MAX_LOGGED_REASONS = 64


@dataclass
class LayerCounts:
    """What became of one layer's messages (a snapshot is a copy)."""

    messages: int = 0
    observations: int = 0
    dropped_by_intake: int = 0
    """Drafts the intake policy thinned out (a 30 Hz repeat, an unchanged reading)."""
    without_position: int = 0
    """Observations stored with no position: no odometry near their stamp."""
    object_position_dropped: int = 0
    """3-D detections whose own position was in a frame other than the memory's."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Reason -> messages (or drafts) that produced nothing."""
    bearings: int = 0
    """Observations stored with a ray (layers with a camera)."""
    without_bearing: Counter[str] = field(default_factory=Counter)
    """Reason -> observations of a camera layer stored without a ray (placed at the robot's pose only)."""

    def copy(self) -> "LayerCounts":
        return LayerCounts(self.messages, self.observations, self.dropped_by_intake, self.without_position,
                           self.object_position_dropped, Counter(self.skipped), self.bearings,
                           Counter(self.without_bearing))


@dataclass(frozen=True)
class IngestOutcome:
    """The result of one message: ids stored, or why not."""

    ids: tuple[str, ...] = ()
    skipped_reason: Optional[str] = None
    dropped_by_intake: int = 0


LIVE_POSE_MAX_AGE = 5.0
"""Seconds: older odometry is not where the robot is now (get_current_context then reads its memory)."""


class IngestPipeline:
    """Adapters, intake policies and odometry history in front of one ``Memory``.

    Thread-safe: a node's executor calls ``on_message`` and ``on_odometry`` from
    several threads; each layer's policy and the pose history take their own
    locks, and the counters share one.
    """

    def __init__(self, memory: Any, params: NodeParams, *,
                 warn: Optional[Callable[[str], None]] = None) -> None:
        self.memory = memory
        self.params = params
        self.layers: dict[str, LayerSpec] = {spec.name: spec for spec in params.layers}
        self.policies = {spec.name: IntakePolicy.from_config(spec.intake) for spec in params.layers}
        self.poses = PoseHistory(
            max_age=params.odom_history_seconds,
            max_extrapolation=params.odom_max_extrapolation,
            max_gap=params.odom_max_gap,
            frame_id=params.odom_frame,
        )
        self.frame_id = params.odom_frame or params.memory.frame_id
        """Frame positions are stored in; a 3-D detection in another frame keeps only the robot pose."""
        self.cameras: dict[str, LayerCamera] = {
            spec.name: LayerCamera(spec.camera) for spec in params.layers if spec.camera.configured}
        self.camera_topics: dict[str, list[str]] = {}
        """CameraInfo topic -> the layers whose camera it describes."""
        for spec in params.layers:
            if spec.camera.info_topic:
                self.camera_topics.setdefault(spec.camera.info_topic, []).append(spec.name)
        self._warn = warn or log.warning
        self._counts: dict[str, LayerCounts] = {name: LayerCounts() for name in self.layers}
        self._unknown_layers: Counter[str] = Counter()
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def live_pose(self) -> Optional[Position]:
        """The robot's pose now (the newest odometry, if at most ``LIVE_POSE_MAX_AGE`` s old on the memory's clock)."""
        latest = self.poses.latest()
        if latest is None or self.memory.now() - latest.stamp > max(LIVE_POSE_MAX_AGE,
                                                                     self.params.odom_max_extrapolation):
            return None
        return latest.position

    # ------------------------------------------------------------------ input
    def on_odometry(self, msg: Any, receive_time: Optional[float] = None) -> bool:
        """Record the robot's pose; False for a malformed, NaN or wrong-frame message (counted)."""
        return self.poses.add_odometry(msg, receive_time)

    def on_camera_info(self, topic: str, msg: Any) -> bool:
        """Intrinsics for the layers whose ``camera_info_topic`` this is; False when unusable (counted)."""
        accepted = False
        for layer in self.camera_topics.get(topic, ()):
            accepted = self.cameras[layer].on_camera_info(msg) or accepted
        return accepted

    def on_message(self, layer: str, msg: Any, receive_time: float) -> IngestOutcome:
        """Adapt, thin, place and store one message of ``layer``; never raises."""
        spec = self.layers.get(layer)
        if spec is None:
            with self._lock:
                self._unknown_layers[layer] += 1
            self._log_once(layer, "unknown layer",
                           f"message for unknown layer {layer!r} skipped; layers: {', '.join(self.layers)}")
            return IngestOutcome(skipped_reason=f"unknown layer {layer!r}")
        with self._lock:
            self._counts[layer].messages += 1
        result = adapt(msg, spec, receive_time, max_text_length=self.params.max_text_length)
        if result.skipped_reason:
            self._skip(layer, result.skipped_reason)
            return IngestOutcome(skipped_reason=result.skipped_reason)
        for reason in result.partial:
            self._skip(layer, reason)
        ids: list[str] = []
        dropped = 0
        policy = self.policies[layer]
        for draft in result.drafts:
            if not policy.accept(draft):
                dropped += 1
                continue
            stored = self._store(layer, draft)
            if stored is not None:
                ids.append(stored)
        with self._lock:
            self._counts[layer].dropped_by_intake += dropped
        return IngestOutcome(ids=tuple(ids), dropped_by_intake=dropped)

    # ------------------------------------------------------------------ reporting
    def counts(self) -> dict[str, LayerCounts]:
        with self._lock:
            return {name: c.copy() for name, c in self._counts.items()}

    @property
    def unknown_layers(self) -> dict[str, int]:
        with self._lock:
            return dict(self._unknown_layers)

    # ------------------------------------------------------------------ internals
    def _store(self, layer: str, draft: ObservationDraft) -> Optional[str]:
        robot: Optional[Position] = None
        dropped_object = False
        if draft.position is not None and not self._same_frame(draft.frame_id):
            # No TF here: an object position in a camera frame is not a place in the map.
            metadata = {**draft.metadata, "object_position": list(draft.position),
                        "object_frame": draft.frame_id}
            draft = ObservationDraft(draft.text, draft.stamp, draft.layer, draft.source_type, draft.confidence,
                                     metadata, None, None, draft.value)
            dropped_object = True
        bearing: Optional[str] = None
        if draft.position is None:
            sample = self.poses.lookup(draft.stamp)
            if sample is not None:
                robot = sample.position
                draft, bearing = self._seen_from(self.layers[layer], draft, sample)
        try:
            node_id = self.memory.add_draft(draft, robot)
        except EmemError as exc:
            self._skip(layer, f"rejected by the memory: {exc}")
            return None
        with self._lock:
            counts = self._counts[layer]
            counts.observations += 1
            counts.without_position += draft.position is None and robot is None
            counts.object_position_dropped += dropped_object
            if bearing == "":
                counts.bearings += 1
            elif bearing is not None:
                counts.without_bearing[bearing] += 1
        stored: Optional[str] = node_id
        return stored

    def _seen_from(self, spec: LayerSpec, draft: ObservationDraft, pose: PoseSample
                   ) -> tuple[ObservationDraft, Optional[str]]:
        """A robot-pose draft with the layer's view range and, for a camera layer, its ray.

        Returns the draft and '' (a ray was added), the reason there is none
        (a camera layer), or None (not a camera layer).
        """
        if spec.is_internal_state or draft.source_type == SourceType.INTEROCEPTION.value:
            return draft, None
        extra: dict[str, Any] = {VIEW_RANGE_KEY: spec.view_range}
        why: Optional[str] = None
        camera = self.cameras.get(spec.name)
        if camera is not None:
            if pose.yaw is None:
                why = "the odometry has no heading (orientation)"
            else:
                ray, why = camera.ray(pose.x, pose.y, pose.z, pose.yaw, draft.metadata.get("bbox"))
                if ray is not None:
                    extra[RAY_KEY] = ray.to_metadata()
        return dataclasses.replace(draft, metadata={**draft.metadata, **extra}), why

    def _same_frame(self, frame: Optional[str]) -> bool:
        if not frame:
            return True
        return frame.strip().lstrip("/") == self.frame_id.strip().lstrip("/")

    def _skip(self, layer: str, reason: str) -> None:
        with self._lock:
            skipped = self._counts[layer].skipped
            if reason not in skipped and len(skipped) >= MAX_SKIP_REASONS:  # values in reasons: count by kind
                reason = _DIGITS.sub("#", reason)
            skipped[reason] += 1
        self._log_once(layer, _DIGITS.sub("#", reason), f"layer {layer}: {reason} (logged once per reason)")

    def _log_once(self, layer: str, kind: str, message: str) -> None:
        key = (layer, kind)
        with self._lock:
            if key in self._logged or len(self._logged) >= _MAX_LOGGED_REASONS:
                return
            self._logged.add(key)
        self._warn(message)
