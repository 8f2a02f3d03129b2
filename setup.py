"""pip install of the ROS-free core and the `emem` CLI.

colcon ignores this file: package.xml declares ament_cmake, and CMakeLists.txt
installs the same sources into the generated `emem_ros` Python package.
"""

from setuptools import setup

setup()
