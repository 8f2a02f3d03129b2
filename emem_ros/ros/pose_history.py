"""Where the robot was at a given time: odometry history with interpolation.

A detection stamped 80 ms ago arrives after newer odometry; placing it at the
latest pose smears every observation along the path by the robot's speed
times the pipeline latency. ``at(stamp)`` interpolates between the two poses
around the stamp instead, clamps to the nearest pose just outside the history
(``max_extrapolation``), and answers None when no pose is near enough: the
observation is then stored without a position, never at the origin.

The heading (yaw, from the odometry's orientation) is kept too: a camera
detection becomes a ray only with the direction the robot faced. It is
interpolated along the shorter way round (from 3.1 to -3.1 rad through pi,
not through 0), and is None when the orientation is missing or not a
rotation (an all-zero quaternion).

Odometry and layer callbacks run on different executor threads: every method
takes the lock.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Optional

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.types import Position
from emem_ros.ros.adapters.base import as_float, stamp_seconds


@dataclass(frozen=True)
class PoseSample:
    stamp: float
    x: float
    y: float
    z: float
    frame_id: str
    yaw: Optional[float] = None
    """Heading in radians (counter-clockwise from the frame's x axis); None when the odometry had none."""

    @property
    def position(self) -> Position:
        return (self.x, self.y, self.z)


@dataclass
class PoseStats:
    samples: int = 0
    added: int = 0
    rejected_nonfinite: int = 0
    rejected_frame: int = 0
    malformed: int = 0
    time_jumps: int = 0
    hits: int = 0
    misses: int = 0


class PoseHistory:
    """A bounded, time-sorted pose buffer (``max_age`` seconds, ``max_samples`` poses)."""

    def __init__(
        self,
        max_age: float = 60.0,
        max_samples: int = 10_000,
        *,
        max_extrapolation: float = 0.5,
        max_gap: float = 5.0,
        frame_id: str = "",
    ) -> None:
        for name, value in (("max_age", max_age), ("max_extrapolation", max_extrapolation), ("max_gap", max_gap)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise InvalidInputError(f"{name} must be zero or a positive number, got {value!r}")
        if max_age <= 0:
            raise InvalidInputError(f"max_age must be a positive number, got {max_age!r}")
        if not isinstance(max_samples, int) or isinstance(max_samples, bool) or max_samples < 2:
            raise InvalidInputError(f"max_samples must be an integer of at least 2, got {max_samples!r}")
        self.max_age = float(max_age)
        self.max_samples = max_samples
        self.max_extrapolation = float(max_extrapolation)
        self.max_gap = float(max_gap)
        """Brackets further apart than this are not interpolated across (0 = no limit)."""
        self.frame_id = _frame(frame_id)
        """Expected frame; '' accepts any. Poses in another frame are rejected."""
        self._stamps: list[float] = []
        self._samples: list[PoseSample] = []
        self._stats = PoseStats()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._stamps)

    # ------------------------------------------------------------------ writing
    def add(self, stamp: float, x: float, y: float, z: float = 0.0, frame_id: str = "",
            yaw: Optional[float] = None) -> bool:
        """Record a pose; False (and counted) when NaN/inf, unstamped or in the wrong frame.

        A NaN or infinite ``yaw`` keeps the position and drops only the heading.
        """
        t, px, py, pz = (as_float(v) for v in (stamp, x, y, z))
        heading = as_float(yaw)
        with self._lock:
            if t is None or px is None or py is None or pz is None or t <= 0:
                self._stats.rejected_nonfinite += 1
                return False
            frame = _frame(frame_id)
            if self.frame_id and frame and frame != self.frame_id:
                self._stats.rejected_frame += 1
                return False
            sample = PoseSample(t, px, py, pz, frame or self.frame_id,
                                _wrap(heading) if heading is not None else None)
            if self._stamps and t < self._stamps[-1] - self.max_age:
                # The clock went back further than the history reaches (bag loop,
                # simulator reset): the old poses describe another timeline.
                self._stamps.clear()
                self._samples.clear()
                self._stats.time_jumps += 1
            if not self._stamps or t > self._stamps[-1]:
                self._stamps.append(t)
                self._samples.append(sample)
            else:  # out of order: insert in place, replace an equal stamp
                i = bisect_left(self._stamps, t)
                if i < len(self._stamps) and self._stamps[i] == t:
                    self._samples[i] = sample
                else:
                    self._stamps.insert(i, t)
                    self._samples.insert(i, sample)
            self._prune()
            self._stats.added += 1
            return True

    def add_odometry(self, msg: Any, receive_time: Optional[float] = None) -> bool:
        """``add`` from a nav_msgs/Odometry; a malformed message is counted, never raised."""
        try:
            stamp, x, y, z, frame = from_odometry(msg, receive_time)
        except InvalidInputError:
            with self._lock:
                self._stats.malformed += 1
            return False
        return self.add(stamp, x, y, z, frame, heading_of(msg))

    def clear(self) -> None:
        with self._lock:
            self._stamps.clear()
            self._samples.clear()

    # ------------------------------------------------------------------ reading
    def at(self, stamp: float) -> Optional[Position]:
        """Position at ``stamp``, interpolated; None when no pose is near enough."""
        sample = self.lookup(stamp)
        return sample.position if sample is not None else None

    def lookup(self, stamp: float) -> Optional[PoseSample]:
        """Like ``at`` but with the stamp and frame of the answer."""
        t = as_float(stamp)
        with self._lock:
            sample = self._lookup(t) if t is not None else None
            if sample is None:
                self._stats.misses += 1
            else:
                self._stats.hits += 1
            return sample

    def latest(self) -> Optional[PoseSample]:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def stats(self) -> PoseStats:
        with self._lock:
            return PoseStats(**{**self._stats.__dict__, "samples": len(self._stamps)})

    # ------------------------------------------------------------------ internals
    def _lookup(self, t: float) -> Optional[PoseSample]:
        stamps, samples = self._stamps, self._samples
        n = len(stamps)
        if n == 0:
            return None
        i = bisect_left(stamps, t)
        if i < n and stamps[i] == t:
            return samples[i]
        if i == 0:
            return self._near(samples[0], t)
        if i == n:
            return self._near(samples[-1], t)
        before, after = samples[i - 1], samples[i]
        gap = after.stamp - before.stamp
        if (self.max_gap > 0 and gap > self.max_gap) or before.frame_id != after.frame_id:
            nearer = before if t - before.stamp <= after.stamp - t else after
            return self._near(nearer, t)
        w = (t - before.stamp) / gap
        yaw = None
        if before.yaw is not None and after.yaw is not None:
            yaw = _wrap(before.yaw + w * _wrap(after.yaw - before.yaw))  # the shorter way round
        return PoseSample(
            t,
            before.x + w * (after.x - before.x),
            before.y + w * (after.y - before.y),
            before.z + w * (after.z - before.z),
            before.frame_id,
            yaw,
        )

    def _near(self, sample: PoseSample, t: float) -> Optional[PoseSample]:
        if abs(t - sample.stamp) <= self.max_extrapolation:
            return PoseSample(t, sample.x, sample.y, sample.z, sample.frame_id, sample.yaw)
        return None

    def _prune(self) -> None:
        cutoff = self._stamps[-1] - self.max_age
        drop = bisect_left(self._stamps, cutoff)
        drop = max(drop, len(self._stamps) - self.max_samples)
        if drop > 0:
            del self._stamps[:drop]
            del self._samples[:drop]


def from_odometry(msg: Any, receive_time: Optional[float] = None) -> tuple[float, float, float, float, str]:
    """(stamp, x, y, z, frame_id) of a nav_msgs/Odometry by attribute access.

    The stamp is the header stamp, or ``receive_time`` when the stamp is zero;
    raises ``InvalidInputError`` for a message that is not odometry-shaped.
    """
    try:
        header = msg.header
        position = msg.pose.pose.position
        x, y, z = position.x, position.y, position.z
        frame = header.frame_id
    except AttributeError as exc:
        raise InvalidInputError(f"not an odometry message: {exc}") from exc
    stamp = stamp_seconds(header)
    if stamp is None:
        stamp = as_float(receive_time)
        if stamp is None:
            raise InvalidInputError("odometry has a zero stamp and no receive time was given")
    px, py, pz = (as_float(v) for v in (x, y, z))
    if px is None or py is None or pz is None:
        raise InvalidInputError(f"odometry position is not finite: ({x!r}, {y!r}, {z!r})")
    if not isinstance(frame, str):
        raise InvalidInputError(f"odometry frame_id must be a string, got {type(frame).__name__}")
    return (stamp, px, py, pz, frame)


def heading_of(msg: Any) -> Optional[float]:
    """Yaw (radians) of a nav_msgs/Odometry's orientation; None when absent, not finite or not a rotation.

    The quaternion is normalised first (odometry sources publish slightly
    denormalised ones); an all-zero one (an unset orientation) has no yaw.
    """
    q = getattr(getattr(getattr(msg, "pose", None), "pose", None), "orientation", None)
    if q is None:
        return None
    qx, qy, qz, qw = (as_float(getattr(q, name, None)) for name in ("x", "y", "z", "w"))
    if qx is None or qy is None or qz is None or qw is None:
        return None
    norm = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    if norm < 1e-6:
        return None
    qx, qy, qz, qw = qx / norm, qy / norm, qz / norm, qw / norm
    return math.atan2(2.0 * (qw * qz + qx * qy), 1.0 - 2.0 * (qy * qy + qz * qz))


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


def _frame(frame_id: Any) -> str:
    """'/odom' (ROS 1 style) and 'odom' are the same frame."""
    return frame_id.strip().lstrip("/") if isinstance(frame_id, str) else ""
