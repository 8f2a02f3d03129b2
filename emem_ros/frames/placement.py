"""The one place that turns "stamped t, in frame F" into a place in the memory's fixed frame.

Two sources, one face (``Placer``):
- ``TfPlacer`` (``fixed_frame`` set, e.g. ``map``): the robot is where
  ``fixed_frame <- base_frame`` puts it at t; a sensor is where
  ``fixed_frame <- F`` puts it; both from a ``TransformBuffer`` fed by
  ``/tf``, ``/tf_static`` and, for an edge ``/tf`` lacks, odometry.
- ``OdometryPlacer`` (``fixed_frame`` empty: the behaviour before TF): the
  robot's pose is the odometry interpolated at t; a sensor frame other than
  the odometry's own is unknown (no TF), so only positions already in the
  odometry frame are kept.

Everything else (the ingest pipeline, bearings, entities, answers) asks a
``Placer`` and never composes transforms itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional, Union

from emem_ros.frames.buffer import LookupFailure, TransformBuffer, normalize, stamp_seconds
from emem_ros.frames.transform import Transform, Vector, from_message, from_yaw
from emem_ros.geometry.rays import OPTICAL_IN_BODY

LIVE_POSE_MAX_AGE = 5.0
"""Seconds: an older pose is not where the robot is now (get_current_context then reads its memory)."""


@dataclass(frozen=True)
class RobotPose:
    """Where the robot's base was: ``transform`` is fixed frame <- base frame."""

    stamp: float
    transform: Transform
    heading: bool = True
    """False when the source had no orientation (odometry without one): no bearings from this pose."""

    @property
    def position(self) -> Vector:
        return self.transform.translation


Placed = Union[RobotPose, LookupFailure]
Sensor = Union[Transform, LookupFailure]


class Placer(ABC):
    """The fixed frame and how things stamped in other frames are put into it."""

    fixed_frame: str = ""
    uses_tf: bool = False

    @abstractmethod
    def robot(self, stamp: float, *, clamp: bool = False) -> Placed:
        """fixed frame <- base frame at ``stamp``."""

    @abstractmethod
    def sensor(self, frame: Optional[str], stamp: float, *, clamp: bool = False) -> Sensor:
        """fixed frame <- ``frame`` at ``stamp``."""

    @abstractmethod
    def live_robot(self, now: float) -> Optional[RobotPose]:
        """The robot's newest pose if it is recent (``LIVE_POSE_MAX_AGE``), else None."""

    @abstractmethod
    def on_odometry(self, msg: Any, receive_time: Optional[float] = None) -> bool:
        """Take one nav_msgs/Odometry; False when it is malformed or refused."""

    def point(self, frame: Optional[str], stamp: float, point: Vector, *, clamp: bool = False
              ) -> Union[Vector, LookupFailure]:
        """A point measured in ``frame`` at ``stamp``, in the fixed frame."""
        sensor = self.sensor(frame, stamp, clamp=clamp)
        return sensor if isinstance(sensor, LookupFailure) else sensor.apply(point)

    def camera(self, frame: Optional[str], stamp: float, *, clamp: bool = False) -> Sensor:
        """fixed frame <- the camera's optical frame (REP 103: z forward, x right, y down).

        An image's header names its optical frame (``*_optical_frame``); a
        detector that stamps its boxes with the camera's body frame
        (``camera_link``: x forward, y left, z up) is turned to the optical
        convention, so pixels mean the same either way.
        """
        sensor = self.sensor(frame, stamp, clamp=clamp)
        if isinstance(sensor, LookupFailure) or "optical" in normalize(frame):
            return sensor
        return sensor.compose(OPTICAL_IN_BODY)


class TfPlacer(Placer):
    """Places from a transform tree (see the module docstring)."""

    uses_tf = True

    def __init__(self, buffer: TransformBuffer, fixed_frame: str, base_frame: str, *,
                 live_max_age: float = LIVE_POSE_MAX_AGE) -> None:
        self.buffer = buffer
        self.fixed_frame = normalize(fixed_frame)
        self.base_frame = normalize(base_frame)
        self.live_max_age = live_max_age
        self.odometry_rejected = 0

    def robot(self, stamp: float, *, clamp: bool = False) -> Placed:
        found = self.buffer.lookup(self.fixed_frame, self.base_frame, stamp, clamp=clamp)
        return found if isinstance(found, LookupFailure) else RobotPose(stamp, found)

    def sensor(self, frame: Optional[str], stamp: float, *, clamp: bool = False) -> Sensor:
        if not normalize(frame):
            return LookupFailure("no frame_id", "the message names no frame (empty header.frame_id)", False,
                                 self.fixed_frame, "")
        return self.buffer.lookup(self.fixed_frame, normalize(frame), stamp, clamp=clamp)

    def live_robot(self, now: float) -> Optional[RobotPose]:
        newest = self.buffer.latest_time(self.fixed_frame, self.base_frame)
        if newest is None or now - newest > self.live_max_age:
            return None
        found = self.robot(newest, clamp=True)
        return found if isinstance(found, RobotPose) else None

    def on_odometry(self, msg: Any, receive_time: Optional[float] = None) -> bool:
        """An odometry pose as ``header.frame_id -> child_frame_id`` (the base frame when unset), unless
        ``/tf`` already carries that edge; False (counted) when malformed or refused."""
        try:
            stamp = _odometry_stamp(msg, receive_time)
            parent = normalize(msg.header.frame_id)
            child = normalize(getattr(msg, "child_frame_id", "")) or self.base_frame
            pose = from_message(msg.pose.pose)
        except (AttributeError, ValueError):
            self.odometry_rejected += 1
            return False
        if not parent:
            self.odometry_rejected += 1
            return False
        accepted = self.buffer.add_pose(parent, child, stamp, pose, now=receive_time) is None
        self.odometry_rejected += not accepted
        return accepted


class OdometryPlacer(Placer):
    """The odometry frame as the fixed frame: the behaviour without TF (``fixed_frame`` empty)."""

    def __init__(self, poses: Any, frame: str, *, live_max_age: float = LIVE_POSE_MAX_AGE) -> None:
        self.poses = poses
        """A ``emem_ros.ros.pose_history.PoseHistory``."""
        self.fixed_frame = normalize(frame)
        self.live_max_age = live_max_age

    def robot(self, stamp: float, *, clamp: bool = False) -> Placed:
        sample = self.poses.lookup(stamp)
        if sample is None:
            return LookupFailure("no odometry", "no odometry near the stamp", False, self.fixed_frame, "odometry")
        heading = sample.yaw is not None
        return RobotPose(stamp, from_yaw(sample.x, sample.y, sample.z, sample.yaw if heading else 0.0), heading)

    def sensor(self, frame: Optional[str], stamp: float, *, clamp: bool = False) -> Sensor:
        name = normalize(frame)
        if not name or name == self.fixed_frame:
            return Transform.identity()
        return LookupFailure("no TF", f"frame '{name}' is not the odometry frame and fixed_frame is empty "
                             "(set fixed_frame to use TF)", False, self.fixed_frame, name)

    def camera(self, frame: Optional[str], stamp: float, *, clamp: bool = False) -> Sensor:
        """Never from a frame (no TF): the caller mounts the camera on the robot's pose."""
        return LookupFailure("no TF", "fixed_frame is empty: the camera's place comes from the camera.* "
                             "parameters", False, self.fixed_frame, frame or "")

    def live_robot(self, now: float) -> Optional[RobotPose]:
        latest = self.poses.latest()
        if latest is None or now - latest.stamp > self.live_max_age:
            return None
        found = self.robot(latest.stamp)
        return found if isinstance(found, RobotPose) else None

    def on_odometry(self, msg: Any, receive_time: Optional[float] = None) -> bool:
        accepted: bool = self.poses.add_odometry(msg, receive_time)
        return accepted


def _odometry_stamp(msg: Any, receive_time: Optional[float]) -> float:
    stamp = stamp_seconds(msg.header.stamp)
    if stamp is None:
        if receive_time is None:
            raise ValueError("odometry has a zero stamp and no receive time")
        stamp = float(receive_time)
    return stamp
