"""Where a robot's map frame sits in the fleet frame: a 2-D rigid transform (x, y, yaw).

Each robot keeps its own frame in its own file; the fleet store holds every
position in one fleet frame, so sightings of several robots can be merged.
The transform is applied at sync time (z is left as it is: robots share the
floor's height reference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass(frozen=True)
class RigidTransform:
    """fleet = R(yaw) @ local + (x, y); identity by default."""

    x: float = 0.0
    y: float = 0.0
    yaw: float = 0.0
    """Radians, counter-clockwise."""

    def __post_init__(self) -> None:
        for name in ("x", "y", "yaw"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"transform {name} must be a finite number, got {value!r}")

    @property
    def is_identity(self) -> bool:
        return self.x == 0.0 and self.y == 0.0 and self.yaw == 0.0

    def apply(self, x: float, y: float) -> tuple[float, float]:
        if self.is_identity:
            return x, y
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return self.x + c * x - s * y, self.y + s * x + c * y

    def apply_arrays(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised apply (NaN stays NaN: positions that are unknown)."""
        if self.is_identity:
            return x, y
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return self.x + c * x - s * y, self.y + s * x + c * y

    def inverse(self) -> "RigidTransform":
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return RigidTransform(-(c * self.x + s * self.y), s * self.x - c * self.y, -self.yaw)

    def then(self, other: "RigidTransform") -> "RigidTransform":
        """``other`` applied after ``self``."""
        x, y = other.apply(self.x, self.y)
        return RigidTransform(x, y, math.atan2(math.sin(self.yaw + other.yaw), math.cos(self.yaw + other.yaw)))

    def affine_params(self) -> tuple[float, float, float, float, float, float]:
        """(a, b, d, e, xoff, yoff) for PostGIS ``ST_Affine(geom, a, b, d, e, xoff, yoff)``."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return c, -s, s, c, self.x, self.y


IDENTITY = RigidTransform()


def parse_transform(x: Optional[float] = None, y: Optional[float] = None, yaw: Optional[float] = None,
                    yaw_degrees: Optional[float] = None) -> RigidTransform:
    """From command-line style values; yaw in radians or degrees (not both)."""
    if yaw is not None and yaw_degrees is not None:
        raise ValueError("give the yaw in radians or in degrees, not both")
    angle = math.radians(yaw_degrees) if yaw_degrees is not None else (yaw or 0.0)
    return RigidTransform(float(x or 0.0), float(y or 0.0), float(angle))
