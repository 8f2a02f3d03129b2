#!/usr/bin/env bash
# One distribution's part of the ROS half (.ci/ros_half.sh runs one of these per distribution, each in a
# process of its own, so a distribution's setup.bash is never sourced in a shell that saw another's):
#
#   bash .ci/ros_distro.sh humble|jazzy [pytest arguments]
#
# Sources that distribution's environment from $SHARED_ROS2 (env.sh / env-jazzy.sh), builds this package
# with colcon in a scratch workspace of its own outside the source tree, and runs every test in test/ros/
# with real rclpy and launch_testing. Prints one line "ROS half (<distro>): N ROS tests ran, F failed,
# S skipped ..." and exits non-zero unless N > 0, F = 0 and S = 0. Tests marked `humble_only` (a module's
# `pytestmark = pytest.mark.humble_only`: EmbodiedAgents' Cortex is in the Humble overlay only) are not
# collected on another distribution; the line says how many were left out. Installing ROS is
# ros_half.sh's job (as root, one installer at a time).
#
# Environment (what docs/install.md's steps do):
#   - The node runs under /usr/bin/python3 (rclpy is built for it) from a venv made with
#     --system-site-packages, one per distribution ($ROS_VENV, default .venv-ros for Humble;
#     $ROS_VENV_JAZZY, default .venv-ros-jazzy): the memory core's pip dependencies live there, and
#     memory_node's `#!/usr/bin/env python3` finds the venv's python once it is activated. numpy stays
#     < 2: the generated message modules are compiled against Debian's numpy 1.x. The Humble venv also
#     gets EmbodiedAgents' Python dependencies ($SHARED_ROS2/emos-requirements.txt).
#   - pytest 7: the launch_testing plugins of Humble and Jazzy cannot load in pytest >= 8; ollama for
#     example_planner (test_planner.py), rosbags for the replay the bag tests compare with.
#   - ROS_DOMAIN_ID from $ROS_DOMAIN_ID_TEST_<DISTRO> (ros_half.sh gives each distribution its own),
#     ROS_LOG_DIR a fresh folder (or $ROS_LOG_DIR/<distro> when it is set).
set -euo pipefail
distro=${1:?usage: ros_distro.sh humble|jazzy [pytest arguments]}
shift
script=$(realpath "$0")
cd "$(dirname "$script")/.."
root=$(pwd)
shared=${SHARED_ROS2:-../shared/ros2}
case "$distro" in
  humble) env_sh="$shared/env.sh"; venv=${ROS_VENV:-.venv-ros}; extra_requirements="$shared/emos-requirements.txt" ;;
  jazzy) env_sh="$shared/env-jazzy.sh"; venv=${ROS_VENV_JAZZY:-.venv-ros-jazzy}; extra_requirements="" ;;
  *) echo "ros_distro.sh: unknown distribution '$distro' (humble or jazzy)" >&2; exit 2 ;;
esac
tag="ROS half ($distro)"
upper=$(printf %s "$distro" | tr '[:lower:]' '[:upper:]')
domain_var="ROS_DOMAIN_ID_TEST_$upper"
# One workspace per checkout and distribution: a CMake cache made for another checkout's interpreter
# (or another distribution's ament) breaks the build.
ws=${EMEM_ROS_WS:-${TMPDIR:-/tmp}/emem_ros_ws_$(id -u)_$(printf %s "$root" | sha1sum | cut -c1-8)}_$distro

set +u
# shellcheck disable=SC1090
source "$env_sh"
set -u
if [ "${ROS_DISTRO:-}" != "$distro" ]; then
  echo "$tag: FAILED — $env_sh set ROS_DISTRO='${ROS_DISTRO:-}', not '$distro'"
  exit 1
fi
# Keep this run's graph apart from other runs on the machine (and from the other distribution's run).
export ROS_DOMAIN_ID=${!domain_var:-${ROS_DOMAIN_ID_TEST:-$(( (RANDOM % 100) + 1 ))}}
if [ -n "${ROS_LOG_DIR:-}" ]; then
  export ROS_LOG_DIR="$ROS_LOG_DIR/$distro"
else
  export ROS_LOG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/emem_ros_log_$distro.XXXXXX")
fi

started=$(date +%s)
stamp="$venv/.emem-ros-installed"
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ "$script" -nt "$stamp" ] \
   || { [ -n "$extra_requirements" ] && [ -f "$extra_requirements" ] && [ "$extra_requirements" -nt "$stamp" ]; }; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  requirements=()
  if [ -n "$extra_requirements" ] && [ -f "$extra_requirements" ]; then
    requirements=(-r "$extra_requirements")
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'numpy>=1.22,<2' 'hnswlib>=0.8' \
    'rtree>=1.1' 'scipy>=1.8' 'PyYAML>=5.4' 'ollama>=0.4' 'rosbags>=0.10' 'tqdm>=4.60' 'pytest>=7,<8' \
    'pytest-timeout>=2' "${requirements[@]}"
  touch "$stamp"
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"

mkdir -p "$ws/src"
ln -sfn "$root" "$ws/src/emem_ros"
if [ "$(cat "$ws/.python" 2>/dev/null)" != "$(command -v python3)" ]; then
  rm -rf "$ws/build" "$ws/install"  # built for another interpreter (a venv since removed): start clean
  command -v python3 >"$ws/.python"
fi
echo "$tag: colcon build of emem_ros in $ws (python3 = $(command -v python3), ROS_DOMAIN_ID $ROS_DOMAIN_ID)"
(cd "$ws" && MAKEFLAGS=-j2 colcon build --packages-select emem_ros --event-handlers console_cohesion- \
   >"$ws/build.log" 2>&1) || { tail -50 "$ws/build.log"; echo "$tag: colcon build FAILED"; exit 1; }
set +u
# shellcheck disable=SC1091
source "$ws/install/setup.bash"
set -u
built=$(date +%s)

report="$ws/junit.xml"
left_out="$ws/left_out.json"
rm -f "$report" "$left_out"
status=0
# Plugins named, not auto-loaded: only the distribution's launch_testing ones and pytest-timeout, whatever
# else the system Python carries. test/ros/conftest.py writes what it left out (humble_only) to $left_out.
EMEM_ROS_LEFT_OUT="$left_out" PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -o addopts= \
  -p launch_testing.pytest.hooks -p launch_testing_ros_pytest_entrypoint -p pytest_timeout -p no:cacheprovider \
  --basetemp="$ws/pytest-tmp" -q -rfEs --junitxml="$report" test/ros "$@" || status=$?
python - "$distro" "$report" "$left_out" "$status" "$(( built - started ))" "$(( $(date +%s) - built ))" <<'EOF'
import json
import os
import sys
import xml.etree.ElementTree as ET

distro, report, left_out, status, setup_s, tests_s = sys.argv[1:]
count = {k: 0 for k in ("tests", "failures", "errors", "skipped")}
if os.path.exists(report):
    suites = ET.parse(report).getroot()
    for suite in [suites] if suites.tag == "testsuite" else list(suites):
        for key in count:
            count[key] += int(suite.get(key, 0))
ran = count["tests"] - count["skipped"]
failed = count["failures"] + count["errors"]
left = json.load(open(left_out)) if os.path.exists(left_out) else {"tests": 0, "reason": ""}
note = f"; {left['tests']} Humble-only not collected ({left['reason']})" if left["tests"] else ""
print(f"ROS half ({distro}): {ran} ROS tests ran, {failed} failed, {count['skipped']} skipped{note} "
      f"(setup + colcon build {setup_s} s, tests {tests_s} s)")
sys.exit(1 if failed or count["skipped"] or ran == 0 or int(status) else 0)
EOF
