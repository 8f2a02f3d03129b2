# Two commands for a fresh machine:
#   make demo   set up .venv, replay the bundled patrol bag into a memory, ask it a question
#   make test   set up .venv and run the test suite (what .ci/run calls): the core suite, then the ROS half
#               (.ci/ros_half.sh: ROS 2 Humble and Jazzy from ../shared/ros2, colcon build, test/ros/ on each),
#               which says it was skipped, and why, where that ROS is absent
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.emem-installed
DEMO_DIR ?= out/demo
SHARED_VENDOR ?= ../shared/vendor
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: venv demo test test-core test-ros lint bench bags clean fleet-deps

$(STAMP): setup.cfg setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# CPU torch first: an unpinned torch (pulled in by sentence-transformers) is a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[all,test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(BIN)/emem replay rosbags/patrol_db3 --params config/memory.yaml --db $(DEMO_DIR)/memory.db
	$(BIN)/emem query $(DEMO_DIR)/memory.db locate concept="red mug"
	$(BIN)/emem query $(DEMO_DIR)/memory.db locate concept=chair
	$(BIN)/emem query $(DEMO_DIR)/memory.db body_status
	$(BIN)/emem query $(DEMO_DIR)/memory.db body_status 'layers=["battery"]' below=50
	$(BIN)/emem query $(DEMO_DIR)/memory.db temporal_query time_after=2025-03-14T09:10:24Z time_before=2025-03-14T09:10:50Z n_results=5
	$(BIN)/emem map $(DEMO_DIR)/memory.db -o $(DEMO_DIR)/map.png

test: test-core test-ros

test-core: $(STAMP) fleet-deps lint
	$(BIN)/python -m pytest -q

# Real ROS 2 Humble and Jazzy (in parallel): colcon build in a scratch workspace per distribution, then
# test/ros/ with rclpy and launch_testing on each (.ci/ros_half.sh, .ci/ros_distro.sh).
test-ros:
	bash .ci/ros_half.sh

# Types and lint (configured in setup.cfg [mypy] and ruff.toml); part of `make test`.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# PostgreSQL 15 + PostGIS (Debian packages) and pgvector (built from $(SHARED_VENDOR)) for the fleet-store
# tests; where that folder is absent or we are not root, those tests skip and say why.
fleet-deps:
	@if [ -f "$(SHARED_VENDOR)/install-pgvector.sh" ] && [ "$$(id -u)" = 0 ]; then \
		bash "$(SHARED_VENDOR)/install-pgvector.sh"; \
	else echo "fleet-deps: skipped (needs root and $(SHARED_VENDOR)/install-pgvector.sh); fleet tests may skip"; fi

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/bench_ingest.py --quick
	$(BIN)/python bench/bench_tools.py --quick
	$(BIN)/python bench/bench_consolidation.py --quick
	$(BIN)/python bench/bench_ledger.py --quick
	$(BIN)/python bench/bench_oplog.py --quick

bags: $(STAMP)
	$(BIN)/python rosbags/generate.py --out rosbags

clean:
	rm -rf $(VENV) .venv-ros .venv-ros-jazzy out build *.egg-info
