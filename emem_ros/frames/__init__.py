"""Where, in the fixed frame: transforms, a transform tree with history, and placing stamped things in it.

- ``transform``: rigid transforms (translation + quaternion), tf2's interpolation.
- ``buffer``: ``TransformBuffer``, the tree of frames over time, fed from ``/tf``, ``/tf_static`` and
  odometry; the live node and replay use the same one, so they place alike.
- ``placement``: ``Placer``, the one place that turns "stamped t, in frame F" into a place in the fixed
  frame (the robot's pose, a sensor's pose, a measured point), from TF or, without a fixed frame, odometry.

No ROS import: messages are read by attribute access (rclpy and rosbags messages alike).
"""

from emem_ros.frames.buffer import LookupFailure, TransformBuffer
from emem_ros.frames.transform import Transform

__all__ = ["LookupFailure", "Transform", "TransformBuffer"]
