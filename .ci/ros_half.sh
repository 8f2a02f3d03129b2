#!/usr/bin/env bash
# The ROS half of `make test`: install the shared ROS 2 Humble, build this package with colcon in a
# scratch workspace outside the source tree, and run every test in test/ros/ with real rclpy and
# launch_testing. Zero skipped and zero failed, or this script fails; it prints how many ROS tests ran.
#
# Environment (what the README's "Use it on a robot" steps do):
#   - ROS 2 Humble from $SHARED_ROS2 (default ../shared/ros2): install.sh (root, idempotent), env.sh.
#   - The node runs under /usr/bin/python3 (rclpy is built for it) from a venv made with
#     --system-site-packages ($ROS_VENV, default .venv-ros): the memory core's pip dependencies live
#     there, and memory_node's `#!/usr/bin/env python3` finds the venv's python once it is activated.
#     numpy stays < 2: the generated message modules of Humble are compiled against numpy 1.x.
#   - pytest 7 in that venv: Humble's launch_testing plugin cannot load in pytest >= 8; ollama for
#     example_planner (test_planner.py), rosbags for the replay the bag tests compare with.
# Where $SHARED_ROS2 is absent (no ROS for this machine) it says so and exits 0: the ROS half is skipped.
set -euo pipefail
script=$(realpath "$0")
cd "$(dirname "$script")/.."
root=$(pwd)
shared=${SHARED_ROS2:-../shared/ros2}
venv=${ROS_VENV:-.venv-ros}
# One workspace per checkout: a CMake cache made for another checkout's interpreter breaks the build.
ws=${EMEM_ROS_WS:-${TMPDIR:-/tmp}/emem_ros_ws_$(id -u)_$(printf %s "$root" | sha1sum | cut -c1-8)}

if [ ! -f "$shared/install.sh" ] || [ ! -f "$shared/env.sh" ]; then
  echo "ROS half: SKIPPED — no ROS 2 for this machine ($shared/install.sh and env.sh not found); test/ros/ did not run"
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  bash "$shared/install.sh"
elif [ ! -f /opt/ros/humble/setup.bash ]; then
  echo "ROS half: SKIPPED — ROS 2 Humble is not installed and installing it ($shared/install.sh) needs root"
  exit 0
fi
set +u
# shellcheck disable=SC1090,SC1091
source "$shared/env.sh"
set -u
# Keep this run's graph apart from other runs on the machine.
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID_TEST:-$(( (RANDOM % 100) + 1 ))}
export ROS_LOG_DIR=${ROS_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/emem_ros_log.XXXXXX")}

started=$(date +%s)
stamp="$venv/.emem-ros-installed"
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ "$script" -nt "$stamp" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install --quiet 'numpy>=1.22,<2' 'hnswlib>=0.8' 'rtree>=1.1' 'scipy>=1.8' \
    'PyYAML>=5.4' 'ollama>=0.4' 'rosbags>=0.10' 'tqdm>=4.60' 'pytest>=7,<8' 'pytest-timeout>=2'
  "$venv/bin/python" -m pip install --quiet -r "$shared/emos-requirements.txt"  # EmbodiedAgents' deps (test_emos_*)
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
echo "ROS half: colcon build of emem_ros in $ws (python3 = $(command -v python3))"
(cd "$ws" && MAKEFLAGS=-j2 colcon build --packages-select emem_ros --event-handlers console_cohesion- \
   >"$ws/build.log" 2>&1) || { tail -50 "$ws/build.log"; echo "ROS half: colcon build FAILED"; exit 1; }
set +u
# shellcheck disable=SC1091
source "$ws/install/setup.bash"
set -u
built=$(date +%s)

report=$(mktemp "${TMPDIR:-/tmp}/emem_ros_junit.XXXXXX.xml")
status=0
# Plugins named, not auto-loaded: only Humble's launch_testing ones and pytest-timeout, whatever else
# the system Python carries.
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -o addopts= -p launch_testing.pytest.hooks \
  -p launch_testing_ros_pytest_entrypoint -p pytest_timeout -p no:cacheprovider -q -rfEs \
  --junitxml="$report" test/ros "$@" || status=$?
python - "$report" "$status" "$(( built - started ))" "$(( $(date +%s) - built ))" <<'EOF'
import sys
import xml.etree.ElementTree as ET

suites = ET.parse(sys.argv[1]).getroot()
suites = [suites] if suites.tag == "testsuite" else list(suites)
count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
ran = count["tests"] - count["skipped"]
print(f"ROS half: {ran} ROS tests ran, {count['failures'] + count['errors']} failed, {count['skipped']} skipped "
      f"(setup + colcon build {sys.argv[3]} s, tests {sys.argv[4]} s)")
bad = count["failures"] + count["errors"] + count["skipped"] or int(sys.argv[2])
sys.exit(1 if bad or ran == 0 else 0)
EOF
