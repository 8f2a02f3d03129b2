"""What the node keeps in RAM does not grow with the history (issue 26: RSS grew ~2 KB per stored observation).

Each bound found by the soak (bench/soak.py) is held here on a real memory: SQLite's page cache per
connection, the place change log (dropped once its cache has read it), the detection label cache (keyed
on metadata, unique per row), and the skip reasons the ingest pipeline counts per layer.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emem_ros.consolidation.rows import labels_of
from emem_ros.storage.place_cache import PlaceChanges
from emem_ros.storage.store import READER_CACHE_KIB, SQLITE_HEAP_LIMIT, WRITER_CACHE_KIB
from test.support.patrol import age_past_window, memory_adder, multi_room_patrol, open_memory


def _cache_kib(conn) -> int:
    value = int(conn.execute("PRAGMA cache_size").fetchone()[0])
    return -value if value < 0 else value * int(conn.execute("PRAGMA page_size").fetchone()[0]) // 1024


def test_every_connection_of_the_store_has_a_small_page_cache(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    try:
        assert _cache_kib(memory.store.state.conn) == WRITER_CACHE_KIB <= 8192
        assert _cache_kib(memory.store.reader()) == READER_CACHE_KIB <= 2048
    finally:
        memory.close()


_PAGE_CACHES_OF_A_FRESH_PROCESS = """
import ctypes, json, sqlite3, sys, threading, _sqlite3
from test.support.patrol import open_memory

used = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
used.restype = ctypes.c_int64
if sys.argv[2] != "unset":
    sqlite3.connect(":memory:").execute(f"PRAGMA soft_heap_limit={sys.argv[2]}")
memory = open_memory(sys.argv[1], lambda: 1.7e9)
writer = memory.store.state.conn
writer.execute("CREATE TABLE filler (id INTEGER PRIMARY KEY, body BLOB)")
writer.executemany("INSERT INTO filler (body) VALUES (?)", ((bytes(4000),) for _ in range(6000)))  # 24 MB
writer.execute("SELECT sum(length(body)) FROM filler").fetchone()  # the writer's own cache fills

def read_everything():
    memory.store.reader().execute("SELECT sum(length(body)) FROM filler").fetchone()

readers = [threading.Thread(target=read_everything) for _ in range(6)]  # a cache each, as in the node
for thread in readers:
    thread.start()
for thread in readers:
    thread.join()
limit = sqlite3.connect(":memory:").execute("PRAGMA soft_heap_limit").fetchone()[0]
print(json.dumps({"limit": limit, "heap": used()}))
memory.close()
"""


def _page_caches_of_a_fresh_process(db, limit: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", _PAGE_CACHES_OF_A_FRESH_PROCESS, str(db), limit],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1],
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_page_caches_of_every_thread_together_stay_near_one_process_limit(tmp_path):
    fresh = _page_caches_of_a_fresh_process(tmp_path / "a.db", "unset")
    assert fresh["limit"] == SQLITE_HEAP_LIMIT
    # Without the limit: the writer's 8 MiB and six readers' 2 MiB each, about 22 MB.
    assert fresh["heap"] < 1.5 * SQLITE_HEAP_LIMIT, fresh
    own = _page_caches_of_a_fresh_process(tmp_path / "b.db", str(3 * SQLITE_HEAP_LIMIT))
    assert own["limit"] == 3 * SQLITE_HEAP_LIMIT  # a limit the process set itself is kept


def test_the_place_change_log_drops_what_its_cache_has_read():
    changes = PlaceChanges(capacity=1000)
    changes.record([("t", 1, "detections", k, 0, 0) for k in range(300)])
    keys, seq, epoch = changes.since(0, 0)
    assert keys is not None and len(keys) == 300 and seq == 300
    assert len(changes._keys) == 0  # handed out: not kept for days
    changes.record([("t", 2, "detections", 0, 0, 0)])
    keys, seq, epoch = changes.since(seq, epoch)
    assert keys == [("t", 2, "detections", 0, 0, 0)] and seq == 301
    changes.record([(k,) for k in range(1500)])  # nobody asked: bounded, and the cache reads everything again
    assert len(changes._keys) <= 1000
    keys, seq, epoch = changes.since(seq, epoch)
    assert keys is None and seq == 1801


def test_a_day_of_patrol_leaves_the_caches_bounded(tmp_path, clock):
    """Thousands of detections with unique metadata, consolidated in this process: the label cache, the
    place change log and the consolidation row memo stay small whatever the count."""
    memory = open_memory(tmp_path / "m.db", clock, maintenance_process=False)
    labels_of.cache_clear()
    try:
        add = memory_adder(memory)

        def unique(text, x, y, z, stamp, layer, source, conf, meta, value=None):
            meta = dict(meta or {}, score=round(conf, 6), bearing=round(math.sin(stamp), 9))  # unique per row
            return add(text, x, y, z, stamp, layer, source, conf, meta, value)

        info = multi_room_patrol(unique, 6000, start=clock.now)
        memory.flush()
        memory.locate("red mug")  # the place cache reads the change log
        for _ in range(3):
            clock.now = info.end + 1
            age_past_window(memory, clock)
            memory.maintenance()
        memory.locate("chair")
        assert memory.store.counts()["observations"] >= 5000
        assert labels_of.cache_info().maxsize <= 4096
        assert labels_of.cache_info().currsize <= 4096
        assert len(memory.store.place_cache.changes._keys) == 0
    finally:
        memory.close()


def test_skip_reasons_that_quote_values_are_counted_by_kind(tmp_path, clock):
    pytest.importorskip("rosbags.typesys")
    from emem_ros.ros.params import parse_params
    from emem_ros.ros.pipeline import MAX_SKIP_REASONS, IngestPipeline
    from test.support import ros_messages as messages
    from test.test_camera_ingest import MAKE, flat

    memory = open_memory(tmp_path / "m.db", clock)
    try:
        pipeline = IngestPipeline(memory, parse_params(flat(tmp_path / "m.db")))
        for k in range(3 * MAX_SKIP_REASONS):  # a battery whose percentage is out of range, a new value each time
            msg = MAKE("sensor_msgs/msg/BatteryState", header=messages.header(MAKE, clock.now + k, "base"),
                       percentage=-0.001 * (k + 1), charge=math.nan, capacity=math.nan, design_capacity=math.nan)
            pipeline.on_message("battery", msg, clock.now + k)
        skipped = pipeline.counts()["battery"].skipped
        assert sum(skipped.values()) == 3 * MAX_SKIP_REASONS
        assert len(skipped) <= MAX_SKIP_REASONS + 2
    finally:
        memory.close()


def test_labels_still_come_from_metadata(tmp_path):
    assert labels_of("red mug", json.dumps({"class_id": "red mug", "score": 0.91})) == ("red mug",)


def test_where_a_moved_thing_was_survives_the_archival_of_its_sightings(tmp_path, clock):
    """Monday to Wednesday on the kitchen table, then in the office: once the kitchen sightings are archived
    (their text and places leave the hot tables), locate still lists the kitchen, from the entity."""
    memory = open_memory(tmp_path / "m.db", clock, archive_after_seconds=0, maintenance_process=False)
    try:
        def visit(x: float, y: float) -> None:
            for k in range(20):
                memory.add("red mug", x=x + 0.01 * (k % 3), y=y, z=0.9, timestamp=clock.now + k,
                           layer_name="detections_3d", metadata={"class_id": "red mug", "score": 0.9})
            memory.flush()
            clock.now += 60
            age_past_window(memory, clock)
            memory.maintenance()
            clock.now += 1
            memory.archive()

        visit(1.0, 4.6)  # the kitchen table
        kitchen_last = clock.now
        clock.now += 86400
        visit(11.9, 14.9)  # the office desk
        memory.add("red mug", x=11.9, y=14.9, z=0.9, timestamp=clock.now, layer_name="detections_3d",
                   metadata={"class_id": "red mug", "score": 0.9})  # seen again today (hot)
        memory.flush()
        tiers = dict(memory.store.reader().execute("SELECT tier, COUNT(*) FROM observations GROUP BY tier"))
        assert tiers.get("archived", 0) >= 40
        answer = memory.tools.call("locate", concept="where is the red mug?")
        assert abs(answer.position[0] - 11.9) < 0.5 and abs(answer.position[1] - 14.9) < 0.5
        kitchen = [p for p in answer.elsewhere if abs(p.position[0] - 1.0) < 0.5 and abs(p.position[1] - 4.6) < 0.5]
        assert kitchen and kitchen[0].source == "entity" and kitchen[0].last_stamp <= kitchen_last
        assert "a remembered entity" in str(answer)
    finally:
        memory.close()


def test_a_night_on_the_dock_is_consolidated_while_the_robot_is_still_there(tmp_path, clock):
    """Docked at one place all night, a caption every minute: the visit never ends, and time-window
    consolidation used to defer an open visit however long it lasted (short-term for days). Now a visit
    open for a consolidation window is closed: nothing waits more than two windows."""
    memory = open_memory(tmp_path / "m.db", clock, maintenance_process=False)
    try:
        start = clock.now
        for k in range(6 * 60):  # six hours, one caption a minute, at the dock
            memory.add("a hallway, docked at the charging station", x=7.0, y=2.0, timestamp=start + 60 * k,
                       layer_name="scene")
        memory.flush()
        clock.now = start + 6 * 3600 + 30  # still docked: the last caption was 30 s ago
        memory.consolidate_time_window()
        oldest = memory.store.reader().execute(
            "SELECT MIN(stamp) FROM observations WHERE tier = 'short_term'").fetchone()[0]
        window = memory.config.consolidation_window
        assert oldest is not None and clock.now - oldest <= 2 * window, (clock.now - oldest) / 3600
        assert memory.store.counts()["gists"] >= 1
    finally:
        memory.close()


def test_the_archive_job_of_the_node_timers_applies_retention(tmp_path, clock):
    """The ROS node queues 'entities', 'time_window' and 'archive' jobs, never 'maintenance': retention
    rules must run with the archive job, or they do nothing on a robot (the soak's retention run)."""
    memory = open_memory(tmp_path / "m.db", clock, retention_max_age={"scene": 3600.0})
    try:
        now = clock.now
        old = memory.add("a kitchen with a table", x=1.0, y=1.0, timestamp=now - 7200, layer_name="scene")
        new = memory.add("a kitchen with a sofa", x=1.0, y=1.0, timestamp=now - 60, layer_name="scene")
        memory.flush()
        memory.submit_job("archive").result(timeout=60)
        left = {f"obs-{r[0]}" for r in memory.store.reader().execute("SELECT id FROM observations")}
        assert old not in left and new in left
    finally:
        memory.close()


def test_an_index_that_holds_nothing_has_no_graph_until_its_first_vector(tmp_path, clock):
    """An hnswlib graph costs 2.6 MB before its first vector; a robot's memory has several that stay empty
    (episodes, experiences, notes). They are made at the first vector, and a restart does not make them."""
    memory = open_memory(tmp_path / "m.db", clock)
    memory.add("red mug", x=1.0, y=2.0, timestamp=clock.now)
    memory.flush()
    vectors = memory.store.vectors
    assert vectors["texts"]._index is not None and len(vectors["texts"]) == 1
    empty = [name for name in ("episodes", "experiences", "fs_chunks", "fs_nodes") if vectors[name]._index is None]
    assert empty == ["episodes", "experiences", "fs_chunks", "fs_nodes"]
    assert vectors["episodes"].search(memory.embed_query("red mug"), 5)[0].size == 0
    assert vectors["episodes"].labels().size == 0 and not vectors["episodes"].held_vectors([1, 2])[0].any()
    memory.close()
    again = open_memory(tmp_path / "m.db", clock)
    assert again.store.vectors["episodes"]._index is None and again.store.vectors["texts"]._index is not None
    assert again.tools.call("semantic_search", query="red mug").hits[0].text == "red mug"
    again.close()
