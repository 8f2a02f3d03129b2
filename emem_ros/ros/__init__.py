"""The ROS 2 glue: message adapters, odometry history, intake policy, parameters.

Everything here except ``node.py`` is plain Python: adapters read messages by
attribute access only, so rclpy messages and ``rosbags`` messages go through
the same code, and the whole layer is testable without a ROS runtime. Only
``node.py`` imports rclpy (and ``distro.py`` when it builds an executor); what
differs between Humble and Jazzy is handled in ``distro.py``.
"""
