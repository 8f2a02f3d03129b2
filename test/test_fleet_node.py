"""The node's fleet sync (fleet.url, fleet.robot_id, fleet.sync_period) without rclpy, on a real PostgreSQL."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("rosbags.typesys")
pytest.importorskip("psycopg")

from emem_ros.fleet import db
from emem_ros.fleet.schema import init_fleet
from emem_ros.ros.params import ParamError, parse_params
from emem_ros.ros.runtime import ConfigureError, MemoryRuntime
from emem_ros.storage.oplog import lowest_hold
from test.conftest import FakeClock
from test.support.postgres import free_port
from test.support.scene import START
from test.test_ros_runtime import Recorder, detections, flat_params, odometry, resolve


def _runtime(clock, log) -> MemoryRuntime:
    return MemoryRuntime(clock, log=log, resolve=resolve)


def _wait_idle(runtime, timeout=30.0) -> None:
    deadline = time.monotonic() + timeout
    thread = runtime.fleet._thread
    while thread is not None and thread.is_alive() and time.monotonic() < deadline:
        thread.join(0.05)


def test_fleet_parameters_are_checked_in_plain_words(tmp_path):
    params = parse_params(flat_params(tmp_path / "m.db"))
    assert (params.fleet_url, params.fleet_robot_id, params.fleet_sync_period) == ("", "", 5.0)
    with pytest.raises(ParamError, match="fleet.robot_id"):
        parse_params(flat_params(tmp_path / "m.db", **{"fleet.url": "postgresql://h/db"}))
    with pytest.raises(ParamError, match="fleet.url must be a PostgreSQL URL"):
        parse_params(flat_params(tmp_path / "m.db", **{"fleet.url": "http://h", "fleet.robot_id": "r1"}))
    with pytest.raises(ParamError, match="fleet.sync_period"):
        parse_params(flat_params(tmp_path / "m.db", **{"fleet.url": "postgresql://h/db", "fleet.robot_id": "r1",
                                                       "fleet.sync_period": 0.0}))


def test_the_node_ships_its_memory_from_a_maintenance_timer(tmp_path, fleet_url):
    with db.connect(fleet_url) as conn:
        init_fleet(conn, dim=384)
    clock = FakeClock(START + 20)
    log = Recorder()
    runtime = _runtime(clock, log)
    runtime.configure(flat_params(tmp_path / "m.db", **{"fleet.url": fleet_url, "fleet.robot_id": "robot7",
                                                        "fleet.sync_period": 2.0}))
    try:
        timers = {t.name: t for t in runtime.timers()}
        assert timers["fleet_sync"].period == 2.0
        for i in range(10):
            runtime.on_odometry(odometry(START + i, float(i), 0.0))
        for i in range(5):
            runtime.on_message("detections", detections(START + i + 0.5, "red mug", "chair"))
        runtime.flush_tick()
        timers["fleet_sync"].tick()  # returns at once: the sync runs on the worker's thread
        _wait_idle(runtime)
        with db.connect(fleet_url) as conn:
            shipped = conn.execute("SELECT count(*) FROM fleet.observations WHERE robot_id = 'robot7'").fetchone()[0]
            stored = runtime.memory.store.counts()["observations"]
        assert shipped == stored > 0
        assert runtime.fleet.last_report is not None and runtime.fleet.last_report.caught_up
    finally:
        runtime.cleanup()
    assert runtime.fleet is None
    assert not log.errors()


def test_an_unreachable_fleet_is_logged_once_and_the_log_is_held(tmp_path):
    clock = FakeClock(START + 20)
    log = Recorder()
    runtime = _runtime(clock, log)
    url = f"postgresql://nobody@127.0.0.1:{free_port()}/fleet"
    runtime.configure(flat_params(tmp_path / "m.db", **{"fleet.url": url, "fleet.robot_id": "r1"}))
    try:
        for i in range(10):
            runtime.on_odometry(odometry(START + i, float(i), 0.0))
        for round_ in range(3):
            runtime.on_message("detections", detections(START + round_ + 0.5, "box"))
            runtime.flush_tick()
            runtime.fleet_sync_tick()
            _wait_idle(runtime)
        warnings = [m for level, m in log.lines if level == "warning" and "fleet" in m]
        assert len(warnings) == 1 and "cannot reach the fleet store" in warnings[0]
        assert runtime.memory.store.counts()["observations"] == 3  # the robot kept working
        assert lowest_hold(runtime.memory.store.log_dir) == 0  # nothing may be pruned before the first sync
    finally:
        runtime.cleanup()


def test_a_bad_fleet_setting_fails_the_configure(tmp_path):
    runtime = _runtime(FakeClock(START), Recorder())
    with pytest.raises(ConfigureError, match="fleet.robot_id"):
        runtime.configure(flat_params(tmp_path / "m.db", **{"fleet.url": "postgresql://h/db",
                                                            "fleet.robot_id": "no spaces please"}))
    assert not (tmp_path / "m.db").exists()
