"""A short soak on the real ROS graph: two robot-days through `ros2 launch` + `ros2 bag play --clock`.

bench/soak.py at CI size (issue 26): rosbags/generate_week.py writes two short robot-days (a patrol
of 0.15 h each, an hour docked after it; the red mug moves to the office on the second day) into a
temporary folder; they are played at 20x (patrols) and 1000x (nights) into the launched node with
the packaged config/memory.yaml (hashing embedder). The node is stopped with SIGTERM to its process
group after the first night, like a service manager's daily restart, and SIGKILLed half-way through
the second patrol. Held: nothing committed is lost across either, the file passes
`PRAGMA integrity_check`, the node's RSS stays at its day-one level, every service call succeeds, and
"where is the red mug?" on the second day names the office first and lists the kitchen table as
where it was the day before (its sightings archived by then).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("rclpy")
pytest.importorskip("rosbags.rosbag2")
pytest.importorskip("emem_ros.srv", reason="build and source emem_ros (colcon build) to get its interfaces")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import soak  # noqa: E402


@pytest.mark.timeout(300)
def test_two_short_robot_days_with_a_restart_and_a_crash(tmp_path):
    result = soak.run(days=2, hours=0.15, seed=3, night_hours=1.0, patrol_rate=20.0, night_rate=1000.0,
                      kill_day=1, mug_moves=1, ask_day=1, sample_period=2.0, query_period=1.0,
                      domain=int(os.environ.get("ROS_DOMAIN_ID", "0") or 0), folder=tmp_path)
    events = {e["what"]: e for e in result.events}
    restart, crash = events["daily restart (SIGTERM)"], events["crash (SIGKILL) mid-patrol"]
    assert restart["committed"] > 0 and restart["stored_after"] >= restart["committed"], restart
    assert crash["committed_top_id"] > restart["committed_top_id"], (restart, crash)
    assert crash["committed"] > 0 and crash["stored_after"] >= crash["committed"], crash
    assert result.integrity == "ok"

    days = soak.by_day(result)
    assert [d["day"] for d in days] == [0, 1], days
    assert days[1]["observations"] > days[0]["observations"]
    assert days[1]["rss_node_mb"] <= 1.25 * days[0]["rss_node_mb"], days
    assert days[1]["rss_node_mb"] < 300 and days[1]["rss_maint_mb"] < 200, days
    # nothing waits more than two consolidation windows, but the odd row judged noise (stays short-term)
    assert max(d["overdue_rows_max"] for d in days) <= max(3, days[1]["observations"] // 200), days
    assert result.calls and not [c for c in result.calls if not c[3]], "a service call failed"

    mug = result.mug
    assert mug["ok"] and mug["found"] and mug["room"] == "office", mug
    # the day before's sightings are archived by now: the kitchen comes from the entity (tools/locate.py)
    assert mug["kitchen_listed"] and mug["kitchen_until"] == "2025-03-17", mug["text"]
