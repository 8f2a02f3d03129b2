#!/usr/bin/env python3
"""Write the bundled bags and their ground truth (deterministic: same seed, same bytes).

A differential-drive robot patrols a small flat (kitchen, hallway, living
room, office), stopping at look-out points to turn once on the spot.
Everything it "perceives" is computed from a known world, so a replay can be
checked against the ground truth: where each object is, which room the
robot was in when, what it saw there, and when the battery fell below given
levels.

The 2-D detector is a camera model: a pinhole camera (``CAMERA``: 640 x 480
px, fx = fy = 381 px, i.e. ±40° across) mounted 20 cm ahead of the base and
90 cm up, looking forward, taking a frame every 0.5 s half-way between two
odometry messages. An object is detected when its centre is in the field of
view, within 6 m and in the robot's room (walls hide the others), nine
frames in ten. Its box is the projection of the object's bounding box with
Gaussian pixel noise on centre and size (``PIXEL_NOISE``), clipped to the
image as detectors do (a half-visible sofa's box centre lies inwards of the
sofa); two boxes in a hundred land somewhere else in the image (a detector's
mistake). The camera's intrinsics are published on ``/camera/camera_info``.

    python rosbags/generate.py --out rosbags        (or: make bags)

writes ``patrol_db3/`` (sqlite3 storage, zstd per message, as ``ros2 bag
record --compression-mode message`` does) and ``patrol_mcap/`` (mcap, zstd
chunks) with the same messages, plus ``ground_truth.json``; and
``camera_only_mcap/`` with its ``ground_truth_camera_only.json``: another
patrol (two laps, other noise) of a robot with the camera alone (odometry,
2-D detections, CameraInfo, captions; no 3-D detector, no body topics); and
``patrol_tf_mcap/`` with ``ground_truth_tf.json`` (``generate_tf.py``): the
robot as a real one publishes it, on a TF tree ``map -> odom -> base_link ->
camera_link -> camera_optical_frame`` with drifting odometry, localization
corrections and a reboot half-way, detections in the camera's optical frame.
Topics and types match the layers of config/memory.yaml.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
from rosbags.interfaces import Qos
from rosbags.rosbag2 import Writer
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode, StoragePlugin

from emem_ros.replay.typestore import load_typestore

SEED = 20250314
START = 1_741_942_800.0
"""2025-03-14 09:00:00 UTC: bag time starts here."""
START_NS = 1_741_942_800 * 1_000_000_000
FRAME = "odom"
DT = 0.1
"""Simulation step and odometry period (10 Hz)."""
SPEED = 0.5
"""m/s while driving."""
TURN_RATE = 1.0
"""rad/s when turning towards the next waypoint."""
LOOK_RATE = 0.5
"""rad/s during a look-around (one full turn, about 12.6 s)."""
LAPS = 3
BATTERY_START = 0.82
BATTERY_DRAIN = 0.0005
"""Charge fraction per second: demo-fast, so a 13-minute bag crosses several levels."""
BATTERY_LEVELS = (0.8, 0.7, 0.6, 0.5)
WARN_WINDOW = (400.0, 460.0)
"""Seconds after START during which the left motor reports a WARN."""

CAMERA_FOV = math.radians(40.0)
"""Half-angle of the view of the 3-D detector and the captioner (the 2-D camera's: ``CAMERA``)."""
RANGE_2D = 6.0
RANGE_3D = 4.5
CAMERA_PERIOD = 5
"""Odometry steps between camera frames (2 Hz)."""
CAMERA_PHASE = 0.05
"""Seconds after an odometry message that a frame is taken: a detection's pose must be interpolated."""
PIXEL_NOISE = 4.0
"""Pixels (1 sigma) of box-centre noise."""
WRONG_BOX = 0.02
"""Share of boxes placed at a random column (a detector's mistake)."""
MISSED = 0.1
"""Share of visible objects a frame misses."""


@dataclass(frozen=True)
class Camera:
    """A pinhole camera on the robot: intrinsics, and where it sits (base frame)."""

    width: int = 640
    height: int = 480
    fx: float = 381.0
    fy: float = 381.0
    cx: float = 320.0
    cy: float = 240.0
    x: float = 0.2
    y: float = 0.0
    z: float = 0.9
    yaw: float = 0.0

    @property
    def half_fov(self) -> float:
        return math.atan2(self.cx, self.fx)


CAMERA = Camera()


# ---------------------------------------------------------------------- the world
@dataclass(frozen=True)
class Room:
    name: str
    lo: tuple[float, float]
    hi: tuple[float, float]

    def contains(self, x: float, y: float) -> bool:
        return self.lo[0] <= x <= self.hi[0] and self.lo[1] <= y <= self.hi[1]

    @property
    def center(self) -> tuple[float, float]:
        return ((self.lo[0] + self.hi[0]) / 2, (self.lo[1] + self.hi[1]) / 2)


@dataclass(frozen=True)
class Thing:
    name: str
    x: float
    y: float
    z: float
    size: tuple[float, float, float]
    also: Optional[str] = None
    """A second, weaker hypothesis the detector sometimes gives ("cup" for a mug)."""


ROOMS = (  # the hallway first: door thresholds on shared walls count as hallway
    Room("hallway", (6.0, 0.0), (8.0, 16.0)),
    Room("kitchen", (0.0, 0.0), (6.0, 6.0)),
    Room("living room", (8.0, 0.0), (16.0, 7.0)),
    Room("office", (8.0, 9.0), (14.0, 16.0)),
)

THINGS = (
    Thing("red mug", 1.0, 4.6, 0.9, (0.09, 0.09, 0.1), also="cup"),
    Thing("coffee machine", 0.6, 1.2, 0.95, (0.3, 0.4, 0.45)),
    Thing("fridge", 4.8, 5.5, 0.9, (0.7, 0.7, 1.8)),
    Thing("sofa", 13.5, 6.2, 0.45, (2.2, 0.9, 0.8), also="couch"),
    Thing("television", 15.4, 2.0, 1.0, (0.1, 1.2, 0.7)),
    Thing("potted plant", 9.0, 6.3, 0.5, (0.5, 0.5, 1.0)),
    Thing("laptop", 12.6, 14.8, 0.78, (0.35, 0.25, 0.03)),
    Thing("blue mug", 13.2, 14.4, 0.8, (0.09, 0.09, 0.1), also="cup"),
    Thing("bookshelf", 9.0, 15.4, 1.0, (1.2, 0.4, 2.0)),
    Thing("coat rack", 6.5, 15.4, 1.0, (0.5, 0.5, 1.8)),
    Thing("fire extinguisher", 7.7, 8.0, 0.3, (0.2, 0.2, 0.6)),
    Thing("chair", 3.4, 5.3, 0.45, (0.5, 0.5, 0.9)),  # one class, two rooms: both must be found
    Thing("chair", 12.4, 10.0, 0.45, (0.5, 0.5, 0.9)),
)

LOOK = True
LAP: tuple[tuple[float, float, bool], ...] = (
    (7.0, 2.0, False),
    (6.8, 3.0, False), (4.5, 3.0, LOOK), (2.2, 2.0, LOOK), (2.0, 4.2, LOOK), (4.5, 3.0, False), (6.8, 3.0, False),
    (7.2, 3.5, False), (9.5, 3.5, False), (11.5, 3.0, LOOK), (13.5, 4.5, LOOK), (9.5, 3.5, False),
    (7.2, 3.5, False),
    (7.0, 8.0, LOOK), (7.0, 12.5, False), (9.5, 12.5, False), (11.0, 12.0, LOOK), (11.5, 14.0, LOOK),
    (9.5, 12.5, False), (7.0, 12.5, False),
    (7.0, 14.8, LOOK), (7.0, 2.0, False),
)

ROOM_WORDS = {"kitchen": "a kitchen", "hallway": "a hallway", "living room": "a living room", "office": "an office"}


def room_of(x: float, y: float) -> str:
    for room in ROOMS:
        if room.contains(x, y):
            return room.name
    raise AssertionError(f"({x:.2f}, {y:.2f}) is outside every room")


# ---------------------------------------------------------------------- the robot
@dataclass
class Pose:
    t: float
    x: float
    y: float
    yaw: float
    v: float
    w: float


def wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


def drive(laps: int = LAPS, *, pause_after: Optional[int] = None, pause: float = 0.0) -> list[Pose]:
    """The robot's pose every DT seconds: turn to the waypoint, drive, look around where told.

    ``pause_after``: after that many laps the robot stands still for ``pause`` seconds (a reboot).
    """
    x, y, yaw = LAP[0][0], LAP[0][1], math.pi / 2
    t = 0.0
    poses = [Pose(t, x, y, yaw, 0.0, 0.0)]

    def step(nx: float, ny: float, nyaw: float, v: float, w: float) -> None:
        nonlocal x, y, yaw, t
        t = round(t + DT, 6)
        x, y, yaw = nx, ny, wrap(nyaw)
        poses.append(Pose(t, x, y, yaw, v, w))

    route = [p for _ in range(laps) for p in LAP[1:]]
    for n, (tx, ty, look) in enumerate(route):
        if pause_after is not None and n == pause_after * (len(LAP) - 1):
            for _ in range(int(round(pause / DT))):
                step(x, y, yaw, 0.0, 0.0)
        heading = math.atan2(ty - y, tx - x)
        while abs(wrap(heading - yaw)) > TURN_RATE * DT:
            w = math.copysign(TURN_RATE, wrap(heading - yaw))
            step(x, y, yaw + w * DT, 0.0, w)
        yaw = heading
        while math.hypot(tx - x, ty - y) > SPEED * DT:
            step(x + SPEED * DT * math.cos(yaw), y + SPEED * DT * math.sin(yaw), yaw, SPEED, 0.0)
        x, y = tx, ty
        if look:
            turned = 0.0
            while turned < 2 * math.pi:
                step(x, y, yaw + LOOK_RATE * DT, 0.0, LOOK_RATE)
                turned += LOOK_RATE * DT
    return poses


def in_view(pose: Pose, thing: Thing, max_range: float) -> Optional[tuple[float, float]]:
    """(distance, bearing) when the camera sees ``thing``: same room, in the field of view, in range."""
    if room_of(pose.x, pose.y) != room_of(thing.x, thing.y):
        return None
    dx, dy = thing.x - pose.x, thing.y - pose.y
    distance = math.hypot(dx, dy)
    bearing = wrap(math.atan2(dy, dx) - pose.yaw)
    if distance > max_range or abs(bearing) > CAMERA_FOV or distance < 0.2:
        return None
    return distance, bearing


def pose_at(poses: list[Pose], t: float) -> Pose:
    """The robot's pose at time t (between two steps: the motion is linear, the turn at a constant rate)."""
    i = min(int(t / DT), len(poses) - 2)
    a, b = poses[i], poses[i + 1]
    w = (t - a.t) / (b.t - a.t)
    return Pose(t, a.x + w * (b.x - a.x), a.y + w * (b.y - a.y), wrap(a.yaw + w * wrap(b.yaw - a.yaw)), a.v, a.w)


def camera_pose(p: Pose, camera: Camera = CAMERA) -> tuple[float, float, float]:
    """(x, y, yaw) of the camera in the map."""
    c, s_ = math.cos(p.yaw), math.sin(p.yaw)
    return p.x + c * camera.x - s_ * camera.y, p.y + s_ * camera.x + c * camera.y, wrap(p.yaw + camera.yaw)


def project(p: Pose, thing: Thing, camera: Camera = CAMERA) -> Optional[tuple[float, float, float, float, float]]:
    """(left, right, top, bottom, distance) of the thing's projected box (pixels), or None when not seen.

    Seen: its centre within the field of view, 0.3-6 m away, in the robot's
    room. The box is the projection of the thing's bounding box (its eight
    corners), not yet clipped to the image.
    """
    if room_of(p.x, p.y) != room_of(thing.x, thing.y):
        return None
    cam_x, cam_y, cam_yaw = camera_pose(p, camera)
    dx, dy = thing.x - cam_x, thing.y - cam_y
    distance = math.hypot(dx, dy)
    if not 0.3 <= distance <= RANGE_2D or abs(wrap(math.atan2(dy, dx) - cam_yaw)) > camera.half_fov:
        return None
    us, vs = [], []
    for sx in (-0.5, 0.5):
        for sy in (-0.5, 0.5):
            cx, cy = thing.x + sx * thing.size[0] - cam_x, thing.y + sy * thing.size[1] - cam_y
            forward = cx * math.cos(cam_yaw) + cy * math.sin(cam_yaw)
            left = -cx * math.sin(cam_yaw) + cy * math.cos(cam_yaw)
            forward = max(forward, 0.05)  # a corner beside the camera projects far off the image
            us.append(camera.cx - camera.fx * left / forward)
            for sz in (-0.5, 0.5):
                vs.append(camera.cy - camera.fy * (thing.z + sz * thing.size[2] - camera.z) / forward)
    return min(us), max(us), min(vs), max(vs), distance


def detected_box(box: tuple[float, float, float, float, float], rng: random.Random, camera: Camera = CAMERA
                 ) -> Optional[tuple[float, float, float, float]]:
    """(u, v, width, height) a detector reports for a projected box: centre and size off by a few pixels,
    sometimes placed at a random column, then clipped to the image as detectors do."""
    left, right, top, bottom, _ = box
    u, v = (left + right) / 2 + rng.gauss(0.0, PIXEL_NOISE), (top + bottom) / 2 + rng.gauss(0.0, PIXEL_NOISE)
    w, h = max(2.0, right - left + rng.gauss(0.0, PIXEL_NOISE)), max(2.0, bottom - top + rng.gauss(0.0, PIXEL_NOISE))
    if rng.random() < WRONG_BOX:
        u = rng.uniform(0.0, camera.width)
    left, right = max(u - w / 2, 0.0), min(u + w / 2, float(camera.width))
    top, bottom = max(v - h / 2, 0.0), min(v + h / 2, float(camera.height))
    if right - left < 2.0 or bottom - top < 2.0:
        return None
    return (left + right) / 2, (top + bottom) / 2, right - left, bottom - top


# ---------------------------------------------------------------------- messages
@dataclass
class Topic:
    name: str
    msgtype: str
    messages: list[tuple[int, Any]] = field(default_factory=list)
    """(bag time in ns, message object)."""


class Messages:
    """Builds rosbags message objects from a typestore (attribute names as in ROS 2)."""

    def __init__(self, store: Any) -> None:
        self.T = store.types

    def time(self, t: float) -> Any:
        ns = START_NS + int(round(t * 1e9))
        return self.T["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)

    def header(self, t: float, frame: str) -> Any:
        return self.T["std_msgs/msg/Header"](stamp=self.time(t), frame_id=frame)

    def vec3(self, x: float = 0.0, y: float = 0.0, z: float = 0.0) -> Any:
        return self.T["geometry_msgs/msg/Vector3"](x=x, y=y, z=z)

    def pose(self, x: float, y: float, z: float, yaw: float = 0.0) -> Any:
        T = self.T
        return T["geometry_msgs/msg/Pose"](
            position=T["geometry_msgs/msg/Point"](x=x, y=y, z=z),
            orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2)))

    def pose_cov(self, x: float, y: float, z: float, yaw: float = 0.0, sigma: float = 0.0) -> Any:
        covariance = np.zeros(36, dtype=np.float64)
        covariance[0] = covariance[7] = covariance[14] = sigma * sigma
        return self.T["geometry_msgs/msg/PoseWithCovariance"](pose=self.pose(x, y, z, yaw), covariance=covariance)

    def odometry(self, p: Pose) -> Any:
        """An Odometry message of pose ``p`` (frame ``odom``, child ``base_link``), its twist ``p.v``, ``p.w``."""
        T = self.T
        twist = T["geometry_msgs/msg/Twist"](linear=self.vec3(p.v), angular=self.vec3(z=p.w))
        return T["nav_msgs/msg/Odometry"](
            header=self.header(p.t, FRAME), child_frame_id="base_link", pose=self.pose_cov(p.x, p.y, 0.0, p.yaw),
            twist=T["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)))

    def hypothesis(self, class_id: str, score: float, at: Optional[tuple[float, float, float]] = None,
                   sigma: float = 0.05) -> Any:
        T = self.T
        pose = self.pose_cov(*at, sigma=sigma) if at is not None else self.pose_cov(0.0, 0.0, 0.0)
        return T["vision_msgs/msg/ObjectHypothesisWithPose"](
            hypothesis=T["vision_msgs/msg/ObjectHypothesis"](class_id=class_id, score=round(score, 3)), pose=pose)

    def detection2d(self, t: float, hypotheses: list[Any], u: float, v: float, w: float, h: float,
                    track: str, frame: str = "camera") -> Any:
        T = self.T
        center = T["vision_msgs/msg/Pose2D"](position=T["vision_msgs/msg/Point2D"](x=u, y=v), theta=0.0)
        bbox = T["vision_msgs/msg/BoundingBox2D"](center=center, size_x=w, size_y=h)
        return T["vision_msgs/msg/Detection2D"](header=self.header(t, frame), results=hypotheses, bbox=bbox,
                                                id=track)

    def detection3d(self, t: float, hypotheses: list[Any], at: tuple[float, float, float],
                    size: tuple[float, float, float], track: str, frame: str = FRAME,
                    orientation: Optional[tuple[float, float, float, float]] = None) -> Any:
        """A 3-D box centred at ``at`` in ``frame``; ``orientation`` (x, y, z, w) of the box, else a yaw of 0."""
        T = self.T
        center = self.pose(*at)
        if orientation is not None:
            qx, qy, qz, qw = orientation
            center = T["geometry_msgs/msg/Pose"](position=center.position,
                                                 orientation=T["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw))
        bbox = T["vision_msgs/msg/BoundingBox3D"](center=center, size=self.vec3(*size))
        return T["vision_msgs/msg/Detection3D"](header=self.header(t, frame), results=hypotheses, bbox=bbox,
                                                id=track)

    def camera_info(self, t: float, camera: Camera = CAMERA, frame: str = "camera") -> Any:
        T = self.T
        k = np.array([camera.fx, 0.0, camera.cx, 0.0, camera.fy, camera.cy, 0.0, 0.0, 1.0])
        p = np.array([camera.fx, 0.0, camera.cx, 0.0, 0.0, camera.fy, camera.cy, 0.0, 0.0, 0.0, 1.0, 0.0])
        roi = T["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
        return T["sensor_msgs/msg/CameraInfo"](
            header=self.header(t, frame), height=camera.height, width=camera.width, distortion_model="plumb_bob",
            d=np.zeros(5), k=k, r=np.array([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]), p=p,
            binning_x=0, binning_y=0, roi=roi)

    def battery(self, t: float, fraction: float) -> Any:
        empty = np.zeros(0, dtype=np.float32)
        return self.T["sensor_msgs/msg/BatteryState"](
            header=self.header(t, "base_link"), voltage=round(10.5 + 2.0 * fraction, 3), temperature=31.0,
            current=-1.8, charge=math.nan, capacity=math.nan, design_capacity=5.2, percentage=fraction,
            power_supply_status=2, power_supply_health=1, power_supply_technology=2, present=True,
            cell_voltage=empty, cell_temperature=empty, location="base", serial_number="BAT-0042")

    def diagnostics(self, t: float, statuses: list[tuple[int, str, str, str, dict[str, str]]]) -> Any:
        T = self.T
        items = [T["diagnostic_msgs/msg/DiagnosticStatus"](
            level=level, name=name, message=message, hardware_id=hardware,
            values=[T["diagnostic_msgs/msg/KeyValue"](key=k, value=v) for k, v in values.items()])
            for level, name, message, hardware, values in statuses]
        return T["diagnostic_msgs/msg/DiagnosticArray"](header=self.header(t, ""), status=items)


# ---------------------------------------------------------------------- the recording
def ns(t: float, latency: float = 0.0) -> int:
    """Bag time in integer nanoseconds (no float rounding on epoch-sized numbers)."""
    return START_NS + int(round((t + latency) * 1e9))


def record(seed: int = SEED, laps: int = LAPS, *, depth: bool = True, body: bool = True
           ) -> tuple[list[Topic], dict[str, Any]]:
    """Every message of the patrol, and what really happened.

    ``depth``: with the 3-D detector; ``body``: with battery, CPU temperature,
    diagnostics and the (ignored) velocity commands. Each sensor draws from its
    own random stream, so one sensor's changes leave the others' messages alone.
    """
    rng_2d, rng_3d = random.Random(seed), random.Random(seed + 1)
    store = load_typestore("humble", own_msgs=False)
    m = Messages(store)
    poses = drive(laps)
    kinds = [("/odom", "nav_msgs/msg/Odometry"), ("/camera/camera_info", "sensor_msgs/msg/CameraInfo"),
             ("/detections", "vision_msgs/msg/Detection2DArray")]
    if depth:
        kinds.append(("/detections_3d", "vision_msgs/msg/Detection3DArray"))
    kinds.append(("/scene", "std_msgs/msg/String"))
    if body:
        kinds += [("/battery", "sensor_msgs/msg/BatteryState"), ("/cpu_temp", "sensor_msgs/msg/Temperature"),
                  ("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray"), ("/cmd_vel", "geometry_msgs/msg/Twist")]
    topics = {name: Topic(name, kind) for name, kind in kinds}
    seen_at: list[tuple[float, int, tuple[float, float]]] = []  # (t, thing, camera xy) of every 2-D detection
    seen_3d = [0] * len(THINGS)
    battery_below: dict[str, float] = {}
    tracks = [f"trk-{i + 1}" for i in range(len(THINGS))]

    for i, p in enumerate(poses):
        topics["/odom"].messages.append((ns(p.t, 0.002), m.odometry(p)))
        if i % 10 == 0:  # 1 Hz
            topics["/camera/camera_info"].messages.append((ns(p.t + CAMERA_PHASE, 0.005),
                                                          m.camera_info(p.t + CAMERA_PHASE)))
        if i % CAMERA_PERIOD == 0 and i + 1 < len(poses):  # 2 Hz, half-way to the next odometry message
            t = p.t + CAMERA_PHASE
            at = pose_at(poses, t)
            if body:
                topics["/cmd_vel"].messages.append((ns(p.t, 0.001), store.types["geometry_msgs/msg/Twist"](
                    linear=m.vec3(p.v), angular=m.vec3(z=p.w))))
            detections, seen = frame_detections(m, at, rng_2d, tracks)
            seen_at.extend((t, k, where) for k, where in seen)
            # A real detector publishes every frame, objects or not: empty arrays included.
            topics["/detections"].messages.append((ns(t, 0.06), store.types["vision_msgs/msg/Detection2DArray"](
                header=m.header(t, "camera"), detections=detections)))
        if i % 10 == 0:  # 1 Hz
            if depth:
                detections = []
                for k, thing in enumerate(THINGS):
                    view = in_view(p, thing, RANGE_3D)
                    if view is None:
                        continue
                    found = (thing.x + rng_3d.gauss(0.0, 0.04), thing.y + rng_3d.gauss(0.0, 0.04), thing.z)
                    found = (round(found[0], 3), round(found[1], 3), found[2])
                    seen_3d[k] += 1
                    score = min(0.99, 0.93 - 0.04 * view[0])
                    detections.append(m.detection3d(p.t, [m.hypothesis(thing.name, score, found)], found,
                                                    thing.size, tracks[k]))
                if detections:  # the 3-D detector only publishes when it found something
                    topics["/detections_3d"].messages.append((ns(p.t, 0.12), store.types[
                        "vision_msgs/msg/Detection3DArray"](header=m.header(p.t, FRAME), detections=detections)))
            if body:
                body_messages(m, topics, p.t, battery_below)
        if i % 50 == 0:  # every 5 s
            topics["/scene"].messages.append((ns(p.t, 0.3), store.types["std_msgs/msg/String"](
                data=caption(p))))

    truth = ground_truth(poses, seen_at, seen_3d if depth else None, battery_below if body else None, seed, laps)
    return list(topics.values()), truth


def frame_detections(m: Messages, at: Pose, rng: random.Random, tracks: list[str], frame: str = "camera"
                     ) -> tuple[list[Any], list[tuple[int, tuple[float, float]]]]:
    """The 2-D detections of one camera frame taken at pose ``at`` (its stamp), and (thing, camera xy) of each."""
    detections, seen = [], []
    for k, thing in enumerate(THINGS):
        box = project(at, thing)
        if box is None or rng.random() < MISSED:
            continue
        distance = box[4]
        score = min(0.99, max(0.35, 0.97 - 0.06 * distance + rng.gauss(0.0, 0.03)))
        hypotheses = [m.hypothesis(thing.name, score)]
        if thing.also and rng.random() < 0.5:
            hypotheses.append(m.hypothesis(thing.also, score * 0.4))
        reported = detected_box(box, rng)
        if reported is None:
            continue
        u, v, w, h = reported
        detections.append(m.detection2d(at.t, hypotheses, round(u, 1), round(v, 1), round(w, 1), round(h, 1),
                                        tracks[k], frame))
        cam_x, cam_y, _ = camera_pose(at)
        seen.append((k, (cam_x, cam_y)))
    return detections, seen


def body_messages(m: Messages, topics: dict[str, Topic], t: float, battery_below: dict[str, float]) -> None:
    """The body's 1 Hz messages at time t: battery, CPU temperature, diagnostics (noting battery levels crossed)."""
    fraction = round(BATTERY_START - BATTERY_DRAIN * t, 4)
    topics["/battery"].messages.append((ns(t, 0.01), m.battery(t, fraction)))
    for level in BATTERY_LEVELS:
        if fraction < level and f"{level:.2f}" not in battery_below:
            battery_below[f"{level:.2f}"] = round(START + t, 3)
    celsius = 41.0 + 7.0 * (1 - math.exp(-t / 240.0)) + 1.5 * math.sin(t / 40.0)
    topics["/cpu_temp"].messages.append((ns(t, 0.01), m.T["sensor_msgs/msg/Temperature"](
        header=m.header(t, "cpu"), temperature=round(celsius, 2), variance=0.0)))
    warn = WARN_WINDOW[0] <= t < WARN_WINDOW[1]
    motor_temp = 68.0 if warn else 44.0
    topics["/diagnostics"].messages.append((ns(t, 0.02), m.diagnostics(t, [
        (1 if warn else 0, "motor_left", "temperature high" if warn else "ok", "mc-1",
         {"temperature": f"{motor_temp:.1f}"}),
        (0, "lidar", "ok", "lidar-0", {"frequency": "10.0"}),
    ])))


def caption(p: Pose) -> str:
    """What a captioner might say: the room and what is in view."""
    room = room_of(p.x, p.y)
    visible = [t.name for t in THINGS if in_view(p, t, RANGE_2D) is not None]
    if not visible:
        return f"{ROOM_WORDS[room]}, nothing of note in view"
    names = [f"a {n}" for n in visible]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"{ROOM_WORDS[room]} with {listed}"


def ground_truth(poses: list[Pose], seen_at: list[tuple[float, int, tuple[float, float]]],
                 seen_3d: Optional[list[int]], battery_below: Optional[dict[str, float]], seed: int,
                 laps: int) -> dict[str, Any]:
    visits: list[dict[str, Any]] = []
    for p in poses:
        room = room_of(p.x, p.y)
        stamp = round(START + p.t, 3)
        if visits and visits[-1]["room"] == room:
            visits[-1]["end"] = stamp
        else:
            visits.append({"room": room, "start": stamp, "end": stamp})
    for visit in visits:
        visit["objects"] = sorted({THINGS[k].name for t, k, _ in seen_at
                                   if visit["start"] <= START + t <= visit["end"]})
    objects = []
    for k, thing in enumerate(THINGS):
        mine = [where for _, j, where in seen_at if j == k]
        entry: dict[str, Any] = {
            "name": thing.name, "room": room_of(thing.x, thing.y), "position": [thing.x, thing.y, thing.z],
            "size": list(thing.size), "detections_2d": len(mine),
            "poses_2d": len({(math.floor(x / POSE_CELL), math.floor(y / POSE_CELL)) for x, y in mine}),
        }
        if seen_3d is not None:
            entry["detections_3d"] = seen_3d[k]
        objects.append(entry)
    truth: dict[str, Any] = {
        "description": "Ground truth of a bundled bag (rosbags/generate.py); times are bag time, epoch seconds.",
        "seed": seed,
        "laps": laps,
        "frame_id": FRAME,
        "start": START,
        "end": round(START + poses[-1].t, 3),
        "camera": {"topic": "/camera/camera_info", "width": CAMERA.width, "height": CAMERA.height,
                   "fx": CAMERA.fx, "fy": CAMERA.fy, "cx": CAMERA.cx, "cy": CAMERA.cy,
                   "mounting": {"x": CAMERA.x, "y": CAMERA.y, "z": CAMERA.z, "yaw": CAMERA.yaw},
                   "pixel_noise": PIXEL_NOISE, "wrong_box": WRONG_BOX, "missed": MISSED, "range": RANGE_2D},
        "rooms": {r.name: {"min": list(r.lo), "max": list(r.hi), "center": list(r.center)} for r in ROOMS},
        "objects": objects,
        "visits": visits,
    }
    if battery_below is not None:
        truth["battery_start"] = BATTERY_START
        truth["battery_below"] = battery_below
        truth["motor_warning"] = {"start": START + WARN_WINDOW[0], "end": START + WARN_WINDOW[1]}
    return truth


POSE_CELL = 0.5
"""Metres: detections from camera positions in one cell of this size count as one pose (``poses_2d``)."""


# ---------------------------------------------------------------------- writing
def write_bag(path: Path, topics: list[Topic], storage: StoragePlugin, qos: Optional[dict[str, list[Qos]]] = None
              ) -> None:
    """One rosbag2 directory; messages interleaved in bag-time order, as a recorder writes them.

    ``qos``: the offered QoS profiles a recorder saw for some topics (``/tf_static``: transient local).
    """
    offered = qos or {}
    store = load_typestore("humble", own_msgs=False)
    writer = Writer(path, version=8, storage_plugin=storage)
    if storage == StoragePlugin.MCAP:
        writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    else:
        writer.set_compression(CompressionMode.MESSAGE, CompressionFormat.ZSTD)
    with writer:
        connections = {topic.name: writer.add_connection(topic.name, topic.msgtype, typestore=store,
                                                         offered_qos_profiles=offered.get(topic.name, ()))
                       for topic in topics}
        stream = sorted(((stamp, topic.name, k) for topic in topics for k, (stamp, _) in enumerate(topic.messages)))
        by_name = {topic.name: topic for topic in topics}
        for stamp, name, k in stream:
            topic = by_name[name]
            writer.write(connections[name], stamp, store.serialize_cdr(topic.messages[k][1], topic.msgtype))


CAMERA_ONLY_LAPS = 2


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="folder for the bags and their ground truth (default: beside this script)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--laps", type=int, default=LAPS)
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    topics, truth = record(args.seed, args.laps)
    for name, storage in (("patrol_db3", StoragePlugin.SQLITE3), ("patrol_mcap", StoragePlugin.MCAP)):
        _write_fresh(out / name, topics, storage)
    (out / "ground_truth.json").write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")
    print(_said(out, "patrol_db3, patrol_mcap and ground_truth.json", topics, truth))
    topics, truth = record(args.seed + 7, CAMERA_ONLY_LAPS, depth=False, body=False)
    _write_fresh(out / "camera_only_mcap", topics, StoragePlugin.MCAP)
    (out / "ground_truth_camera_only.json").write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")
    print(_said(out, "camera_only_mcap and ground_truth_camera_only.json", topics, truth))
    from generate_tf import dumps, offered_qos, record_tf  # imports this file as `generate`: the same world

    topics, truth = record_tf(args.seed)
    _write_fresh(out / "patrol_tf_mcap", topics, StoragePlugin.MCAP, offered_qos())
    (out / "ground_truth_tf.json").write_text(dumps(truth), encoding="utf-8")
    print(_said(out, "patrol_tf_mcap and ground_truth_tf.json", topics, truth))
    return 0


def _write_fresh(target: Path, topics: list[Topic], storage: StoragePlugin,
                 qos: Optional[dict[str, list[Qos]]] = None) -> None:
    if target.exists():
        shutil.rmtree(target)
    write_bag(target, topics, storage, qos)


def _said(out: Path, what: str, topics: list[Topic], truth: dict[str, Any]) -> str:
    counts = ", ".join(f"{t.name} {len(t.messages)}" for t in topics)
    minutes = (truth["end"] - truth["start"]) / 60
    return f"wrote {out}/{what}: {minutes:.1f} min; {counts}"


if __name__ == "__main__":
    sys.exit(main())
