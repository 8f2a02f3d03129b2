"""A 2-D detection as a ray in the map frame: what the observation stores, and arrays of many.

A box centre says in which direction the object was, not how far: with the
camera's intrinsics, its mounting on the robot and the robot's pose (heading
included) at the image's stamp, the detection is a ray from the camera
through the object. Observations keep it in their metadata as
``"ray": [x, y, z, azimuth, elevation, sigma]``: the camera's position in the
map frame (metres), the ray's direction (radians; azimuth counter-clockwise
from the map's x axis, elevation up from the horizontal, 0 when unknown) and
the standard deviation of the azimuth (radians). Metadata, not columns: the
operation log, export/import, rebuild and the fleet sync carry it as they
carry any metadata, and the hot ingest path writes no extra column.

A robot-pose sighting (with or without a ray) also records how far its
camera sees (``"view_range"``, metres): the object was somewhere within it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from emem_ros.frames.transform import Transform, from_yaw

OPTICAL_IN_BODY = Transform((0.0, 0.0, 0.0), (-0.5, 0.5, -0.5, 0.5))
"""body (x forward, y left, z up) <- optical (z forward, x right, y down): REP 103's rpy(-pi/2, 0, -pi/2)."""

RAY_KEY = "ray"
VIEW_RANGE_KEY = "view_range"
DEFAULT_VIEW_RANGE = 6.0
"""Metres a camera-based detector sees household objects at when a layer does not say (``view_range``):
YOLO-class detectors at 640 px find mugs to about 4-5 m and furniture to 8 m and more."""
MIN_RANGE = 0.3
"""Metres: nearer than this an object does not fit in the image (nor is it detected whole)."""
MAX_SIGMA = 0.5
"""Radians: a ray vaguer than this (±29°) says little more than the robot's pose; it is not stored."""
BOX_WIDTH_SHARE = 0.1
"""A box's centre is off the projection of the object's centre by about this share of the box's width
(1 sigma): perspective (a sofa seen at an angle), partial occlusion, the detector's own fit."""


@dataclass(frozen=True)
class Ray:
    """One detection's ray: origin (the camera, map frame), direction and angular noise."""

    x: float
    y: float
    z: float
    azimuth: float
    elevation: float
    sigma: float

    def to_metadata(self) -> list[float]:
        return [round(self.x, 3), round(self.y, 3), round(self.z, 3), round(wrap(self.azimuth), 5),
                round(self.elevation, 5), round(self.sigma, 5)]

    @classmethod
    def from_metadata(cls, value: Any) -> Optional["Ray"]:
        """The ray stored by ``to_metadata``; None for anything else (older files, other writers)."""
        if not isinstance(value, (list, tuple)) or len(value) != 6:
            return None
        numbers = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item):
                return None
            numbers.append(float(item))
        ray = cls(*numbers)
        return ray if 0.0 < ray.sigma <= MAX_SIGMA else None


def wrap(angle: float) -> float:
    """An angle in [-pi, pi)."""
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


def wrap_array(angles: np.ndarray) -> np.ndarray:
    return (angles + np.pi) % (2.0 * np.pi) - np.pi


@dataclass(frozen=True)
class Mounting:
    """Where the camera sits on the robot (base frame, no TF needed): offset, height and yaw."""

    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    yaw: float = 0.0

    def transform(self) -> Transform:
        """base <- optical frame of a level camera at this place, looking along ``yaw``."""
        return from_yaw(self.x, self.y, self.z, self.yaw).compose(OPTICAL_IN_BODY)


@dataclass(frozen=True)
class Intrinsics:
    """The pinhole numbers a bearing needs (from a ``sensor_msgs/CameraInfo`` or parameters)."""

    fx: float
    cx: float
    width: int
    fy: float = 0.0
    """0 when unknown: then no elevation."""
    cy: float = 0.0
    height: int = 0

    def usable(self) -> bool:
        return self.fx > 0.0 and self.width > 0 and 0.0 <= self.cx <= self.width


def camera_ray(robot_x: float, robot_y: float, robot_z: float, robot_yaw: float, mounting: Mounting,
               intrinsics: Intrinsics, u: float, v: Optional[float], box_width: Optional[float],
               pixel_noise: float, heading_noise: float) -> Optional[Ray]:
    """The ray of a box seen from a planar robot pose and the camera's static ``mounting`` (no TF)."""
    robot = from_yaw(robot_x, robot_y, robot_z, robot_yaw)
    return ray_from_camera(robot.compose(mounting.transform()), intrinsics, u, v, box_width, pixel_noise,
                           heading_noise)


def ray_from_camera(camera: Transform, intrinsics: Intrinsics, u: float, v: Optional[float],
                    box_width: Optional[float], pixel_noise: float, heading_noise: float) -> Optional[Ray]:
    """The ray of a box centred at pixel (``u``, ``v``) from a camera at ``camera`` (fixed <- optical frame).

    The optical frame is REP 103's: z along the optical axis, x right in the
    image, y down. The pixel's direction ((u - cx) / fx, (v - cy) / fy, 1) is
    turned into the fixed frame: its azimuth (counter-clockwise from the
    fixed frame's x axis) and elevation (up from the horizontal). Without
    vertical intrinsics the row is taken as the centre row. The angular noise
    combines the detector's pixel noise, the heading's and ``BOX_WIDTH_SHARE``
    of the box's angular width (a big object's box centre is a vague bearing
    of its centre). None when the centre lies outside the image, or the box
    is cut by the image border (``cut_by_border``): the object's centre may
    then lie anywhere beyond it.
    """
    if not intrinsics.usable() or not (math.isfinite(u) and -0.5 <= u <= intrinsics.width + 0.5):
        return None
    if cut_by_border(u, box_width, intrinsics):
        return None
    down = 0.0
    if v is not None and math.isfinite(v) and intrinsics.fy > 0.0 and intrinsics.height > 0:
        down = (v - intrinsics.cy) / intrinsics.fy
    dx, dy, dz = camera.rotate(((u - intrinsics.cx) / intrinsics.fx, down, 1.0))
    variance = (pixel_noise / intrinsics.fx) ** 2 + heading_noise ** 2
    if box_width is not None and math.isfinite(box_width) and box_width > 0.0:
        variance += (BOX_WIDTH_SHARE * box_width / intrinsics.fx) ** 2
    sigma = math.sqrt(variance)
    if sigma > MAX_SIGMA or math.hypot(dx, dy) < 1e-9:  # vague, or looking straight up or down
        return None
    ox, oy, oz = camera.translation
    return Ray(ox, oy, oz, wrap(math.atan2(dy, dx)), math.atan2(dz, math.hypot(dx, dy)), sigma)


BORDER = 1.0
"""Pixels: a box edge this close to the image's left or right border was cut by it."""


def cut_by_border(u: float, box_width: Optional[float], intrinsics: Intrinsics) -> bool:
    """Whether the box reaches the image's left or right border (detectors clip boxes to the image)."""
    if box_width is None or not math.isfinite(box_width) or box_width <= 0.0:
        return False
    return u - box_width / 2.0 <= BORDER or u + box_width / 2.0 >= intrinsics.width - BORDER


@dataclass
class RaySet:
    """Many rays as columns; ``weight`` is what each counts for when several are ranked (relevance, recency)."""

    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    azimuth: np.ndarray
    elevation: np.ndarray
    sigma: np.ndarray
    view_range: np.ndarray
    stamp: np.ndarray
    weight: np.ndarray
    key: np.ndarray
    """Caller's id per ray (an observation id, a text id): carried through ``take``."""

    FIELDS = ("x", "y", "z", "azimuth", "elevation", "sigma", "view_range", "stamp", "weight", "key")

    def __len__(self) -> int:
        return len(self.x)

    @classmethod
    def empty(cls) -> "RaySet":
        return cls(*(np.empty(0, np.int64 if f == "key" else np.float64) for f in cls.FIELDS))

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[float]]) -> "RaySet":
        """From (x, y, z, azimuth, elevation, sigma, view_range, stamp, weight, key) tuples."""
        if not rows:
            return cls.empty()
        array = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(cls.FIELDS))
        columns = [array[:, i].copy() for i in range(len(cls.FIELDS))]
        columns[-1] = columns[-1].astype(np.int64)
        return cls(*columns)

    def take(self, index: Any) -> "RaySet":
        return RaySet(*(getattr(self, f)[index] for f in self.FIELDS))

    @classmethod
    def concat(cls, parts: Iterable["RaySet"]) -> "RaySet":
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.FIELDS))


def ray_of(metadata: Any) -> Optional[Ray]:
    """The ray in a metadata dict or JSON text (None when it has none or it is malformed)."""
    if isinstance(metadata, str):
        if f'"{RAY_KEY}"' not in metadata:
            return None
        try:
            metadata = json.loads(metadata)
        except ValueError:
            return None
    if not isinstance(metadata, dict):
        return None
    return Ray.from_metadata(metadata.get(RAY_KEY))


def view_range_of(metadata: Any, default: float = DEFAULT_VIEW_RANGE) -> float:
    """The sighting's ``view_range`` (a positive finite number), else ``default``."""
    value = metadata.get(VIEW_RANGE_KEY) if isinstance(metadata, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return default
    return float(value)
