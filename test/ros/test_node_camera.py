"""A camera layer on the real node (rclpy; Humble and Jazzy): CameraInfo in, detections stored with their rays.

Publishes a CameraInfo, odometry with a heading and Detection2DArrays with
boxes to a live MemoryNode (``test_node.Harness``), then asks ``locate``: the
rays from several poses must be triangulated at the object. Needs ROS 2, the
built package and vision_msgs; skips otherwise.
"""

from __future__ import annotations

import importlib.util
import math
import time
from typing import Any

import pytest

pytest.importorskip("rclpy")
pytest.importorskip("emem_ros.srv", reason="build and source emem_ros (colcon build) to get its interfaces")
if importlib.util.find_spec("vision_msgs") is None:  # pragma: no cover - depends on the ROS install
    pytest.skip("vision_msgs is not installed", allow_module_level=True)

from nav_msgs.msg import Odometry
from rclpy.duration import Duration
from rclpy.time import Time
from sensor_msgs.msg import CameraInfo
from vision_msgs.msg import Detection2D, Detection2DArray, ObjectHypothesisWithPose

from test.ros.test_node import Harness

TARGET = (3.0, 4.0)
FX, CX, WIDTH = 400.0, 320.0, 640


def camera_info(h: Harness) -> CameraInfo:
    msg = CameraInfo()
    msg.header.stamp = h.probe.get_clock().now().to_msg()
    msg.width, msg.height = WIDTH, 480
    msg.k = [FX, 0.0, CX, 0.0, FX, 240.0, 0.0, 0.0, 1.0]
    return msg


def stamp_at(h: Harness, seconds_ago: float) -> Any:
    clock = h.probe.get_clock()
    return (clock.now() - Duration(seconds=seconds_ago)).to_msg()


def shifted(stamp: Any, seconds: float) -> Any:
    return (Time.from_msg(stamp) + Duration(seconds=seconds)).to_msg()


def pose(h: Harness, x: float, y: float, stamp: Any) -> None:
    """The robot at (x, y) facing +y at ``stamp``."""
    odom = Odometry()
    odom.header.stamp, odom.header.frame_id = stamp, "odom"
    odom.pose.pose.position.x, odom.pose.pose.position.y = x, y
    odom.pose.pose.orientation.z, odom.pose.pose.orientation.w = math.sin(math.pi / 4), math.cos(math.pi / 4)
    h.publish(Odometry, "odom", odom)


def box(h: Harness, x: float, y: float, stamp: Any) -> None:
    """The box the camera of a robot at (x, y) facing +y reports for TARGET."""
    angle = math.atan2(TARGET[1] - y, TARGET[0] - x) - math.pi / 2
    hypothesis = ObjectHypothesisWithPose()
    hypothesis.hypothesis.class_id, hypothesis.hypothesis.score = "red mug", 0.9
    detection = Detection2D()
    detection.header.stamp, detection.header.frame_id = stamp, "camera"
    detection.results = [hypothesis]
    detection.bbox.center.position.x = CX - FX * math.tan(angle)
    detection.bbox.center.position.y = 240.0
    detection.bbox.size_x = detection.bbox.size_y = 20.0
    array = Detection2DArray()
    array.header, array.detections = detection.header, [detection]
    h.publish(Detection2DArray, "detections", array)


def test_camera_detections_are_triangulated_by_the_live_node(tmp_path):
    h = Harness(tmp_path, **{"layers.detections.camera_info_topic": "camera_info",
                             "layers.detections.intake.mode": "all"})
    try:
        h.bring_up()
        poses = [(float(x), 0.0) for x in range(0, 7)]
        origin = stamp_at(h, 40.0)
        attempts = [0]

        def placed():
            h.publish(CameraInfo, "camera_info", camera_info(h))
            # The robot drove past one pose every 0.25 s; odometry first (each pose held for 0.1 s), so
            # every detection finds its pose however the executor orders the two topics. Each attempt
            # has a time span of its own: an earlier attempt's poses never bracket this one's stamps.
            first = 2.0 * attempts[0]
            attempts[0] += 1
            stamps = [shifted(origin, first + 0.25 * i) for i in range(len(poses))]
            for (x, y), stamp in zip(poses, stamps):
                pose(h, x, y, shifted(stamp, -0.05))
                pose(h, x, y, stamp)
                pose(h, x, y, shifted(stamp, 0.05))
            time.sleep(0.5)
            for (x, y), stamp in zip(poses, stamps):
                box(h, x, y, stamp)
            time.sleep(0.5)
            answer = h.ask("locate", concept="red mug")
            return answer if answer.success and answer.found and "placed by bearings" in answer.text else None

        answer = h.until(placed, "locate to be placed by bearings")
        assert math.dist((answer.location.point.x, answer.location.point.y), TARGET) < 0.3
        assert answer.radius < 1.0
        counts = h.node.runtime.pipeline.counts()["detections"]
        assert counts.bearings > 0
    finally:
        h.close()
