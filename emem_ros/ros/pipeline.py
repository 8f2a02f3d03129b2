"""The one ingest path from messages to memory, shared by the live node and bag replay.

/tf, /tf_static, odometry -> a ``Placer`` (``emem_ros.frames``); a layer
message -> adapter -> intake policy -> a place in the fixed frame (the
draft's own position turned from its sensor's frame, else the robot's pose
at the draft's stamp) -> ``Memory.add_draft``. A draft placed at the robot's
pose records the layer's ``view_range``, and a 2-D detection of a layer with
a camera its ray (``emem_ros.geometry.rays``): box centre, intrinsics
(``on_camera_info`` or parameters) and the camera's pose at the stamp (TF, or
the robot's pose and the static mounting).

A draft whose transform has not arrived yet waits (until the transforms are
``tf_timeout`` seconds past its stamp; see ``expire`` for when they stop;
``MAX_WAITING`` drafts in all) and is placed when it comes;
after that it is stored with the newest transform if that is within
``odom_max_extrapolation``, else without a position (counted per layer as
'no transform', logged once per frame pair) — never at the origin.

Nothing here raises on bad input: a message that cannot be stored is counted
with its reason and logged once per layer and reason, because a node callback
must survive any message and a replay must finish with a truthful summary.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from emem_ros.core.errors import EmemError
from emem_ros.core.types import Position, SourceType
from emem_ros.frames.buffer import LookupFailure, TransformBuffer
from emem_ros.frames.placement import OdometryPlacer, Placer, RobotPose, TfPlacer
from emem_ros.geometry.rays import RAY_KEY, VIEW_RANGE_KEY
from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.base import frame_of, stamp_seconds
from emem_ros.ros.adapters.registry import adapt
from emem_ros.ros.camera import LayerCamera
from emem_ros.ros.intake import IntakePolicy
from emem_ros.ros.params import LayerSpec, NodeParams
from emem_ros.ros.pose_history import PoseHistory

log = logging.getLogger(__name__)

_DIGITS = re.compile(r"\d+(\.\d+)?")
MAX_SKIP_REASONS = 64
"""Distinct skip reasons counted word for word per layer; later ones are counted with their numbers as '#'
(a reason that quotes a value would otherwise add a key per message, for days)."""
_MAX_LOGGED_REASONS = 64
TF_STALL = 5.0
"""Seconds of stamped sensor messages a draft waits beyond ``tf_timeout`` when /tf has stopped (or lags
behind the sensors in a busy process: waiting longer then only costs latency)."""
QUIET_STALL = 10.0
"""Seconds of the clock a draft waits beyond ``tf_timeout`` when nothing arrives at all."""
MAX_WAITING = 10_000
"""Drafts waiting for their transform at most; beyond it a draft is placed at once with what there is."""


@dataclass
class LayerCounts:
    """What became of one layer's messages (a snapshot is a copy)."""

    messages: int = 0
    observations: int = 0
    dropped_by_intake: int = 0
    """Drafts the intake policy thinned out (a 30 Hz repeat, an unchanged reading)."""
    without_position: int = 0
    """Observations stored with no position: no pose near their stamp (no odometry, or no transform)."""
    object_position_dropped: int = 0
    """3-D detections whose own position could not be put in the fixed frame (kept at the robot's pose)."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Reason -> messages (or drafts) that produced nothing."""
    bearings: int = 0
    """Observations stored with a ray (layers with a camera)."""
    without_bearing: Counter[str] = field(default_factory=Counter)
    """Reason -> observations of a camera layer stored without a ray (placed at the robot's pose only)."""
    no_transform: int = 0
    """Observations stored without a position because their transform did not come within tf_timeout."""

    def copy(self) -> "LayerCounts":
        return dataclasses.replace(self, skipped=Counter(self.skipped), without_bearing=Counter(self.without_bearing))


@dataclass
class OdometryCounts:
    messages: int = 0
    accepted: int = 0


@dataclass(frozen=True)
class IngestOutcome:
    """The result of one message: ids stored, or why not."""

    ids: tuple[str, ...] = ()
    skipped_reason: Optional[str] = None
    dropped_by_intake: int = 0
    waiting: int = 0
    """Drafts waiting for their transform (stored later, by ``on_tf`` or ``expire``)."""


@dataclass(frozen=True)
class _Waiting:
    draft: ObservationDraft
    arrival: float
    newest: bool = False
    """Stamped on arrival: the newest transform will do once there is one (see ``_place``)."""


@dataclass(frozen=True)
class _Placed:
    draft: ObservationDraft
    robot: Optional[Position]
    bearing: Optional[str]
    """'' a ray was added; a reason there is none (camera layer); None (no camera)."""
    dropped_object: bool
    missing: Optional[LookupFailure]
    """The transform that was not there (logged and counted when committed)."""


class IngestPipeline:
    """Adapters, intake policies and a ``Placer`` (TF or odometry) in front of one ``Memory``.

    Thread-safe: a node's executor calls ``on_message``, ``on_tf`` and
    ``on_odometry`` from several threads; each layer's policy, the transform
    buffer and the pose history take their own locks, the counters and the
    waiting drafts share one.
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
        self.transforms = TransformBuffer(max(params.odom_history_seconds, 2.0 * params.tf_timeout),
                                          max_extrapolation=params.odom_max_extrapolation,
                                          max_gap=params.odom_max_gap, max_jump=params.tf_max_jump,
                                          moving_frames=frozenset({params.base_frame}))
        self.placer: Placer
        if params.fixed_frame:
            self.placer = TfPlacer(self.transforms, params.fixed_frame, params.base_frame)
        else:
            self.placer = OdometryPlacer(self.poses, params.odom_frame or params.memory.frame_id)
        self.frame_id = self.placer.fixed_frame
        """Frame positions are stored in (the memory's frame_id)."""
        self.tf_timeout = params.tf_timeout if self.placer.uses_tf else 0.0
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
        self._waiting: deque[_Waiting] = deque()
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._odometry = OdometryCounts()
        self._newest_sensor_stamp = 0.0
        """The newest header stamp of a layer message: how far the sensors have got (see ``expire``)."""

    def live_pose(self) -> Optional[Position]:
        """The robot's pose now (its newest pose in the fixed frame, if recent on the memory's clock)."""
        pose = self.placer.live_robot(self.memory.now())
        return pose.position if pose is not None else None

    # ------------------------------------------------------------------ input
    def on_odometry(self, msg: Any, receive_time: Optional[float] = None) -> bool:
        """Record the robot's pose (odometry history, or the odom -> base edge /tf lacks); False for a
        malformed, NaN or refused message (counted)."""
        accepted = self.placer.on_odometry(msg, receive_time)
        with self._lock:
            self._odometry.messages += 1
            self._odometry.accepted += accepted
        if accepted and self.placer.uses_tf:
            self.drain(receive_time)
        return accepted

    def on_tf(self, msg: Any, *, static: bool, receive_time: Optional[float] = None) -> int:
        """A tf2_msgs/TFMessage from /tf (or /tf_static): its transforms; drafts waiting for them are placed.

        Returns how many transforms were taken; refused ones are counted and logged once per reason and
        frame pair. Without a fixed frame TF is not used (0).
        """
        if not self.placer.uses_tf:
            return 0
        accepted, refused = self.transforms.add_tf_message(msg, static=static, now=receive_time)
        for reason in refused:
            self._log_once("tf", _DIGITS.sub("#", reason),
                           f"{'/tf_static' if static else '/tf'}: transform refused: {reason} (logged once per "
                           "reason and frame pair; counted)")
        if accepted:
            self.drain(receive_time, new_frames=static)
        return accepted

    def on_camera_info(self, topic: str, msg: Any) -> bool:
        """Intrinsics for the layers whose ``camera_info_topic`` this is; False when unusable (counted)."""
        accepted = False
        for layer in self.camera_topics.get(topic, ()):
            accepted = self.cameras[layer].on_camera_info(msg) or accepted
        return accepted

    def on_message(self, layer: str, msg: Any, receive_time: float) -> IngestOutcome:
        """Adapt, thin, place and store one message of ``layer``; never raises.

        A draft whose transform has not arrived yet waits (``tf_timeout``) and
        is stored by a later ``on_tf`` / ``expire``; it is counted in
        ``IngestOutcome.waiting``, not in ``ids``. A message without a header
        stamp does not wait: it takes the newest pose.
        """
        spec = self.layers.get(layer)
        if spec is None:
            with self._lock:
                self._unknown_layers[layer] += 1
            self._log_once(layer, "unknown layer",
                           f"message for unknown layer {layer!r} skipped; layers: {', '.join(self.layers)}")
            return IngestOutcome(skipped_reason=f"unknown layer {layer!r}")
        with self._lock:
            self._counts[layer].messages += 1
        header = getattr(msg, "header", None)
        stamp = stamp_seconds(header) if header is not None else None
        if stamp is not None and stamp > self._newest_sensor_stamp:
            self._newest_sensor_stamp = stamp  # a race between two threads only delays an expiry
        self.expire(receive_time)
        result = adapt(msg, spec, receive_time, max_text_length=self.params.max_text_length)
        if result.skipped_reason:
            self._skip(layer, result.skipped_reason)
            return IngestOutcome(skipped_reason=result.skipped_reason)
        for reason in result.partial:
            self._skip(layer, reason)
        ids: list[str] = []
        dropped = waiting = 0
        policy = self.policies[layer]
        for draft in result.drafts:
            if not policy.accept(draft):
                dropped += 1
                continue
            if draft.sensor_frame is None:
                draft = dataclasses.replace(draft, sensor_frame=frame_of(msg))
            # A message without a stamp of its own (std_msgs/String) is stamped on arrival: that stamp is
            # only as good as the delivery, and waiting to interpolate at it buys nothing. It takes the
            # newest pose within odom_max_extrapolation at once, as the odometry history does.
            placed = self._place(spec, draft, receive_time, final=False, newest=stamp is None)
            if placed is None:
                waiting += 1
                continue
            stored = self._commit(placed)
            if stored is not None:
                ids.append(stored)
        with self._lock:
            self._counts[layer].dropped_by_intake += dropped
        return IngestOutcome(ids=tuple(ids), dropped_by_intake=dropped, waiting=waiting)

    def expire(self, now: Optional[float]) -> int:
        """Store the drafts that waited ``tf_timeout`` for their transform: with the newest transform if
        it is near enough, else without a position. Returns how many were stored.

        The wait is counted on the transforms' own time: a draft is due once the newest transform taken
        is ``tf_timeout`` past its stamp (every edge that is publishing has then passed it), so a node
        whose queue of /tf is behind the clock does not give up on transforms it has not read yet, and
        replay (bag time) decides exactly as the live node does. If /tf stops while the sensors go on, a
        draft is due once stamped messages are ``TF_STALL`` seconds further; if everything stops, after
        ``QUIET_STALL`` seconds more of the clock (``now``).
        """
        if not self._waiting:
            return 0
        newest = max(self.transforms.newest, self._newest_sensor_stamp - TF_STALL)
        timeout, quiet = self.tf_timeout, self.tf_timeout + QUIET_STALL
        return self._release(lambda item: newest - item.draft.stamp >= timeout
                             or (now is not None and now - item.arrival >= quiet))

    def drain(self, now: Optional[float] = None, *, new_frames: bool = False) -> int:
        """Place the waiting drafts whose transforms are there now; expire the overdue ones.

        A draft stamped after every transform taken cannot be answered yet and is not looked up again
        (the hot path at 100 Hz of /tf), unless ``new_frames`` (static transforms came: a frame that was
        unknown may be known now).
        """
        if not self._waiting:
            return 0
        stored = self.expire(now)
        ready: list[_Placed] = []
        newest = self.transforms.newest
        with self._drain_lock:
            with self._lock:
                queue, self._waiting = self._waiting, deque()
            keep: deque[_Waiting] = deque()
            for item in queue:
                if item.draft.stamp > newest and not new_frames:
                    keep.append(item)
                    continue
                placed = self._place(self.layers[item.draft.layer], item.draft, item.arrival, final=False,
                                     newest=item.newest,
                                     park=False)
                if placed is None:
                    keep.append(item)
                else:
                    ready.append(placed)
            with self._lock:
                keep.extend(self._waiting)  # drafts parked while this drain ran
                self._waiting = keep
        for placed in ready:
            stored += self._commit(placed) is not None
        return stored

    def finish(self) -> int:
        """Store every waiting draft now (the end of a bag, a deactivation): no more transforms will come."""
        return self._release(lambda item: True)

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    def odometry_counts(self) -> OdometryCounts:
        with self._lock:
            return dataclasses.replace(self._odometry)

    # ------------------------------------------------------------------ reporting
    def counts(self) -> dict[str, LayerCounts]:
        with self._lock:
            return {name: c.copy() for name, c in self._counts.items()}

    @property
    def unknown_layers(self) -> dict[str, int]:
        with self._lock:
            return dict(self._unknown_layers)

    # ------------------------------------------------------------------ internals
    def _release(self, due: Callable[[_Waiting], bool]) -> int:
        with self._drain_lock:
            with self._lock:
                now_due = [item for item in self._waiting if due(item)]
                if not now_due:
                    return 0
                self._waiting = deque(item for item in self._waiting if not due(item))
            placed = [self._place(self.layers[item.draft.layer], item.draft, item.arrival, final=True)
                      for item in now_due]
        return sum(self._commit(p) is not None for p in placed if p is not None)

    def _place(self, spec: LayerSpec, draft: ObservationDraft, arrival: float, *, final: bool,
               park: bool = True, newest: bool = False) -> Optional[_Placed]:
        """Where ``draft`` goes in the fixed frame, or None: it waits for its transform (parked here unless
        ``park`` is off: it is in the queue already).

        ``final``: no more waiting (``tf_timeout`` is over, or the stream ended): a transform that has not
        arrived is taken from the newest one within ``odom_max_extrapolation``, else there is no place.
        ``newest``: take the newest transform within that limit without waiting for a newer one (a draft
        stamped on arrival); it still waits when there is none yet.
        """
        placer = self.placer
        missing: Optional[LookupFailure] = None
        dropped_object = False
        clamp = final or newest

        def wait() -> bool:
            if final or self.tf_timeout <= 0:
                return False
            return not park or self._park(draft, arrival, newest)

        if draft.position is not None:
            point = placer.point(draft.frame_id, draft.stamp, draft.position, clamp=clamp)
            if not isinstance(point, LookupFailure):
                return _Placed(dataclasses.replace(draft, position=point, frame_id=self.frame_id), None, None,
                               False, None)
            if point.retry and wait():
                return None
            # No transform for the sensor: the object's own position is not a place in the fixed frame;
            # the sighting is kept at the robot's pose (the object was within the layer's view range).
            missing = point
            metadata = {**draft.metadata, "object_position": list(draft.position),
                        "object_frame": draft.frame_id or ""}
            draft = dataclasses.replace(draft, metadata=metadata, position=None, frame_id=None)
            dropped_object = True
        robot = placer.robot(draft.stamp, clamp=clamp)
        if isinstance(robot, LookupFailure):
            if robot.retry and wait():
                return None
            return _Placed(draft, None, None, dropped_object, robot)
        seen = self._seen_from(spec, draft, robot, clamp)
        if seen is None:
            if wait():
                return None
            seen = self._seen_from(spec, draft, robot, True)
            assert seen is not None
        draft, bearing = seen
        return _Placed(draft, robot.position, bearing, dropped_object, missing)

    def _park(self, draft: ObservationDraft, arrival: float, newest: bool = False) -> bool:
        """Queue a draft for its transform; False when the queue is full (it is placed now with what there is)."""
        with self._lock:
            full = len(self._waiting) >= MAX_WAITING
            if not full:
                self._waiting.append(_Waiting(draft, arrival, newest))
        if full:
            self._log_once(draft.layer, "waiting queue full",
                           f"layer {draft.layer}: {MAX_WAITING} drafts already wait for transforms; this one is "
                           "placed now with what there is (logged once)")
        return not full

    def _commit(self, placed: _Placed) -> Optional[str]:
        draft, layer = placed.draft, placed.draft.layer
        try:
            node_id: str = self.memory.add_draft(draft, placed.robot)
        except EmemError as exc:
            self._skip(layer, f"rejected by the memory: {exc}")
            return None
        unplaced = draft.position is None and placed.robot is None
        missing = placed.missing
        no_transform = unplaced and missing is not None and self.placer.uses_tf
        with self._lock:
            counts = self._counts[layer]
            counts.observations += 1
            counts.without_position += unplaced
            counts.no_transform += no_transform
            counts.object_position_dropped += placed.dropped_object
            if placed.bearing == "":
                counts.bearings += 1
            elif placed.bearing is not None:
                counts.without_bearing[placed.bearing] += 1
        if missing is not None and self.placer.uses_tf:
            age = (f"the newest transform is {missing.newest_age:.2f} s older than the stamp"
                   if missing.newest_age is not None else missing.message)
            what = "stored without a position" if unplaced else "kept at the robot's pose, not at its own position"
            self._log_once(f"{missing.target}<-{missing.source}", f"no transform {missing.kind}",
                           f"layer {layer}: no transform {missing.target} <- {missing.source} at the stamp "
                           f"({missing.kind}: {age}); {what}. Logged once per frame pair; counted")
        return node_id

    def _seen_from(self, spec: LayerSpec, draft: ObservationDraft, pose: RobotPose, final: bool
                   ) -> Optional[tuple[ObservationDraft, Optional[str]]]:
        """A robot-pose draft with the layer's view range and, for a camera layer, its ray; None when the
        camera's transform may still come (the draft waits).

        The draft comes with '' (a ray was added), the reason there is none
        (a camera layer), or None (not a camera layer).
        """
        if spec.is_internal_state or draft.source_type == SourceType.INTEROCEPTION.value:
            return draft, None
        extra: dict[str, Any] = {VIEW_RANGE_KEY: spec.view_range}
        why: Optional[str] = None
        camera = self.cameras.get(spec.name)
        if camera is not None:
            where = self.placer.camera(draft.sensor_frame, draft.stamp, clamp=final)
            if isinstance(where, LookupFailure):
                if where.retry and not final and self.tf_timeout > 0:
                    return None
                if pose.heading:  # no TF for the camera: the static camera.* mounting on the robot's pose
                    where = camera.mounted(pose.transform)
            if isinstance(where, LookupFailure):
                why = "the odometry has no heading (orientation)"
            else:
                ray, why = camera.ray(where, draft.metadata.get("bbox"))
                if ray is not None:
                    extra[RAY_KEY] = ray.to_metadata()
        return dataclasses.replace(draft, metadata={**draft.metadata, **extra}), why

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
