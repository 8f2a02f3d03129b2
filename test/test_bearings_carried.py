"""Rays live in observation metadata: export/import, rebuild from the log and the fleet sync carry them.

A memory with camera rays (and the entities they placed) goes through each
path; the result must hold the same rays and answer ``locate`` and
``entity_query`` the same way, from bearings.
"""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pytest

from emem_ros.storage.rebuild import rebuild_from_log
from test.support.patrol import open_memory
from test.test_tools_locate_evidence import seen_by_camera, walk

TARGETS = {"red mug": (2.0, 3.0), "chair": (12.0, 11.0)}


def build(path, clock):
    memory = open_memory(path, clock)
    rng = np.random.default_rng(5)
    start = clock.now - 2000
    seen_by_camera(memory, "red mug", TARGETS["red mug"], walk(0.0, 0.0, 4.0, 0.0, 12), start, rng)
    seen_by_camera(memory, "chair", TARGETS["chair"], walk(10.0, 8.0, 14.0, 8.0, 12), start + 300, rng)
    memory.flush()
    memory.extract_entities(final=True)
    return memory


def rays(path):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(conn.execute("SELECT stamp, json_extract(metadata, '$.ray') FROM observations").fetchall())
    finally:
        conn.close()


def check(memory):
    for name, target in TARGETS.items():
        where = memory.tools.locate(name)
        assert where.source == "bearings" and math.dist(where.position[:2], target) < 0.3, str(where)
        (entity,) = [h for h in memory.tools.entity_query(name=name).hits if h.text == name]
        assert math.dist(entity.position[:2], target) < 0.3


def test_export_and_import_carry_the_rays(tmp_path, clock):
    source = build(tmp_path / "a.db", clock)
    check(source)
    source.export_to(tmp_path / "a.jsonl.gz")
    source.close()
    target = open_memory(tmp_path / "b.db", clock)
    target.import_from(tmp_path / "a.jsonl.gz")
    target.flush()
    assert rays(tmp_path / "b.db") == rays(tmp_path / "a.db") and all(r for _, r in rays(tmp_path / "b.db"))
    check(target)
    target.close()


def test_rebuild_from_the_log_keeps_the_rays_and_the_entities_placed_by_them(tmp_path, clock):
    path = tmp_path / "robot.db"
    memory = build(path, clock)
    before = rays(path)
    entities = memory.store.reader().execute("SELECT name, x, y, metadata FROM entities ORDER BY id").fetchall()
    memory.close()
    rebuild_from_log(path)
    assert rays(path) == before
    memory = open_memory(path, clock)
    assert memory.store.reader().execute("SELECT name, x, y, metadata FROM entities ORDER BY id").fetchall() \
        == entities
    assert all(json.loads(m)["position_source"] == "bearings" for _, _, _, m in entities)
    check(memory)
    memory.close()


def test_the_fleet_sync_carries_the_rays(tmp_path, clock, fleet_url):
    pytest.importorskip("psycopg")
    from emem_ros.fleet import db
    from emem_ros.fleet.schema import init_fleet
    from emem_ros.fleet.sync import sync_memory

    with db.connect(fleet_url) as conn:
        assert init_fleet(conn, dim=384)
    path = tmp_path / "robot.db"
    memory = build(path, clock)
    memory.close()
    sync_memory(path, fleet_url, "robot1")
    with db.connect(fleet_url) as conn:
        fleet = sorted((stamp, json.loads(meta).get("ray")) for stamp, meta in conn.execute(
            "SELECT stamp, metadata FROM fleet.observations WHERE robot_id = %s", ("robot1",)))
        placed = {name: json.loads(meta)["position_source"] for name, meta in conn.execute(
            "SELECT name, metadata FROM fleet.entities WHERE robot_id = %s", ("robot1",))}
    assert [(s, r) for s, r in fleet] == [(s, json.loads(r)) for s, r in rays(path)]
    assert placed == {"red mug": "bearings", "chair": "bearings"}
