"""Rigid transforms as tf2 has them: a translation and a unit quaternion, composed, inverted, interpolated.

``Transform(t, q)`` maps a point from a child frame into its parent frame
(``p_parent = q * p_child + t``), the meaning of a ``geometry_msgs/Transform``
of a ``TransformStamped`` whose ``header.frame_id`` is the parent and whose
``child_frame_id`` is the child. Interpolation is tf2's: linear in
translation, spherical (slerp, the shorter way round) in rotation.

Pure Python floats: a lookup composes three or four of these, where numpy's
per-call overhead would cost more than the arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

Vector = tuple[float, float, float]
Quaternion = tuple[float, float, float, float]
"""(x, y, z, w), as in geometry_msgs/Quaternion."""

IDENTITY_Q: Quaternion = (0.0, 0.0, 0.0, 1.0)


@dataclass(frozen=True)
class Transform:
    """child -> parent: ``apply(p)`` turns a point in the child frame into the parent frame."""

    translation: Vector = (0.0, 0.0, 0.0)
    rotation: Quaternion = IDENTITY_Q

    @classmethod
    def identity(cls) -> "Transform":
        return cls()

    def apply(self, point: Vector) -> Vector:
        rx, ry, rz = rotate(self.rotation, point)
        tx, ty, tz = self.translation
        return (rx + tx, ry + ty, rz + tz)

    def rotate(self, vector: Vector) -> Vector:
        """A direction in the child frame, in the parent frame (no translation)."""
        return rotate(self.rotation, vector)

    def compose(self, inner: "Transform") -> "Transform":
        """``self * inner``: first ``inner`` (grandchild -> child), then ``self`` (child -> parent)."""
        return Transform(self.apply(inner.translation), _multiply(self.rotation, inner.rotation))

    def inverse(self) -> "Transform":
        qx, qy, qz, qw = self.rotation
        conjugate = (-qx, -qy, -qz, qw)
        tx, ty, tz = rotate(conjugate, self.translation)
        return Transform((-tx, -ty, -tz), conjugate)

    @property
    def yaw(self) -> float:
        """Heading of the child's x axis in the parent's x-y plane (radians, counter-clockwise)."""
        qx, qy, qz, qw = self.rotation
        return math.atan2(2.0 * (qw * qz + qx * qy), 1.0 - 2.0 * (qy * qy + qz * qz))

    def distance_to(self, other: "Transform") -> tuple[float, float]:
        """(metres between the translations, radians between the rotations)."""
        dx, dy, dz = (a - b for a, b in zip(self.translation, other.translation))
        dot = abs(sum(a * b for a, b in zip(self.rotation, other.rotation)))
        return math.sqrt(dx * dx + dy * dy + dz * dz), 2.0 * math.acos(min(1.0, dot))


def interpolate(before: Transform, after: Transform, weight: float) -> Transform:
    """tf2's interpolation: lerp of translations, slerp of rotations; ``weight`` 0 = before, 1 = after."""
    ta, tb = before.translation, after.translation
    translation = (ta[0] + weight * (tb[0] - ta[0]), ta[1] + weight * (tb[1] - ta[1]),
                   ta[2] + weight * (tb[2] - ta[2]))
    return Transform(translation, slerp(before.rotation, after.rotation, weight))


def slerp(a: Quaternion, b: Quaternion, weight: float) -> Quaternion:
    dot = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3]
    if dot < 0.0:  # the shorter way round
        b = (-b[0], -b[1], -b[2], -b[3])
        dot = -dot
    if dot > 0.9995:  # nearly equal: lerp and normalise (slerp's division is unstable here)
        mixed = tuple(x + weight * (y - x) for x, y in zip(a, b))
        return _normalised(mixed)  # type: ignore[arg-type]  # a 4-tuple
    theta = math.acos(dot)
    sin_theta = math.sin(theta)
    wa = math.sin((1.0 - weight) * theta) / sin_theta
    wb = math.sin(weight * theta) / sin_theta
    return (wa * a[0] + wb * b[0], wa * a[1] + wb * b[1], wa * a[2] + wb * b[2], wa * a[3] + wb * b[3])


def rotate(q: Quaternion, v: Vector) -> Vector:
    """``q * v * q^-1`` for a unit quaternion (the expanded form: no quaternion products)."""
    qx, qy, qz, qw = q
    vx, vy, vz = v
    # t = 2 * cross(q.xyz, v); v' = v + w * t + cross(q.xyz, t)
    tx = 2.0 * (qy * vz - qz * vy)
    ty = 2.0 * (qz * vx - qx * vz)
    tz = 2.0 * (qx * vy - qy * vx)
    return (vx + qw * tx + (qy * tz - qz * ty),
            vy + qw * ty + (qz * tx - qx * tz),
            vz + qw * tz + (qx * ty - qy * tx))


def from_yaw(x: float, y: float, z: float, yaw: float) -> Transform:
    """A planar pose: a position and a heading about z."""
    return Transform((x, y, z), (0.0, 0.0, math.sin(yaw / 2.0), math.cos(yaw / 2.0)))


def from_message(transform: Any) -> Optional[Transform]:
    """A ``geometry_msgs/Transform`` (or ``Pose``) by attribute access; None when not finite or not a rotation.

    The quaternion is normalised (publishers send slightly denormalised ones);
    an all-zero one (an unset orientation) is no rotation and is refused.
    """
    translation: Any = getattr(transform, "translation", None) or getattr(transform, "position", None)
    rotation: Any = getattr(transform, "rotation", None) or getattr(transform, "orientation", None)
    try:
        t = (float(translation.x), float(translation.y), float(translation.z))
        q = (float(rotation.x), float(rotation.y), float(rotation.z), float(rotation.w))
    except (AttributeError, TypeError, ValueError):
        return None
    if not all(math.isfinite(v) for v in (*t, *q)):
        return None
    norm = math.sqrt(sum(v * v for v in q))
    if norm < 1e-6:
        return None
    return Transform(t, _normalised(q, norm))


def _multiply(a: Quaternion, b: Quaternion) -> Quaternion:
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz)


def _normalised(q: Quaternion, norm: Optional[float] = None) -> Quaternion:
    n = norm if norm is not None else math.sqrt(sum(v * v for v in q))
    return (q[0] / n, q[1] / n, q[2] / n, q[3] / n)
