"""test/ros/ runs in the ROS half of `make test` (.ci/ros_half.sh): real rclpy, launch_testing, the built package.

In the core run those tests are skipped, saying why: the core run uses pytest >= 8, which cannot load
Humble's launch_testing plugin, and without that plugin a launch test would be collected as plain
unittest classes with no launch around them.
"""

from __future__ import annotations

import pytest

_PLUGINS = ("launch_testing", "launch_testing.pytest.hooks")


def pytest_collection_modifyitems(config, items):
    if any(config.pluginmanager.get_plugin(name) is not None for name in _PLUGINS):
        return
    skip = pytest.mark.skip(reason="ROS half: needs Humble's launch_testing pytest plugin (pytest < 8) and the "
                                   "built package; `make test` runs it through .ci/ros_half.sh")
    for item in items:
        if "/test/ros/" in str(item.path).replace("\\", "/"):
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "humble_only: needs what only the Humble overlay has (EmbodiedAgents' Cortex); "
                                       "a Jazzy run leaves these tests out")
