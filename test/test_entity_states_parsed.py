"""Entity rows are parsed (and their rays fitted) once while they stay the same row; results do not change.

Each entity step reloads the stored entities its sightings may be of. Parsing
their metadata and refitting their rays grew with the history (issue 26: the
node's entities pass took 55 % more on a week's file than on Monday's); most of
them have not changed since the step before.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from emem_ros.consolidation import entities as entities_module
from emem_ros.consolidation.entities import ParsedEntities, _state_from_row
from emem_ros.geometry.rays import RaySet
from test.support.patrol import open_memory
from test.test_tools_locate_evidence import seen_by_camera, walk

CHAIRS = {"a": ((2.0, 3.0), (0.0, 0.0, 4.0, 0.0)), "b": ((12.0, 11.0), (10.0, 8.0, 14.0, 8.0))}


def entity_rows(memory):
    return memory.store.reader().execute(
        "SELECT id, name, x, y, z, spread, first_seen, last_seen, sightings, confidence, metadata "
        "FROM entities ORDER BY id").fetchall()


def three_steps(memory, clock, rng):
    """Both chairs, then chair a twice more: each a step of its own (b is a candidate every time, unchanged)."""
    start = clock.now - 5000
    for step, which in enumerate(("ab", "a", "a")):
        for name in which:
            target, (x0, y0, x1, y1) = CHAIRS[name]
            seen_by_camera(memory, "chair", target, walk(x0, y0, x1, y1, 12), start + 1000 * step
                           + (300 if name == "b" else 0), rng)
        memory.flush()
        memory.extract_entities(final=True)


def test_a_steps_results_are_the_same_as_with_every_row_parsed_again(tmp_path, clock, monkeypatch):
    cached = open_memory(tmp_path / "cached.db", clock)
    three_steps(cached, clock, np.random.default_rng(3))
    with monkeypatch.context() as patch:
        patch.setattr(ParsedEntities, "state", lambda self, row, vector_of: _state_from_row(row[:-1], vector_of(row)))
        fresh = open_memory(tmp_path / "fresh.db", clock)
        three_steps(fresh, clock, np.random.default_rng(3))
    rows = entity_rows(cached)
    assert len(rows) == 2 and all(json.loads(r[-1])["position_source"] == "bearings" for r in rows)
    assert rows == entity_rows(fresh)
    assert rows[0][8] == 36 and rows[1][8] == 12  # chair a seen in three steps, chair b in one


def test_an_unchanged_entity_is_not_parsed_again(tmp_path, clock, monkeypatch):
    parsed = []

    def counting(row, vector):
        parsed.append(row[0])
        return _state_from_row(row, vector)

    monkeypatch.setattr(entities_module, "_state_from_row", counting)
    memory = open_memory(tmp_path / "m.db", clock)
    three_steps(memory, clock, np.random.default_rng(3))
    a, b = (row[0] for row in entity_rows(memory))
    # step 1 made both; step 2 loaded both (new rows); step 3 only chair a, which step 2 changed
    assert parsed == [a, b, a] or parsed == [b, a, a]


def test_a_copy_changed_by_a_step_leaves_the_parsed_state_as_it_was():
    rays = [[x, 0.0, 0.9, math.atan2(3.0, 2.0 - x), 0.0, 0.02, 6.0, 100.0 + x, 1.0] for x in (0.0, 1.0, 3.0, 4.0)]
    metadata = json.dumps({"stats": {"robot": {"w": 2.0, "s": [4.0, 0.0, 0.0], "q": 16.0}},
                           "places": [[2.0, 0.0]], "visits": 1, "rays": rays, "note": "kept"})
    row = (7, "chair", "object", 2.0, 3.0, 0.9, 0.1, 100.0, 101.0, 2, 0.9, "camera", metadata, b"")
    vectors = []
    parsed = ParsedEntities()

    def vector_of(r):
        vectors.append(r[0])
        return np.ones(4, dtype=np.float32) / 2

    first = parsed.state(row, vector_of)
    fix = first.bearing_fix
    assert fix is not None and np.hypot(fix.position[0] - 2.0, fix.position[1] - 3.0) < 0.1
    first.places.append([9.0, 9.0])
    first.robot.add(np.array([9.0, 9.0, 0.0]))
    first.extra["note"] = "changed"
    first.bearing.add(RaySet.from_rows([(9.0, 9.0, 0.9, 0.0, 0.0, 0.02, 6.0, 102.0, 1.0, 0)]))
    again = parsed.state(row, vector_of)
    assert vectors == [7]  # the same row: not parsed again
    assert again.places == [[2.0, 0.0]] and again.robot.w == 2.0 and again.extra == {"note": "kept"}
    assert len(again.bearing) == 4 and again.bearing_fix is fix  # the fit is kept, not redone
    changed = row[:9] + (3,) + row[10:]
    assert parsed.state(changed, vector_of).sightings == 3 and vectors == [7, 7]


@pytest.mark.parametrize("limit", [1])
def test_the_parsed_rows_are_bounded(limit):
    parsed = ParsedEntities(limit=limit)
    for number in (1, 2, 3):
        parsed.state((number, "chair", "object", 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1, 0.5, "camera", "{}", b""),
                     lambda r: np.ones(4, dtype=np.float32))
    assert len(parsed._parsed) == limit


@pytest.mark.parametrize("in_process", [False, True], ids=["maintenance-process", "in-process"])
def test_a_forget_leaves_no_parsed_entity_name_or_row_in_ram(tmp_path, clock, in_process):
    """Forgetting promises the data is gone: the entities pass keeps nothing of it between steps, nor do the
    rows memo or the maintenance process (it is replaced)."""
    memory = open_memory(tmp_path / "m.db", clock, maintenance_process=not in_process)
    try:
        three_steps(memory, clock, np.random.default_rng(3))
        service = memory._consolidation
        extractor, offload = service.entities, service.offload
        assert len(extractor._parsed) == 2 and "chair" in extractor._vectors
        if in_process:
            assert offload is None and len(service.rows) > 0
        else:
            child = offload.pid
            assert child is not None

        report = memory.forget(match="chair", reason="test")
        assert report.observations > 0
        assert len(extractor._parsed) == 0 and not extractor._vectors and not extractor._row_labels
        assert len(service.rows) == 0

        seen_by_camera(memory, "stool", (5.0, 5.0), walk(3.0, 2.0, 7.0, 2.0, 12), clock.now - 100,
                       np.random.default_rng(4))
        memory.flush()
        if not in_process:
            assert offload.pid is None
        memory.extract_entities(final=True)
        if not in_process:  # a fresh maintenance process planned this step
            assert offload.pid not in (None, child)
        assert [row[1] for row in entity_rows(memory)] == ["stool"]
    finally:
        memory.close()
