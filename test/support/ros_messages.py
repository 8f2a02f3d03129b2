"""ROS messages and service parts without ROS: rosbags classes of our own msg/srv, checked like rclpy.

``InterfaceFactory`` builds any message of the Humble typestore (plus
vision_msgs and our own msg/) and our service requests and responses, with
rosidl's defaults for fields not given, and checks every value the way the
generated rclpy setters assert it (a float64 takes a float, not an int; a
uint32 is in range; a list of MemoryHit holds MemoryHits). ``check(msg)``
runs the same checks over a message a handler has filled in, so a handler
that would trip an rclpy assertion on a robot fails here first.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from rosbags.typesys import get_types_from_msg
from rosbags.typesys.base import Nodetype

from emem_ros.replay.typestore import load_typestore
from emem_ros.ros.msgtypes import time_fields

ROOT = Path(__file__).resolve().parents[2]
PKG = "emem_ros"

_INT_RANGES = {
    "int8": (-2**7, 2**7 - 1), "uint8": (0, 2**8 - 1), "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
    "uint64": (0, 2**64 - 1), "byte": (0, 255), "char": (0, 255),
}
_FLOATS = {"float32", "float64"}
_DEFAULT_LINE = re.compile(r"^\s*([A-Za-z_][\w/]*(?:\[\d*\])?)\s+([a-z]\w*)\s+(\S.*?)\s*(?:#.*)?$")


def _split_srv(text: str) -> tuple[str, str]:
    request, _, response = text.partition("\n---\n")
    return request, response


def _defaults(section: str) -> dict[str, Any]:
    """rosidl default values ('bool consolidate true', 'int8 success -1') of a .msg/.srv section."""
    out: dict[str, Any] = {}
    for line in section.splitlines():
        stripped = line.split("#", 1)[0].strip()
        if not stripped or "=" in stripped:
            continue
        match = _DEFAULT_LINE.match(stripped)
        if not match:
            continue
        type_name, field, raw = match.groups()
        if type_name == "bool":
            out[field] = raw.lower() == "true"
        elif type_name in _INT_RANGES:
            out[field] = int(raw)
        elif type_name in _FLOATS:
            out[field] = float(raw)
        elif type_name == "string":
            out[field] = raw.strip("'\"")
    return out


class InterfaceFactory:
    """``make(type_name, **fields)`` for the service handlers, plus requests and responses by .srv name."""

    def __init__(self) -> None:
        self.store = load_typestore("humble")
        types: dict[str, Any] = {}
        self._srv_defaults: dict[str, dict[str, Any]] = {}
        for path in sorted((ROOT / "srv").glob("*.srv")):
            request, response = _split_srv(path.read_text())
            # Registered under msg/ so unqualified names resolve to emem_ros/msg/* as rosidl does.
            types.update(get_types_from_msg(request, f"{PKG}/msg/{path.stem}_Request"))
            types.update(get_types_from_msg(response, f"{PKG}/msg/{path.stem}_Response"))
            self._srv_defaults[f"{path.stem}_Request"] = _defaults(request)
            self._srv_defaults[f"{path.stem}_Response"] = _defaults(response)
        self.store.register(types)
        self.made: list[str] = []

    # ------------------------------------------------------------------ building
    def __call__(self, type_name: str, **fields: Any) -> Any:
        self.made.append(type_name)
        return self._build(type_name, fields, {})

    def request(self, srv: str, **fields: Any) -> Any:
        name = f"{srv}_Request"
        return self._build(f"{PKG}/msg/{name}", fields, self._srv_defaults[name])

    def response(self, srv: str) -> Any:
        name = f"{srv}_Response"
        return self._build(f"{PKG}/msg/{name}", {}, self._srv_defaults[name])

    def _build(self, type_name: str, given: dict[str, Any], defaults: dict[str, Any]) -> Any:
        cls = self.store.types[type_name]
        fielddefs = self.store.fielddefs[type_name][1]
        known = {name for name, _ in fielddefs}
        unknown = set(given) - known
        assert not unknown, f"{type_name} has no field(s) {sorted(unknown)}"
        values = {}
        for name, desc in fielddefs:
            if name in given:
                value = given[name]
                self._check(desc, value, f"{type_name}.{name}")
            elif name in defaults:
                value = defaults[name]
            else:
                value = self._default(desc)
            values[name] = value
        return cls(**values)

    def _default(self, desc: Any) -> Any:
        node, detail = desc
        if node == Nodetype.BASE:
            kind = detail[0]
            if kind == "bool":
                return False
            if kind == "string":
                return ""
            if kind in _FLOATS:
                return 0.0
            return 0
        if node == Nodetype.NAME:
            return self._build(detail, {}, {})
        if node == Nodetype.SEQUENCE:
            return []
        inner, size = detail
        return [self._default(inner) for _ in range(size)]

    # ------------------------------------------------------------------ rclpy's assertions
    def _check(self, desc: Any, value: Any, where: str) -> None:
        node, detail = desc
        if node == Nodetype.BASE:
            kind = detail[0]
            if kind == "bool":
                assert isinstance(value, bool), f"{where} must be a bool, got {value!r}"
            elif kind == "string":
                assert isinstance(value, str), f"{where} must be a str, got {value!r}"
            elif kind in _FLOATS:
                assert isinstance(value, float), f"{where} must be a float (rclpy rejects {type(value).__name__})"
            else:
                low, high = _INT_RANGES[kind]
                assert isinstance(value, int) and not isinstance(value, bool), f"{where} must be an int, got {value!r}"
                assert low <= value <= high, f"{where}={value} is outside {kind}"
        elif node == Nodetype.NAME:
            cls = self.store.types[detail]
            assert isinstance(value, cls), f"{where} must be a {detail}, got {type(value).__name__}"
            self.check(value)
        else:
            inner, size = detail
            assert isinstance(value, list), f"{where} must be a list, got {type(value).__name__}"
            if node == Nodetype.ARRAY:
                assert len(value) == size, f"{where} must hold {size} items"
            for i, item in enumerate(value):
                self._check(inner, item, f"{where}[{i}]")

    def check(self, msg: Any) -> Any:
        """Every field of a filled message passes rclpy's setter checks (recursively)."""
        type_name = msg.__msgtype__
        for name, desc in self.store.fielddefs[type_name][1]:
            self._check(desc, getattr(msg, name), f"{type_name}.{name}")
        return msg


# ---------------------------------------------------------------------- common messages
def header(make: InterfaceFactory, t: float, frame: str = "") -> Any:
    return make("std_msgs/msg/Header", stamp=make("builtin_interfaces/msg/Time", **time_fields(t)), frame_id=frame)


def odometry(make: InterfaceFactory, t: float, x: float, y: float, frame: str = "odom", yaw: float = 0.0) -> Any:
    """nav_msgs/Odometry of a robot at (x, y) facing ``yaw`` (radians), stamped t."""
    import math

    pose = make("geometry_msgs/msg/Pose", position=make("geometry_msgs/msg/Point", x=x, y=y, z=0.0),
                orientation=make("geometry_msgs/msg/Quaternion", x=0.0, y=0.0, z=math.sin(yaw / 2),
                                 w=math.cos(yaw / 2)))
    return make("nav_msgs/msg/Odometry", header=header(make, t, frame), child_frame_id="base_link",
                pose=make("geometry_msgs/msg/PoseWithCovariance", pose=pose, covariance=[0.0] * 36))


def camera_info(make: InterfaceFactory, t: float, fx: float = 400.0, cx: float = 320.0, width: int = 640,
                height: int = 480) -> Any:
    """sensor_msgs/CameraInfo of a pinhole camera (fy = fx, cy at the centre row)."""
    k = [fx, 0.0, cx, 0.0, fx, height / 2, 0.0, 0.0, 1.0]
    r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    p = [fx, 0.0, cx, 0.0, 0.0, fx, height / 2, 0.0, 0.0, 0.0, 1.0, 0.0]
    return make("sensor_msgs/msg/CameraInfo", header=header(make, t, "camera"), height=height, width=width,
                distortion_model="plumb_bob", d=[0.0] * 5, k=[float(v) for v in k], r=r, p=[float(v) for v in p])


def boxes(make: InterfaceFactory, t: float, *items: tuple[str, float, float, float, float]) -> Any:
    """vision_msgs/Detection2DArray of (label, u, v, width, height) boxes (score 0.9), stamped t."""
    detections_ = []
    for label, u, v, w, h in items:
        centre = make("vision_msgs/msg/Pose2D", position=make("vision_msgs/msg/Point2D", x=u, y=v), theta=0.0)
        detections_.append(make("vision_msgs/msg/Detection2D", header=header(make, t, "camera"), results=[
            make("vision_msgs/msg/ObjectHypothesisWithPose",
                 hypothesis=make("vision_msgs/msg/ObjectHypothesis", class_id=label, score=0.9))],
            bbox=make("vision_msgs/msg/BoundingBox2D", center=centre, size_x=w, size_y=h)))
    return make("vision_msgs/msg/Detection2DArray", header=header(make, t, "camera"), detections=detections_)


def detections(make: InterfaceFactory, t: float, *labels: str) -> Any:
    """vision_msgs/Detection2DArray with one detection (score 0.9) per label, stamped t."""
    items = [make("vision_msgs/msg/Detection2D", header=header(make, t, "camera"), results=[
        make("vision_msgs/msg/ObjectHypothesisWithPose",
             hypothesis=make("vision_msgs/msg/ObjectHypothesis", class_id=label, score=0.9))]) for label in labels]
    return make("vision_msgs/msg/Detection2DArray", header=header(make, t, "camera"), detections=items)


def transform_stamped(make: InterfaceFactory, t: float, parent: str, child: str, x: float, y: float,
                      z: float = 0.0, yaw: float = 0.0, *, rotation: Optional[tuple[float, float, float, float]] = None
                      ) -> Any:
    """geometry_msgs/TransformStamped child -> parent: a translation and a heading (or a full quaternion)."""
    import math

    qx, qy, qz, qw = rotation if rotation is not None else (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))
    transform = make("geometry_msgs/msg/Transform", translation=make("geometry_msgs/msg/Vector3", x=x, y=y, z=z),
                     rotation=make("geometry_msgs/msg/Quaternion", x=qx, y=qy, z=qz, w=qw))
    return make("geometry_msgs/msg/TransformStamped", header=header(make, t, parent), child_frame_id=child,
                transform=transform)


def tf_message(make: InterfaceFactory, *transforms: Any) -> Any:
    """tf2_msgs/TFMessage of ``transform_stamped`` items."""
    return make("tf2_msgs/msg/TFMessage", transforms=list(transforms))


def detections_3d(make: InterfaceFactory, t: float, frame: str, *items: tuple[str, float, float, float]) -> Any:
    """vision_msgs/Detection3DArray of (label, x, y, z) object positions in ``frame`` (score 0.9)."""
    out = []
    for label, x, y, z in items:
        pose = make("geometry_msgs/msg/Pose", position=make("geometry_msgs/msg/Point", x=x, y=y, z=z),
                    orientation=make("geometry_msgs/msg/Quaternion", x=0.0, y=0.0, z=0.0, w=1.0))
        result = make("vision_msgs/msg/ObjectHypothesisWithPose",
                      hypothesis=make("vision_msgs/msg/ObjectHypothesis", class_id=label, score=0.9),
                      pose=make("geometry_msgs/msg/PoseWithCovariance", pose=pose, covariance=[0.0] * 36))
        out.append(make("vision_msgs/msg/Detection3D", header=header(make, t, frame), results=[result]))
    return make("vision_msgs/msg/Detection3DArray", header=header(make, t, frame), detections=out)
