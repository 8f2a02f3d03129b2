"""The TF patrol bag (rosbags/patrol_tf_mcap) is what rosbags/README.md says it is.

Read with the rosbags library; every transform is composed here with numpy
(quaternions, linear interpolation of translations, slerp of rotations, no
extrapolation, no interpolation across a gap), independently of the memory's
own TF code. Checked against ``rosbags/ground_truth_tf.json`` (in ``map``):
``map -> odom -> base_link`` gives the true trajectory within the
localization noise before and after the reboot; the odometry alone drifts by
metres; after the reboot the odometry restarts at the origin while
``map -> odom`` jumps; 3-D detections published in ``camera_optical_frame``
land on their objects through the whole chain, 2-D detections project onto
theirs; ``/tf_static`` is offered transient local, so ``ros2 bag play``
republishes it latched.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pytest

pytest.importorskip("rosbags")

from rosbags.interfaces import QosDurability, QosReliability
from rosbags.rosbag2 import Reader

from emem_ros.replay.typestore import load_typestore
from test.support.bags import BAGS

BAG = BAGS / "patrol_tf_mcap"
TRUTH = json.loads((BAGS / "ground_truth_tf.json").read_text(encoding="utf-8"))
REBOOT = TRUTH["reboots"][0]
MAX_GAP = 1.0
"""Seconds: no interpolation across a longer silence (the reboot)."""


# ---------------------------------------------------------------------- transform maths (numpy only)
def rotation(q: np.ndarray) -> np.ndarray:
    x, y, z, w = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def matrix(t: np.ndarray, q: np.ndarray) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = rotation(q)
    out[:3, 3] = t
    return out


def slerp(a: np.ndarray, b: np.ndarray, w: float) -> np.ndarray:
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    dot = float(np.dot(a, b))
    if dot < 0.0:
        b, dot = -b, -dot
    if dot > 0.9995:
        out = a + w * (b - a)
        return out / np.linalg.norm(out)
    theta = math.acos(dot)
    return (math.sin((1 - w) * theta) * a + math.sin(w * theta) * b) / math.sin(theta)


def yaw_of(m: np.ndarray) -> float:
    return math.atan2(m[1, 0], m[0, 0])


def wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


@dataclass
class History:
    """One parent -> child transform over time (as a TF buffer keeps it)."""

    stamps: list[float] = field(default_factory=list)
    translations: list[np.ndarray] = field(default_factory=list)
    rotations: list[np.ndarray] = field(default_factory=list)

    def at(self, t: float) -> Optional[np.ndarray]:
        """The transform at t, interpolated between its neighbours; None outside them or across a gap."""
        i = bisect.bisect_left(self.stamps, t)
        if i < len(self.stamps) and self.stamps[i] == t:
            return matrix(self.translations[i], self.rotations[i])
        if i == 0 or i == len(self.stamps):
            return None
        a, b = self.stamps[i - 1], self.stamps[i]
        if b - a > MAX_GAP:
            return None
        w = (t - a) / (b - a)
        return matrix((1 - w) * self.translations[i - 1] + w * self.translations[i],
                      slerp(self.rotations[i - 1], self.rotations[i], w))


@dataclass
class Recording:
    dynamic: dict[tuple[str, str], History]
    static: dict[tuple[str, str], np.ndarray]
    messages: dict[str, list[tuple[int, Any]]]
    """topic -> [(bag time ns, message)]."""
    connections: dict[str, Any]
    first_topic: str

    def chain(self, t: float, frames: list[str]) -> Optional[np.ndarray]:
        """frames[0] <- frames[-1] at t, each link from /tf (interpolated) or /tf_static."""
        out = np.eye(4)
        for parent, child in zip(frames, frames[1:]):
            link = self.static.get((parent, child))
            if link is None:
                link = self.dynamic[(parent, child)].at(t)
            if link is None:
                return None
            out = out @ link
        return out


def stamp(header: Any) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


def vec(v: Any) -> np.ndarray:
    return np.array([v.x, v.y, v.z])


def quat(q: Any) -> np.ndarray:
    return np.array([q.x, q.y, q.z, q.w])


READ = ("/tf_static", "/tf", "/odom", "/detections", "/detections_3d", "/camera/camera_info", "/battery")


@pytest.fixture(scope="module")
def bag() -> Recording:
    store = load_typestore("humble", own_msgs=False)
    dynamic: dict[tuple[str, str], History] = {}
    static: dict[tuple[str, str], np.ndarray] = {}
    messages: dict[str, list[tuple[int, Any]]] = {}
    with Reader(BAG) as reader:
        connections = {c.topic: c for c in reader.connections}
        first = next(iter(reader.messages()))[0].topic
        wanted = [c for c in reader.connections if c.topic in READ]
        for connection, bag_ns, raw in reader.messages(connections=wanted):
            msg = store.deserialize_cdr(raw, connection.msgtype)
            if connection.topic in ("/tf", "/tf_static"):
                for tf in msg.transforms:
                    key = (tf.header.frame_id, tf.child_frame_id)
                    if connection.topic == "/tf_static":
                        static[key] = matrix(vec(tf.transform.translation), quat(tf.transform.rotation))
                        continue
                    history = dynamic.setdefault(key, History())
                    assert not history.stamps or stamp(tf.header) > history.stamps[-1], f"{key} not in time order"
                    history.stamps.append(stamp(tf.header))
                    history.translations.append(vec(tf.transform.translation))
                    history.rotations.append(quat(tf.transform.rotation))
            messages.setdefault(connection.topic, []).append((bag_ns, msg))
    return Recording(dynamic, static, messages, connections, first)


def in_reboot(t: float, margin: float = 0.0) -> bool:
    return REBOOT["last_before"] - margin < t < REBOOT["first_after"] + margin


def truth_at(t: float) -> np.ndarray:
    """(x, y, yaw) of the robot in map at t, from the 2 Hz ground truth (linear between samples)."""
    rows = TRUTH["trajectory"]
    stamps = [r[0] for r in rows]
    i = min(max(bisect.bisect_left(stamps, t), 1), len(rows) - 1)
    a, b = rows[i - 1], rows[i]
    w = (t - a[0]) / (b[0] - a[0])
    return np.array([a[1] + w * (b[1] - a[1]), a[2] + w * (b[2] - a[2]), a[3] + w * wrap(b[3] - a[3])])


# ---------------------------------------------------------------------- the tree
def test_tf_static_is_latched_and_mounts_the_camera(bag: Recording) -> None:
    qos = bag.connections["/tf_static"].ext.offered_qos_profiles
    assert qos and all(p.durability == QosDurability.TRANSIENT_LOCAL for p in qos)
    assert all(p.reliability == QosReliability.RELIABLE for p in qos)
    assert all(p.durability == QosDurability.VOLATILE for p in bag.connections["/tf"].ext.offered_qos_profiles)
    assert bag.first_topic == "/tf_static", "the camera's mounting comes before anything that needs it"
    assert len(bag.messages["/tf_static"]) == 2, "once at boot, once after the reboot"

    mount = bag.static[("base_link", "camera_link")]
    assert np.allclose(mount[:3, 3], [0.2, 0.0, 0.9]) and np.allclose(mount[:3, :3], np.eye(3))
    optical = bag.static[("camera_link", "camera_optical_frame")][:3, :3]
    # REP 103: the optical frame's z looks forward (camera_link x), x to the right (-y), y down (-z).
    assert np.allclose(optical @ [0, 0, 1], [1, 0, 0])
    assert np.allclose(optical @ [1, 0, 0], [0, -1, 0])
    assert np.allclose(optical @ [0, 1, 0], [0, 0, -1])


def test_one_tree_map_odom_base_camera(bag: Recording) -> None:
    assert set(bag.dynamic) == {("map", "odom"), ("odom", "base_link")}
    assert set(bag.static) == {("base_link", "camera_link"), ("camera_link", "camera_optical_frame")}
    children = [child for _, child in list(bag.dynamic) + list(bag.static)]
    assert len(children) == len(set(children)), "one parent per frame"

    def rate(history: History) -> float:
        gaps = np.diff(history.stamps)
        return float(1.0 / np.median(gaps))

    assert 1.0 <= rate(bag.dynamic[("map", "odom")]) <= 10.0  # localization, the 1-10 Hz
    assert rate(bag.dynamic[("odom", "base_link")]) == pytest.approx(20.0, rel=0.01)
    odom = bag.messages["/odom"]
    assert {m.header.frame_id for _, m in odom} == {"odom"} and {m.child_frame_id for _, m in odom} == {"base_link"}
    assert len(odom) / (TRUTH["end"] - TRUTH["start"] - (REBOOT["first_after"] - REBOOT["last_before"])) \
        == pytest.approx(10.0, rel=0.02)


def test_map_odom_base_is_the_truth_before_and_after_the_reboot(bag: Recording) -> None:
    errors: dict[str, list[float]] = {"before": [], "after": []}
    yaw_errors: list[float] = []
    for t, x, y, yaw in TRUTH["trajectory"]:
        if in_reboot(t):
            continue
        pose = bag.chain(t, ["map", "odom", "base_link"])
        assert pose is not None, f"no map <- base_link at {t}"
        errors["before" if t <= REBOOT["last_before"] else "after"].append(math.hypot(pose[0, 3] - x, pose[1, 3] - y))
        yaw_errors.append(abs(wrap(yaw_of(pose) - yaw)))
    sigma = TRUTH["localization_noise"]
    for half, values in errors.items():
        assert len(values) > 400, half
        assert float(np.median(values)) < 1.5 * sigma["xy"] * math.sqrt(2), half  # ~2 cm per axis
        assert max(values) < 5 * sigma["xy"] * math.sqrt(2), half
    assert max(yaw_errors) < 5 * sigma["yaw"]
    assert bag.chain(REBOOT["last_before"] + 5.0, ["map", "odom", "base_link"]) is None, "silent during the reboot"


def test_the_odometry_alone_drifts_by_metres(bag: Recording) -> None:
    """Aligned with the truth where each boot began, the odometry is metres off by the end of the boot."""
    odom_tf = bag.dynamic[("odom", "base_link")]
    boots = [(TRUTH["start"], REBOOT["last_before"]), (REBOOT["first_after"], TRUTH["end"])]
    for begin, end in boots:
        start = truth_at(begin)
        aligned = matrix(np.array([start[0], start[1], 0.0]), np.array([0, 0, math.sin(start[2] / 2),
                                                                       math.cos(start[2] / 2)]))
        worst = 0.0
        for t, x, y, _ in TRUTH["trajectory"]:
            if end - 60.0 <= t <= end:
                odometry = odom_tf.at(t)
                assert odometry is not None
                guess = aligned @ odometry
                worst = max(worst, math.hypot(guess[0, 3] - x, guess[1, 3] - y))
        assert worst > 1.0, (begin, worst)
    # /odom and odom -> base_link carry the same estimate.
    for _, msg in bag.messages["/odom"][::50]:
        tf = odom_tf.at(stamp(msg.header))
        assert tf is not None
        assert np.allclose(tf[:3, 3], vec(msg.pose.pose.position), atol=1e-9)


def test_after_the_reboot_odometry_restarts_and_map_odom_jumps(bag: Recording) -> None:
    odom = [(stamp(m.header), m) for _, m in bag.messages["/odom"]]
    gaps = [(a[0], b[0]) for a, b in zip(odom, odom[1:]) if b[0] - a[0] > 1.0]
    assert gaps == [(pytest.approx(REBOOT["last_before"]), pytest.approx(REBOOT["first_after"]))]
    before = next(m for t, m in reversed(odom) if t <= REBOOT["last_before"])
    after = next(m for t, m in odom if t >= REBOOT["first_after"])
    assert math.hypot(before.pose.pose.position.x, before.pose.pose.position.y) > 1.0
    assert math.hypot(after.pose.pose.position.x, after.pose.pose.position.y) < 0.01
    assert abs(after.pose.pose.orientation.z) < 1e-6 and after.pose.pose.orientation.w == pytest.approx(1.0)

    map_odom = bag.dynamic[("map", "odom")]
    jump_from, jump_to = map_odom.at(REBOOT["last_before"]), map_odom.at(REBOOT["first_after"])
    assert jump_from is not None and jump_to is not None
    assert np.linalg.norm(jump_to[:3, 3] - jump_from[:3, 3]) > 1.0
    x, y, yaw = REBOOT["map_pose_at_restart"]
    assert math.hypot(jump_to[0, 3] - x, jump_to[1, 3] - y) < 0.1 and abs(wrap(yaw_of(jump_to) - yaw)) < 0.03
    # No sensor message falls into the silence.
    for topic in ("/detections", "/detections_3d", "/camera/camera_info", "/battery"):
        assert not any(in_reboot(stamp(m.header)) for _, m in bag.messages[topic]), topic


# ---------------------------------------------------------------------- sensors in the optical frame
OPTICAL_CHAIN = ["map", "odom", "base_link", "camera_link", "camera_optical_frame"]


def test_3d_detections_land_on_their_objects_through_the_whole_chain(bag: Recording) -> None:
    tf_stamps = set(bag.dynamic[("odom", "base_link")].stamps) | set(bag.dynamic[("map", "odom")].stamps)
    errors: dict[tuple[str, str], list[float]] = {}
    for _, array in bag.messages["/detections_3d"]:
        t = stamp(array.header)
        assert array.header.frame_id == "camera_optical_frame"
        assert t not in tf_stamps, "stamped between TF messages: a consumer must interpolate"
        to_map = bag.chain(t, OPTICAL_CHAIN)
        assert to_map is not None
        for detection in array.detections:
            assert detection.header.frame_id == "camera_optical_frame"
            centre = vec(detection.bbox.center.position)
            assert centre[2] > 0.0, "in front of the camera: z forward"
            where = (to_map @ np.append(centre, 1.0))[:3]
            name = detection.results[0].hypothesis.class_id
            error = min(float(np.linalg.norm(where - np.array(o["position"])))
                        for o in TRUTH["objects"] if o["name"] == name)
            errors.setdefault((name, "before" if t <= REBOOT["last_before"] else "after"), []).append(error)
    every = [e for values in errors.values() for e in values]
    assert len(every) == sum(o["detections_3d"] for o in TRUTH["objects"])
    assert float(np.median(every)) < 0.07 and float(np.percentile(every, 95)) < 0.1 and max(every) < 0.2
    for half in ("before", "after"):  # one place, seen before and after the reboot
        mug = errors[("red mug", half)]
        assert len(mug) >= 5 and float(np.median(mug)) < 0.1, (half, mug)


def test_2d_detections_project_onto_their_objects(bag: Recording) -> None:
    info = bag.messages["/camera/camera_info"][0][1]
    assert info.header.frame_id == "camera_optical_frame"
    fx, cx, fy, cy = info.k[0], info.k[2], info.k[4], info.k[5]
    mugs = {o["name"]: np.array(o["position"]) for o in TRUTH["objects"] if o["name"] in ("red mug", "blue mug")}
    pixel_errors: list[float] = []
    halves = set()
    for _, array in bag.messages["/detections"]:
        t = stamp(array.header)
        assert array.header.frame_id == "camera_optical_frame"
        for detection in array.detections:
            name = detection.results[0].hypothesis.class_id
            if name not in mugs:
                continue
            to_map = bag.chain(t, OPTICAL_CHAIN)
            assert to_map is not None
            x, y, z = (np.linalg.inv(to_map) @ np.append(mugs[name], 1.0))[:3]
            assert z > 0.0
            u, v = cx + fx * x / z, cy + fy * y / z  # the optical convention: x right, y down
            centre = detection.bbox.center.position
            pixel_errors.append(math.hypot(centre.x - u, centre.y - v))
            halves.add("before" if t <= REBOOT["last_before"] else "after")
    assert halves == {"before", "after"}
    assert len(pixel_errors) > 50 and float(np.median(pixel_errors)) < 10.0


def test_ground_truth_describes_the_bag(bag: Recording) -> None:
    assert TRUTH["frame_id"] == "map"
    assert TRUTH["frames"] == {"fixed": "map", "odom": "odom", "base": "base_link", "camera": "camera_link",
                               "optical": "camera_optical_frame"}
    stamps = [row[0] for row in TRUTH["trajectory"]]
    assert np.allclose(np.diff(stamps), 0.5) and stamps[0] == TRUTH["start"] and stamps[-1] == TRUTH["end"]
    assert 8 * 60 <= TRUTH["end"] - TRUTH["start"] <= 10 * 60
    last_tf = max(bag.dynamic[("map", "odom")].stamps)
    assert last_tf == pytest.approx(TRUTH["end"])
    mug = next(o for o in TRUTH["objects"] if o["name"] == "red mug")
    assert mug["detections_3d_before_reboot"] > 0 and mug["detections_3d_after_reboot"] > 0
    assert [d["position_error"] > 1.0 for d in TRUTH["odometry_drift"]] == [True, True]
