#!/usr/bin/env bash
# The ROS half of `make test`: test/ros/ with real rclpy on ROS 2 Humble AND on ROS 2 Jazzy.
#
#   bash .ci/ros_half.sh [pytest arguments]      e.g. -k bag, or a test path
#
# Installs the shared ROS 2 distributions from $SHARED_ROS2 (default ../shared/ros2; install.sh and
# install-jazzy.sh, as root, idempotent, one after the other), then runs .ci/ros_distro.sh once per
# distribution, each in a process of its own (its setup.bash sourced there only), its own venv, colcon
# workspace, ROS_DOMAIN_ID and ROS_LOG_DIR. Both at once by default (EMEM_ROS_HALF_MODE=sequential runs
# one after the other; EMEM_ROS_DISTROS="humble" runs one). Prints one summary line per distribution and
# fails unless every distribution ran its tests with 0 failed and 0 skipped.
#
# Domains: $ROS_DOMAIN_ID_TEST_HUMBLE and $ROS_DOMAIN_ID_TEST_JAZZY, else $ROS_DOMAIN_ID_TEST for Humble
# and the next one for Jazzy, else a random pair. The two must differ: `ros2` CLI daemons are per domain.
#
# Where $SHARED_ROS2 is absent (no ROS for this machine) it says so and exits 0: the ROS half is skipped.
# A distribution whose files are not there, or that is not installed and cannot be (not root), is
# reported SKIPPED the same way; every distribution that is there must pass.
set -euo pipefail
script=$(realpath "$0")
cd "$(dirname "$script")/.."
shared=${SHARED_ROS2:-../shared/ros2}
distros=${EMEM_ROS_DISTROS:-humble jazzy}
mode=${EMEM_ROS_HALF_MODE:-parallel}

if [ ! -f "$shared/install.sh" ] || [ ! -f "$shared/env.sh" ]; then
  echo "ROS half: SKIPPED — no ROS 2 for this machine ($shared/install.sh and env.sh not found); test/ros/ did not run"
  exit 0
fi

installer() { case "$1" in humble) echo "$shared/install.sh" ;; jazzy) echo "$shared/install-jazzy.sh" ;; esac; }
environment() { case "$1" in humble) echo "$shared/env.sh" ;; jazzy) echo "$shared/env-jazzy.sh" ;; esac; }

base=${ROS_DOMAIN_ID_TEST:-$(( (RANDOM % 50) * 2 + 1 ))}
export ROS_DOMAIN_ID_TEST_HUMBLE=${ROS_DOMAIN_ID_TEST_HUMBLE:-$base}
export ROS_DOMAIN_ID_TEST_JAZZY=${ROS_DOMAIN_ID_TEST_JAZZY:-$(( base + 1 ))}
if [ "$ROS_DOMAIN_ID_TEST_HUMBLE" = "$ROS_DOMAIN_ID_TEST_JAZZY" ]; then
  echo "ROS half: ROS_DOMAIN_ID_TEST_HUMBLE and ROS_DOMAIN_ID_TEST_JAZZY must differ" >&2
  exit 2
fi

runnable=()
skipped=()
for distro in $distros; do
  setup="/opt/ros/$distro/setup.bash"
  if [ -z "$(installer "$distro")" ]; then
    echo "ROS half: unknown distribution '$distro' in EMEM_ROS_DISTROS (humble, jazzy)" >&2
    exit 2
  elif [ ! -f "$(installer "$distro")" ] || [ ! -f "$(environment "$distro")" ]; then
    skipped+=("ROS half ($distro): SKIPPED — no ROS 2 ${distro^} for this machine ($(installer "$distro") not found)")
  elif [ "$(id -u)" = 0 ]; then
    bash "$(installer "$distro")"
    runnable+=("$distro")
  elif [ ! -f "$setup" ]; then
    skipped+=("ROS half ($distro): SKIPPED — ROS 2 ${distro^} is not installed and installing it needs root")
  else
    runnable+=("$distro")
  fi
done

logs=$(mktemp -d "${TMPDIR:-/tmp}/emem_ros_half.XXXXXX")
started=$(date +%s)
declare -A status
if [ "$mode" = parallel ] && [ "${#runnable[@]}" -gt 1 ]; then
  echo "ROS half: ${runnable[*]} in parallel (logs in $logs)"
  declare -A pids
  for distro in "${runnable[@]}"; do
    bash .ci/ros_distro.sh "$distro" "$@" >"$logs/$distro.log" 2>&1 &
    pids[$distro]=$!
  done
  for distro in "${runnable[@]}"; do
    status[$distro]=0
    wait "${pids[$distro]}" || status[$distro]=$?
  done
  for distro in "${runnable[@]}"; do
    echo "======================================== ROS half ($distro) ========================================"
    cat "$logs/$distro.log"
  done
else
  for distro in "${runnable[@]}"; do
    echo "======================================== ROS half ($distro) ========================================"
    status[$distro]=0
    bash .ci/ros_distro.sh "$distro" "$@" 2>&1 | tee "$logs/$distro.log" || status[$distro]=$?
  done
fi

if [ "${#runnable[@]}" -gt 0 ]; then
  how=$([ "$mode" = parallel ] && [ "${#runnable[@]}" -gt 1 ] && echo "in parallel" || echo "one after the other")
  echo "ROS half: ${runnable[*]} $how, $(( $(date +%s) - started )) s wall; per distribution:"
fi
failed=0
for distro in "${runnable[@]}"; do
  line=$(grep -E "^ROS half \($distro\): .*(ROS tests ran|FAILED)" "$logs/$distro.log" | tail -1 || true)
  echo "${line:-ROS half ($distro): FAILED before its tests ran (exit ${status[$distro]}; see above)}"
  [ "${status[$distro]}" = 0 ] || failed=1
done
for line in "${skipped[@]}"; do
  echo "$line"
done
exit "$failed"
