"""emem_ros/ros/distro.py without ROS: the facts it holds and the choices made from them.

The same module on real Humble and Jazzy: test/ros/ (the ROS half runs it on both), which checks
BAGS against what `ros2 bag record` of the running distribution writes.
"""

from __future__ import annotations

import sys

import pytest

from emem_ros.ros import distro
from emem_ros.ros.params import parse_params


def test_ros_parameters_are_left_to_ros_on_both_distributions():
    assert distro.is_ros_parameter("use_sim_time")
    assert distro.is_ros_parameter("start_type_description_service")  # Iron and later (Jazzy)
    assert distro.is_ros_parameter("qos_overrides./odom.subscription.depth")
    assert not distro.is_ros_parameter("db_path")
    # parse_params ignores them instead of calling them unknown
    params = parse_params({"use_sim_time": True, "start_type_description_service": False,
                           "qos_overrides./odom.subscription.depth": 5, "layer_names": []})
    assert list(params.layers) == []


def test_typestore_follows_the_recorded_distribution():
    assert distro.typestore_distro("jazzy") == "jazzy"
    assert distro.typestore_distro(" Humble ") == "humble"
    assert distro.typestore_distro(None) == "humble"  # Humble's metadata version 5 records none
    assert distro.typestore_distro("rosbags") == "humble"  # the rosbags writer's mark (the bundled bags)


def test_bag_facts_cover_every_supported_distribution_and_the_typestores_exist():
    pytest.importorskip("rosbags")
    from rosbags.typesys import Stores

    from emem_ros.replay.typestore import DISTROS

    assert set(distro.SUPPORTED) == set(distro.BAGS) == set(DISTROS)
    assert all(isinstance(Stores[facts.rosbags_store], Stores) for facts in distro.BAGS.values())
    jazzy, humble = distro.BAGS["jazzy"], distro.BAGS["humble"]
    assert jazzy.metadata_version > humble.reads_up_to  # why a Jazzy bag is converted for Humble


def test_current_is_the_sourced_distribution(monkeypatch):
    monkeypatch.setenv("ROS_DISTRO", "Jazzy")
    assert distro.current() == "jazzy"
    monkeypatch.delenv("ROS_DISTRO")
    assert distro.current() is None


def test_an_executor_rclpy_lacks_is_refused_with_what_it_has(monkeypatch):
    monkeypatch.setitem(sys.modules, "rclpy", None)  # no rclpy at all
    monkeypatch.setitem(sys.modules, "rclpy.executors", None)
    monkeypatch.setitem(sys.modules, "rclpy.experimental", None)
    assert distro.executor_kinds() == ()
    with pytest.raises(ValueError, match="executor 'events' is not in this rclpy"):
        distro.make_executor("events")
