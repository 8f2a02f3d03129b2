"""colcon builds the optional C linkage kernel into the installed package (CMakeLists.txt), so the node
links "near here" in C rather than on scipy's k-d tree. Run by the ROS half (.ci/ros_half.sh)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ament_index = pytest.importorskip("ament_index_python.packages")


def test_the_installed_package_carries_the_c_kernel():
    prefix = os.path.realpath(ament_index.get_package_prefix("emem_ros"))
    # From / with a clean path: the installed package, not this source tree (which may hold pip's build).
    code = "import os; from emem_ros.tools import clusters; print(os.path.realpath(clusters.KERNEL.__file__))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out.startswith(prefix + os.sep), (out, prefix)
    assert os.path.basename(out).startswith("_linkage.")
