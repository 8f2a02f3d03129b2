"""A detection layer's camera: intrinsics (CameraInfo or parameters) and mounting, to turn boxes into rays.

``layers.<name>.camera_info_topic`` names a ``sensor_msgs/CameraInfo``
topic; its latest message gives the intrinsics (``k``: fx, cx, fy, cy; the
image size). Without one, ``layers.<name>.camera.fx`` / ``.cx`` /
``.image_width`` give them (no elevation then). The camera's place on the
robot is static (``camera.x``, ``.y``, ``.z``, ``.yaw`` in the robot's base
frame): no TF is needed. Adapters stay message-only; the pipeline asks the
layer's camera for the ray of each stored draft's box.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from emem_ros.frames.transform import Transform
from emem_ros.geometry.rays import Intrinsics, Mounting, Ray, cut_by_border, ray_from_camera

DEFAULT_PIXEL_NOISE = 4.0
"""Pixels (1 sigma) a detector's box centre wanders by: 1-2 % of a 640 px image."""
DEFAULT_HEADING_NOISE = 0.01
"""Radians (1 sigma, ~0.6 deg): odometry heading and camera mounting error together."""
CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"


@dataclass(frozen=True)
class CameraSpec:
    """The camera parameters of one detection layer (validated by ``params``)."""

    info_topic: str = ""
    fx: float = 0.0
    cx: float = 0.0
    """0 = the image's centre column."""
    image_width: int = 0
    mounting: Mounting = field(default_factory=Mounting)
    pixel_noise: float = DEFAULT_PIXEL_NOISE
    heading_noise: float = DEFAULT_HEADING_NOISE

    @property
    def configured(self) -> bool:
        """True when the layer can make rays: a CameraInfo topic or fx and the image width."""
        return bool(self.info_topic) or (self.fx > 0.0 and self.image_width > 0)

    def intrinsics(self) -> Optional[Intrinsics]:
        """The intrinsics the parameters give (None without fx and image width)."""
        if self.fx <= 0.0 or self.image_width <= 0:
            return None
        cx = self.cx if self.cx > 0.0 else self.image_width / 2.0
        return Intrinsics(fx=self.fx, cx=cx, width=self.image_width)


def intrinsics_from_camera_info(msg: Any) -> Intrinsics:
    """fx, cx, fy, cy and the image size of a sensor_msgs/CameraInfo; ValueError when unusable."""
    from emem_ros.ros.adapters.base import as_float  # not at the top: params imports this module
    k = getattr(msg, "k", None)
    if k is None:
        k = getattr(msg, "K", None)  # ROS 1 spelling, some bridges keep it
    try:
        values = [as_float(k[i]) for i in (0, 2, 4, 5)]  # type: ignore[index]
        width, height = int(msg.width), int(msg.height)
    except (TypeError, IndexError, AttributeError, ValueError) as exc:
        raise ValueError(f"not a CameraInfo with a 3x3 K and an image size ({exc})") from None
    fx, cx, fy, cy = values
    if fx is None or cx is None or fx <= 0.0 or width <= 0:
        raise ValueError(f"CameraInfo without usable intrinsics (fx={k[0]!r}, width={width})")  # type: ignore[index]
    if not 0.0 <= cx <= width:
        raise ValueError(f"CameraInfo principal point cx={cx} lies outside the {width} px wide image")
    if fy is None or cy is None or fy <= 0.0 or height <= 0:  # no vertical intrinsics: no elevation
        return Intrinsics(fx=fx, cx=cx, width=width)
    return Intrinsics(fx=fx, cx=cx, width=width, fy=fy, cy=cy, height=height)


class LayerCamera:
    """The camera state of one layer: intrinsics (parameters, then the latest CameraInfo) and mounting.

    Thread-safe: CameraInfo arrives on another executor thread than detections.
    """

    def __init__(self, spec: CameraSpec) -> None:
        self.spec = spec
        self._intrinsics = spec.intrinsics()
        self._lock = threading.Lock()
        self.infos = 0
        """CameraInfo messages accepted."""
        self.rejected_infos = 0

    @property
    def intrinsics(self) -> Optional[Intrinsics]:
        with self._lock:
            return self._intrinsics

    def on_camera_info(self, msg: Any) -> bool:
        """Take the intrinsics of a CameraInfo; False (counted) when it has none usable."""
        try:
            intrinsics = intrinsics_from_camera_info(msg)
        except ValueError:
            with self._lock:
                self.rejected_infos += 1
            return False
        with self._lock:
            self._intrinsics = intrinsics
            self.infos += 1
        return True

    def mounted(self, robot: Transform) -> Transform:
        """fixed frame <- optical frame of this camera on a robot at ``robot``, from the static ``camera.*``
        parameters (the fallback where no TF for the camera exists)."""
        return robot.compose(self.spec.mounting.transform())

    def ray(self, camera: Transform, bbox: Any) -> tuple[Optional[Ray], str]:
        """The ray of a draft's box (metadata ``bbox``) from the camera's optical frame at ``camera`` (fixed
        frame <- optical); (None, why) when there is none."""
        from emem_ros.ros.adapters.base import as_float

        intrinsics = self.intrinsics
        if intrinsics is None:
            return None, "no camera intrinsics yet (no CameraInfo received, no camera.fx)"
        centre = bbox.get("center") if isinstance(bbox, dict) else None
        size = bbox.get("size") if isinstance(bbox, dict) else None
        if not isinstance(centre, (list, tuple)) or len(centre) != 2:
            return None, "the detection has no box centre"
        u, v = as_float(centre[0]), as_float(centre[1])
        if u is None:
            return None, "the box centre is not a finite number"
        width = as_float(size[0]) if isinstance(size, (list, tuple)) and size else None
        if cut_by_border(u, width, intrinsics):
            return None, "the box is cut by the image border (the object's centre may lie beyond it)"
        ray = ray_from_camera(camera, intrinsics, u, v, width, self.spec.pixel_noise, self.spec.heading_noise)
        if ray is None:
            return None, "the box centre lies outside the image, or the camera looks straight up or down"
        return ray, ""
