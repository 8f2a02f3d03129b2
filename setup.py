"""pip install of the ROS-free core and the `emem` CLI.

colcon ignores this file: package.xml declares ament_cmake, and CMakeLists.txt
installs the same sources into the generated `emem_ros` Python package (and
builds the same C kernel there).

The one C extension, ``emem_ros.tools._linkage`` (single-linkage labels for
"near here" and locate), is optional: without a C compiler the install still
succeeds and the tools use scipy's k-d tree instead (same answers, slower).
"""

import sys

from setuptools import Extension, setup

# GCC would fuse a * b + c into one rounding on some CPUs (aarch64); the kernel's sums must round as
# scipy's do, so that both paths link exactly the same pairs.
FLAGS = [] if sys.platform == "win32" else ["-O2", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension("emem_ros.tools._linkage", ["emem_ros/tools/_linkage.c"], extra_compile_args=FLAGS,
                  optional=True),
    ],
)
