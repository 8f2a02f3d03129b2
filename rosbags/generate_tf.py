"""The TF patrol (``patrol_tf_mcap/`` + ``ground_truth_tf.json``), written by ``generate.py``.

The same robot in the same flat as the patrol bags, recorded as a real robot
publishes it (REP 105): the world is the frame ``map``; the robot's pose is on
``/tf`` as ``map -> odom`` (localization, 5 Hz, with a little noise) and
``odom -> base_link`` (odometry, 20 Hz, drifting: a heading bias of 0.01 rad
per metre driven and a scale error of 2 %); the camera sits on ``/tf_static``
(``base_link -> camera_link -> camera_optical_frame``, latched: transient
local). Half-way the robot reboots: everything is silent for 15 s, then the
odometry restarts at the origin and ``map -> odom`` jumps to absorb it. The
detectors publish in ``camera_optical_frame`` (z forward, x right, y down),
stamped between TF messages, so a consumer has to interpolate.

``record_tf`` returns the topics and the ground truth (in ``map``); the
writing is ``generate.write_bag``'s. Each noise source draws from its own
stream (the seed + 20 ... + 23), so the patrol bags' messages do not change.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any, Optional

import generate as g  # the world, the robot, the camera and the message helpers (this folder is on sys.path)
from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

from emem_ros.replay.typestore import load_typestore

MAP, ODOM, BASE, CAMERA_LINK, OPTICAL = "map", "odom", "base_link", "camera_link", "camera_optical_frame"
LAPS = 2
REBOOT_AFTER = 1
"""The reboot comes after this many laps (half-way), with the robot standing still."""
REBOOT_STANDSTILL = 16.0
"""Seconds the robot stands still around the reboot."""
REBOOT_SILENCE = 15.0
"""Seconds without any sensor or TF message."""
TICK = 0.05
"""odom -> base_link on /tf every tick (20 Hz); every 2nd tick /odom (10 Hz), every 4th map -> odom (5 Hz)."""
ODOM_EVERY, LOC_EVERY, CAMERA_EVERY, SLOW_EVERY, SCENE_EVERY, TRUTH_EVERY = 2, 4, 10, 20, 100, 10
CAMERA_PHASE = 0.03
"""Seconds after a tick that a camera frame is taken: between two TF messages (2-D detections, CameraInfo)."""
DEPTH_PHASE = 0.07
"""Seconds after a tick that the 3-D detector's frame is taken."""
HEADING_BIAS = 0.01
"""Odometry heading error, radians per metre driven."""
SCALE_ERROR = 0.02
"""Odometry distance error: 2 % too long."""
ODOM_SCALE_NOISE = 0.005
"""1 sigma of the per-step distance error on top of the bias (fraction of the step)."""
ODOM_HEADING_NOISE = 0.003
"""1 sigma of the heading random walk, radians per sqrt(metre)."""
LOC_SIGMA_XY = 0.02
LOC_SIGMA_YAW = math.radians(0.3)
DEPTH_SIGMA = 0.03
"""Metres (1 sigma, per axis of the optical frame) of a 3-D detection's noise."""
CAMERA_XYZ = (g.CAMERA.x, g.CAMERA.y, g.CAMERA.z)
OPTICAL_Q = (-0.5, 0.5, -0.5, 0.5)
"""camera_link -> camera_optical_frame (x, y, z, w): rpy(-pi/2, 0, -pi/2), REP 103's optical convention."""
INFINITE = QosTime(sec=9223372036, nsec=854775807)
"""How Humble's recorder writes an infinite QoS duration (RMW_DURATION_INFINITE)."""


def offered_qos() -> dict[str, list[Qos]]:
    """The profiles a Humble ``ros2 bag record`` stores: /tf_static transient local (latched), /tf volatile."""
    def profile(durability: QosDurability) -> Qos:
        return Qos(history=QosHistory.UNKNOWN, depth=0, reliability=QosReliability.RELIABLE, durability=durability,
                   deadline=INFINITE, lifespan=INFINITE, liveliness=QosLiveliness.AUTOMATIC,
                   liveliness_lease_duration=INFINITE, avoid_ros_namespace_conventions=False)
    return {"/tf_static": [profile(QosDurability.TRANSIENT_LOCAL)], "/tf": [profile(QosDurability.VOLATILE)]}


# ---------------------------------------------------------------------- planar poses (x, y, yaw)
Se2 = tuple[float, float, float]


def compose(a: Se2, b: Se2) -> Se2:
    c, s = math.cos(a[2]), math.sin(a[2])
    return a[0] + c * b[0] - s * b[1], a[1] + s * b[0] + c * b[1], g.wrap(a[2] + b[2])


def inverse(a: Se2) -> Se2:
    c, s = math.cos(a[2]), math.sin(a[2])
    return -c * a[0] - s * a[1], s * a[0] - c * a[1], g.wrap(-a[2])


def quat_mul(a: tuple[float, float, float, float], b: tuple[float, float, float, float]
             ) -> tuple[float, float, float, float]:
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz)


def in_optical(p: g.Pose, thing: g.Thing) -> Optional[tuple[float, float, float]]:
    """The thing's centre in camera_optical_frame (x right, y down, z forward) when the pose ``p`` sees it:
    in the robot's room, 0.3-4.5 m away, its centre inside the image."""
    if g.room_of(p.x, p.y) != g.room_of(thing.x, thing.y):
        return None
    cam_x, cam_y, cam_yaw = g.camera_pose(p)
    dx, dy, dz = thing.x - cam_x, thing.y - cam_y, thing.z - g.CAMERA.z
    forward = dx * math.cos(cam_yaw) + dy * math.sin(cam_yaw)
    left = -dx * math.sin(cam_yaw) + dy * math.cos(cam_yaw)
    x, y, z = -left, -dz, forward
    camera = g.CAMERA
    if not 0.3 <= math.hypot(dx, dy) <= g.RANGE_3D or z <= 0.0:
        return None
    if abs(x / z) > camera.cx / camera.fx or abs(y / z) > camera.cy / camera.fy:
        return None
    return x, y, z


# ---------------------------------------------------------------------- the recording
def reboot_ticks() -> tuple[int, int]:
    """(last tick before, first tick after) the silence: on the localization grid, while the robot stands still."""
    standstill = g.drive(REBOOT_AFTER)[-1].t  # the first lap is the same with or without the pause
    down = math.ceil((standstill + 0.4) / TICK / LOC_EVERY) * LOC_EVERY
    return down, down + int(round(REBOOT_SILENCE / TICK))


def record_tf(seed: int = g.SEED) -> tuple[list[g.Topic], dict[str, Any]]:
    """Every message of the TF patrol, and what really happened (in ``map``)."""
    rng_2d, rng_3d, rng_odom, rng_loc = (random.Random(seed + k) for k in (20, 21, 22, 23))
    store = load_typestore("humble", own_msgs=False)
    m = g.Messages(store)
    T = store.types
    poses = g.drive(LAPS, pause_after=REBOOT_AFTER, pause=REBOOT_STANDSTILL)
    down, up = reboot_ticks()
    last = int(poses[-1].t / TICK + 1e-6) // SLOW_EVERY * SLOW_EVERY  # on the 1 Hz grid: truth and TF end together
    segments = ((0, down), (up, last))
    kinds = [("/tf_static", "tf2_msgs/msg/TFMessage"), ("/tf", "tf2_msgs/msg/TFMessage"),
             ("/odom", "nav_msgs/msg/Odometry"), ("/camera/camera_info", "sensor_msgs/msg/CameraInfo"),
             ("/detections", "vision_msgs/msg/Detection2DArray"),
             ("/detections_3d", "vision_msgs/msg/Detection3DArray"), ("/scene", "std_msgs/msg/String"),
             ("/battery", "sensor_msgs/msg/BatteryState"), ("/cpu_temp", "sensor_msgs/msg/Temperature"),
             ("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray"), ("/cmd_vel", "geometry_msgs/msg/Twist")]
    topics = {name: g.Topic(name, kind) for name, kind in kinds}
    tracks = [f"trk-{i + 1}" for i in range(len(g.THINGS))]
    seen_at: list[tuple[float, int, tuple[float, float]]] = []
    seen_3d: list[tuple[float, int]] = []
    battery_below: dict[str, float] = {}
    drift: list[dict[str, Any]] = []

    def transform(t: float, parent: str, child: str, xyz: tuple[float, float, float],
                  q: tuple[float, float, float, float]) -> Any:
        return T["geometry_msgs/msg/TransformStamped"](
            header=m.header(t, parent), child_frame_id=child, transform=T["geometry_msgs/msg/Transform"](
                translation=m.vec3(*xyz), rotation=T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3])))

    def planar(t: float, parent: str, child: str, pose: Se2) -> Any:
        return T["tf2_msgs/msg/TFMessage"](transforms=[transform(
            t, parent, child, (pose[0], pose[1], 0.0), (0.0, 0.0, math.sin(pose[2] / 2), math.cos(pose[2] / 2)))])

    for a, b in segments:
        t_a, t_b = a * TICK, b * TICK
        # The robot (re)boots: the robot_state_publisher latches the camera's mounting.
        topics["/tf_static"].messages.append((g.ns(t_a), T["tf2_msgs/msg/TFMessage"](transforms=[
            transform(t_a, BASE, CAMERA_LINK, CAMERA_XYZ, (0.0, 0.0, 0.0, 1.0)),
            transform(t_a, CAMERA_LINK, OPTICAL, (0.0, 0.0, 0.0), OPTICAL_Q)])))
        odo: Se2 = (0.0, 0.0, 0.0)  # odometry starts at the origin at every boot
        start = g.pose_at(poses, t_a)
        previous: Se2 = (start.x, start.y, start.yaw)
        for k in range(a, b + 1):
            t = round(k * TICK, 6)
            p = g.pose_at(poses, t)
            true: Se2 = (p.x, p.y, p.yaw)
            dx, dy, dyaw = compose(inverse(previous), true)
            driven = math.hypot(dx, dy)
            scale = 1.0 + SCALE_ERROR + rng_odom.gauss(0.0, ODOM_SCALE_NOISE)
            turn = dyaw + HEADING_BIAS * driven + rng_odom.gauss(0.0, ODOM_HEADING_NOISE) * math.sqrt(driven)
            odo = compose(odo, (dx * scale, dy * scale, turn))
            previous = true
            topics["/tf"].messages.append((g.ns(t, 0.001), planar(t, ODOM, BASE, odo)))
            if k % ODOM_EVERY == 0:
                measured = g.Pose(t, odo[0], odo[1], odo[2], p.v * (1.0 + SCALE_ERROR), p.w + HEADING_BIAS * p.v)
                topics["/odom"].messages.append((g.ns(t, 0.002), m.odometry(measured)))
            if k % LOC_EVERY == 0:  # localization: where the robot is (within its noise), as a correction of odom
                seen: Se2 = (p.x + rng_loc.gauss(0.0, LOC_SIGMA_XY), p.y + rng_loc.gauss(0.0, LOC_SIGMA_XY),
                             p.yaw + rng_loc.gauss(0.0, LOC_SIGMA_YAW))
                topics["/tf"].messages.append((g.ns(t, 0.02), planar(t, MAP, ODOM, compose(seen, inverse(odo)))))
            if k % CAMERA_EVERY == 0:
                topics["/cmd_vel"].messages.append((g.ns(t, 0.001), T["geometry_msgs/msg/Twist"](
                    linear=m.vec3(p.v), angular=m.vec3(z=p.w))))
                tc = round(t + CAMERA_PHASE, 6)
                if tc <= t_b:
                    if k % SLOW_EVERY == 0:
                        topics["/camera/camera_info"].messages.append(
                            (g.ns(tc, 0.005), m.camera_info(tc, frame=OPTICAL)))
                    detections, found = g.frame_detections(m, g.pose_at(poses, tc), rng_2d, tracks, OPTICAL)
                    seen_at.extend((tc, j, where) for j, where in found)
                    topics["/detections"].messages.append((g.ns(tc, 0.06), T["vision_msgs/msg/Detection2DArray"](
                        header=m.header(tc, OPTICAL), detections=detections)))
            if k % SLOW_EVERY == 0:
                td = round(t + DEPTH_PHASE, 6)
                if td <= t_b:
                    boxes = depth_detections(m, g.pose_at(poses, td), rng_3d, tracks)
                    seen_3d.extend((td, j) for j, _ in boxes)
                    if boxes:  # the 3-D detector only publishes when it found something
                        topics["/detections_3d"].messages.append((g.ns(td, 0.12), T[
                            "vision_msgs/msg/Detection3DArray"](header=m.header(td, OPTICAL),
                                                                detections=[box for _, box in boxes])))
                g.body_messages(m, topics, t, battery_below)
            if k % SCENE_EVERY == 0:
                topics["/scene"].messages.append((g.ns(t, 0.3), T["std_msgs/msg/String"](data=g.caption(p))))
        # How far the odometry alone went astray in this boot (aligned with the truth where it started).
        aligned = compose((start.x, start.y, start.yaw), odo)
        drift.append({"start": round(g.START + t_a, 3), "end": round(g.START + t_b, 3),
                      "position_error": round(math.hypot(aligned[0] - previous[0], aligned[1] - previous[1]), 3),
                      "heading_error": round(g.wrap(aligned[2] - previous[2]), 4)})

    truth = tf_ground_truth(poses, seen_at, seen_3d, battery_below, seed, (down, up, last), drift)
    return list(topics.values()), truth


def depth_detections(m: g.Messages, at: g.Pose, rng: random.Random, tracks: list[str]) -> list[tuple[int, Any]]:
    """The 3-D detections of one depth frame at pose ``at``: (thing, Detection3D) in camera_optical_frame."""
    # The boxes are axis-aligned in map: their orientation in the optical frame is the inverse of the camera's.
    robot_q = (0.0, 0.0, math.sin(at.yaw / 2), math.cos(at.yaw / 2))
    ox, oy, oz, ow = quat_mul(robot_q, OPTICAL_Q)
    box_q = (-ox, -oy, -oz, ow)
    found = []
    for k, thing in enumerate(g.THINGS):
        centre = in_optical(at, thing)
        if centre is None:
            continue
        xyz = (round(centre[0] + rng.gauss(0.0, DEPTH_SIGMA), 3), round(centre[1] + rng.gauss(0.0, DEPTH_SIGMA), 3),
               round(centre[2] + rng.gauss(0.0, DEPTH_SIGMA), 3))
        score = min(0.99, 0.93 - 0.04 * centre[2])
        found.append((k, m.detection3d(at.t, [m.hypothesis(thing.name, score, xyz, sigma=DEPTH_SIGMA)], xyz,
                                       thing.size, tracks[k], OPTICAL, box_q)))
    return found


def tf_ground_truth(poses: list[g.Pose], seen_at: list[tuple[float, int, tuple[float, float]]],
                    seen_3d: list[tuple[float, int]], battery_below: dict[str, float], seed: int,
                    ticks: tuple[int, int, int], drift: list[dict[str, Any]]) -> dict[str, Any]:
    down, up, last = ticks
    counts_3d = [sum(1 for _, j in seen_3d if j == k) for k in range(len(g.THINGS))]
    truth = g.ground_truth(poses, seen_at, counts_3d, battery_below, seed, LAPS)
    truth["description"] = ("Ground truth of the TF patrol (rosbags/generate.py, generate_tf.py); times are bag "
                            "time, epoch seconds; positions in map.")
    truth["frame_id"] = MAP
    truth["end"] = round(g.START + last * TICK, 3)
    for k, entry in enumerate(truth["objects"]):
        for kind, stamps in (("detections_2d", [t for t, j, _ in seen_at if j == k]),
                             ("detections_3d", [t for t, j in seen_3d if j == k])):
            entry[kind + "_before_reboot"] = sum(1 for t in stamps if t <= down * TICK)
            entry[kind + "_after_reboot"] = sum(1 for t in stamps if t >= up * TICK)
    restart = g.pose_at(poses, up * TICK)
    truth["camera"].update({"frame_id": OPTICAL, "phase": CAMERA_PHASE, "depth_phase": DEPTH_PHASE,
                            "depth_sigma": DEPTH_SIGMA, "depth_range": g.RANGE_3D})
    truth["frames"] = {"fixed": MAP, "odom": ODOM, "base": BASE, "camera": CAMERA_LINK, "optical": OPTICAL}
    truth["static_transforms"] = [
        {"parent": BASE, "child": CAMERA_LINK, "translation": list(CAMERA_XYZ), "rotation_xyzw": [0.0, 0.0, 0.0, 1.0]},
        {"parent": CAMERA_LINK, "child": OPTICAL, "translation": [0.0, 0.0, 0.0], "rotation_xyzw": list(OPTICAL_Q)}]
    truth["rates"] = {"odom_to_base_tf": 1 / TICK, "odom": 1 / (TICK * ODOM_EVERY),
                      "map_to_odom_tf": 1 / (TICK * LOC_EVERY), "detections": 1 / (TICK * CAMERA_EVERY),
                      "detections_3d": 1 / (TICK * SLOW_EVERY), "trajectory": 1 / (TICK * TRUTH_EVERY)}
    truth["odometry_model"] = {"heading_bias_rad_per_m": HEADING_BIAS, "scale_error": SCALE_ERROR,
                               "scale_noise": ODOM_SCALE_NOISE, "heading_noise_rad_per_sqrt_m": ODOM_HEADING_NOISE}
    truth["localization_noise"] = {"xy": LOC_SIGMA_XY, "yaw": LOC_SIGMA_YAW}
    truth["reboots"] = [{"last_before": round(g.START + down * TICK, 3), "first_after": round(g.START + up * TICK, 3),
                         "map_pose_at_restart": [round(restart.x, 4), round(restart.y, 4), round(restart.yaw, 5)]}]
    truth["odometry_drift"] = drift
    truth["trajectory_columns"] = ["stamp", "x", "y", "yaw"]
    truth["trajectory"] = [[round(g.START + k * TICK, 3), round(p.x, 4), round(p.y, 4), round(p.yaw, 5)]
                           for k in range(0, last + 1, TRUTH_EVERY) for p in [g.pose_at(poses, round(k * TICK, 6))]]
    return truth


def dumps(truth: dict[str, Any]) -> str:
    """JSON of the ground truth with one trajectory sample a line (the file stays small and readable)."""
    rows = truth["trajectory"]
    text = json.dumps({**truth, "trajectory": "@trajectory@"}, indent=1)
    return text.replace('"@trajectory@"', "[\n  " + ",\n  ".join(json.dumps(r) for r in rows) + "\n ]") + "\n"
