"""Forget, proven on the live node with real rclpy (ROS 2 Humble and Jazzy): the third path of the forget proof.

A canary caption arrives on the node's ``scene`` layer (std_msgs/String) with
odometry, goes through the node's own maintenance (the consolidation, archival
and index-save timer callbacks, called instead of waiting for their periods),
is quoted by a ``store_specific_memory`` and a ``record_experience`` call and
by a dead-letter file; then ``~/forget`` is called through the real service by
match. A byte scan of every file under the memory (test/support/forget_scan.py:
db, -wal, -shm, .idx/, .log/, .cold/, dead letters; gzip inflated, log records
decoded) finds neither the canary's UTF-8 bytes nor its float32 vector, while
the node still answers locate and semantic_search for the other objects; the
same after the node is restarted on the same files.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("emem_ros.srv", reason="build and source emem_ros (colcon build) to get its interfaces")

from std_msgs.msg import String  # noqa: E402

from emem_ros.ingest.dead_letter import write_dead_letters  # noqa: E402
from emem_ros.storage.store import NewObservation  # noqa: E402
from test.ros.test_node import Harness  # noqa: E402
from test.support.forget_scan import holders, vector_needles  # noqa: E402

CANARY = "a man in a red jacket qzxcanary4711 waves at the door"
UNIQUE = b"qzxcanary4711"
EXPERIENCE = "asked the man in the red jacket qzxcanary4711 to step aside"
AT_DOOR, AT_WINDOW, AT_TABLE, AT_ENTRANCE = (2.0, 3.0), (6.0, 6.0), (1.0, -4.0), (-3.0, 1.0)
CHAIR = "a blue chair by the window"
MUG = "a red mug on the kitchen table"
UMBRELLA = "an umbrella stand by the entrance"
SETTLE = 1.2
"""Seconds to wait so the observations pass consolidation_window (and promoted ones archive_after_seconds)."""

MAINTENANCE = {
    # The node's maintenance timers are off; the test calls their callbacks when it wants them to run.
    "consolidation_period": 0.0, "archive_period": 0.0, "consolidation_window": 0.5,
    "consolidation_time_gap": 0.3, "consolidation_min_dwell": 0.0, "consolidation_min_samples": 1,
    "archive_after_seconds": 1.0, "log_segment_bytes": 4096,
}


def stored(h: Harness, text: str) -> bool:
    answer = h.ask("semantic_search", query=text, n_results=10, layer="scene", near_x=math.nan, near_y=math.nan)
    return answer.success and any(hit.text == text for hit in answer.hits)


def see(h: Harness, text: str, where: tuple[float, float]) -> None:
    """The robot at ``where`` sees ``text``, until the node has stored it."""
    def publish() -> None:
        h.odometry(*where)
        h.publish(String, "scene", String(data=text))
        h.odometry(*where)

    h.until(lambda: stored(h, text), f"{text!r} in memory", publish=publish)


def run_jobs(h: Harness, tick: Any, timeout: float = 60.0) -> None:
    """One maintenance timer callback of the node, and the jobs it queued, to completion."""
    before = h.node.runtime.pending_jobs()
    tick()
    for name, future in h.node.runtime.pending_jobs().items():
        if before.get(name) is not future:
            future.result(timeout)


def answers(h: Harness) -> dict[str, Any]:
    """What the node says about the other objects: where they are and what a search finds first."""
    out: dict[str, Any] = {}
    for name in (CHAIR, MUG):
        located = h.ask("locate", concept=name)
        assert located.success and located.found, located.message
        point = located.location.point
        out[f"locate {name}"] = (round(point.x, 3), round(point.y, 3), located.hits[0].id, located.hits[0].text)
        search = h.ask("semantic_search", query=name, n_results=3, layer="scene", near_x=math.nan, near_y=math.nan)
        assert search.success and search.hits, search.message
        top = search.hits[0]
        out[f"search {name}"] = (top.id, top.text, round(top.position.x, 3), round(top.position.y, 3))
    return out


def canary_found(h: Harness) -> bool:
    for query in ("man in a red jacket", "qzxcanary4711"):
        for service in ("semantic_search", "recall"):
            fields = {"near_x": math.nan, "near_y": math.nan} if service == "semantic_search" else {}
            answer = h.ask(service, query=query, **fields)
            said = (answer.text + " ".join(hit.text for hit in answer.hits)).replace(query, "")
            if answer.success and ("qzx" in said or "in a red jacket" in said):
                return True
    return False


def test_a_canary_seen_by_the_live_node_is_forgotten_from_every_file(tmp_path):
    h = Harness(tmp_path, **MAINTENANCE)
    try:
        h.bring_up()
        runtime = h.node.runtime
        memory = runtime.memory
        db = h.db
        vector = memory.engine.embed_texts([CANARY])[0]
        # Phase 1: seen, consolidated, archived by the node's maintenance (the cold store holds it then).
        see(h, CANARY, AT_DOOR)
        see(h, UMBRELLA, AT_ENTRANCE)
        time.sleep(SETTLE)
        run_jobs(h, runtime.consolidation_tick)
        time.sleep(SETTLE)
        run_jobs(h, runtime.archive_tick)
        assert any(".cold" in name for name in holders(db, [UNIQUE])), "the node archived the canary"
        # Phase 2: seen again (hot, consolidated), quoted by services, by a dead letter; indexes saved.
        see(h, CANARY, AT_DOOR)
        see(h, CHAIR, AT_WINDOW)
        see(h, MUG, AT_TABLE)
        assert h.ask("store_specific_memory", text=CANARY, x=AT_DOOR[0], y=AT_DOOR[1]).success
        assert h.ask("record_experience", goal=EXPERIENCE, result="he moved", success=1).success
        time.sleep(SETTLE)
        run_jobs(h, runtime.consolidation_tick)
        write_dead_letters(memory.dead_letter_path, [
            (NewObservation(id=999_999, text=CANARY, stamp=time.time(), layer="scene", source_type="perception",
                            position=None, frame_id="map"), "set aside")])
        runtime.index_save_tick()
        needles = [CANARY.encode(), UNIQUE, *vector_needles(vector)]
        before = holders(db, needles)
        for place in (".log", ".cold", ".idx", "deadletter"):
            assert any(place in name for name in before), f"no canary in {place} before the forget: {before}"
        assert any(vector_needles(vector)[0].hex()[:48] in hits for hits in before.values()), before
        assert canary_found(h)
        other = answers(h)

        dry = h.ask("forget", match="red jacket", dry_run=True)
        assert dry.success and dry.id == "" and "would forget" in dry.text, dry.message
        assert holders(db, needles) == before  # a dry run changes nothing

        forgot = h.ask("forget", match="Red Jacket", reason="the person asked to be forgotten")
        assert forgot.success and forgot.id.startswith("forget-"), forgot.message
        assert re.search(r"archived: [1-9]", forgot.text) and "experiences redacted: 1" in forgot.text, forgot.text
        assert holders(db, needles) == {}
        assert answers(h) == other
        assert not canary_found(h)
        entry = memory.forget_log()[-1]
        assert entry.who == "ros:service" and entry.selector == {"match": "[withheld]"}
    finally:
        h.close()
    assert holders(db, needles) == {}

    restarted = Harness(tmp_path, **MAINTENANCE)  # the same files, a new node
    try:
        restarted.bring_up()
        assert holders(db, needles) == {}
        assert answers(restarted) == other
        assert not canary_found(restarted)
        assert restarted.node.runtime.memory.ledger.count() == 1  # the redacted experience keeps its place
    finally:
        restarted.close()
    assert holders(db, needles) == {}
