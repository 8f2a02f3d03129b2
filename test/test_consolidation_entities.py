"""Entities from detections (no LLM), merged by meaning, distance and place; edges never duplicated."""

from __future__ import annotations

import json

import pytest

from emem_ros.consolidation.entities import cooccurrences
from test.support.patrol import open_memory


def visit(memory, t0: float, robot: tuple[float, float], objects: dict[str, tuple[float, float]],
          seconds: int = 30, three_d: bool = True) -> float:
    """The robot stands near ``robot`` for ``seconds`` and reports each object every second.

    2-D detections carry the robot's position (``position_source: odometry``);
    3-D ones (when ``three_d``) the object's own.
    """
    for i in range(seconds):
        rx, ry = robot[0] + 0.3 * ((i % 3) - 1), robot[1]
        for label, (ox, oy) in objects.items():
            memory.add(label, x=rx, y=ry, timestamp=t0 + i, layer_name="detections", source_type="perception",
                       metadata={"class_id": label, "position_source": "odometry"})
            if three_d:
                memory.add(label, x=ox, y=oy, z=0.8, timestamp=t0 + i, layer_name="objects3d",
                           source_type="perception", metadata={"class_id": label}, position_is="thing")
    return t0 + seconds


def entities(memory):
    rows = memory.store.reader().execute(
        "SELECT id, name, x, y, sightings, first_seen, last_seen, spread, metadata FROM entities ORDER BY id").fetchall()
    return [dict(zip(("id", "name", "x", "y", "sightings", "first", "last", "spread"), r[:8]),
                 meta=json.loads(r[8])) for r in rows]


@pytest.mark.parametrize("three_d", [True, False], ids=["3d", "2d"])
def test_the_same_mug_seen_twice_half_a_metre_apart_is_one_entity(tmp_path, clock, three_d):
    memory = open_memory(tmp_path / "m.db", clock)
    start = clock.now
    t = visit(memory, start, (2.5, 2.5), {"red mug": (2.0, 2.0)}, three_d=three_d)
    t = visit(memory, t + 10, (7.5, 2.5), {"sofa": (7.5, 4.5)}, three_d=three_d)
    end = visit(memory, t + 10, (3.0, 2.5), {"red mug": (2.5, 2.0)}, three_d=three_d)
    memory.flush()
    clock.now = end + 1000
    memory.extract_entities()
    mugs = [e for e in entities(memory) if e["name"] == "red mug"]
    assert len(mugs) == 1
    mug = mugs[0]
    assert mug["sightings"] == (120 if three_d else 60)
    assert (mug["first"], mug["last"]) == (start, end - 1)
    assert mug["meta"]["visits"] == (4 if three_d else 2)
    if three_d:  # the object's own positions decide, not where the robot stood
        assert (mug["x"], mug["y"]) == (pytest.approx(2.25), pytest.approx(2.0))
        assert mug["spread"] == pytest.approx(0.25, abs=0.01)
        assert mug["meta"]["position_source"] == "mixed"
    else:  # only the robot's positions are known: honest, wide
        assert (mug["x"], mug["y"]) == (pytest.approx(2.75, abs=0.01), pytest.approx(2.5))
        assert mug["meta"]["position_source"] == "robot"


@pytest.mark.parametrize("three_d", [True, False], ids=["3d", "2d"])
def test_two_mugs_four_metres_apart_in_different_rooms_stay_two_entities(tmp_path, clock, three_d):
    """Within entity_spatial_radius (5 m) but seen from different places: two objects, not one
    phantom mug averaged into the wall between the rooms (see entities.py)."""
    memory = open_memory(tmp_path / "m.db", clock)
    assert memory.config.entity_spatial_radius > 4.0
    t = visit(memory, clock.now, (2.0, 2.5), {"red mug": (3.0, 2.5)}, three_d=three_d)
    end = visit(memory, t + 10, (8.0, 2.5), {"red mug": (7.0, 2.5)}, three_d=three_d)
    memory.flush()
    clock.now = end + 1000
    memory.extract_entities()
    mugs = sorted((e for e in entities(memory) if e["name"] == "red mug"), key=lambda e: e["x"])
    assert len(mugs) == 2
    if three_d:
        assert [(m["x"], m["y"]) for m in mugs] == [(pytest.approx(3.0), pytest.approx(2.5)),
                                                    (pytest.approx(7.0), pytest.approx(2.5))]


def test_cooccurrence_counts_visits_and_is_never_duplicated(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    t = clock.now
    kitchen = {"red mug": (2.0, 2.0), "table": (2.5, 2.0), "chair": (3.0, 1.5)}
    for _ in range(3):
        t = visit(memory, t, (2.5, 2.5), kitchen, seconds=20)
        t = visit(memory, t + 10, (7.5, 2.5), {"sofa": (7.5, 4.5)}, seconds=20) + 10
    memory.flush()
    clock.now = t + 1000
    first = memory.extract_entities()
    assert first.created == 4
    assert memory.extract_entities().sightings == 0  # nothing new: nothing counted twice
    edges = memory.store.reader().execute(
        "SELECT src, dst, weight FROM edges WHERE kind = 'COOCCURS_WITH' ORDER BY src, dst").fetchall()
    ids = {e["name"]: e["id"] for e in entities(memory)}
    expected = {tuple(sorted((ids[a], ids[b]))) for a, b in [("red mug", "table"), ("red mug", "chair"),
                                                              ("table", "chair")]}
    assert {(int(s.split("-")[1]), int(d.split("-")[1])) for s, d, _ in edges} == expected  # lower id first
    assert [w for _, _, w in edges] == [3.0, 3.0, 3.0]  # seen together in three visits
    assert cooccurrences(memory.store.reader(), ids["table"]) == sorted(
        [(f"ent-{ids['red mug']}", 3.0), (f"ent-{ids['chair']}", 3.0)], key=lambda r: int(r[0][4:]))
    # OBSERVED_IN: one edge per entity and visit, weighted by its observations there
    observed = memory.store.reader().execute(
        "SELECT COUNT(*), SUM(weight) FROM edges WHERE kind = 'OBSERVED_IN' AND src = ?",
        (f"ent-{ids['red mug']}",)).fetchone()
    assert observed == (6, 120.0)  # 3 visits x (2-D + 3-D sighting); 3 x 20 x 2 observations


def test_more_sightings_update_the_known_entity(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    t = visit(memory, clock.now, (2.5, 2.5), {"red mug": (2.0, 2.0)})
    memory.flush()
    clock.now = t + 500
    memory.extract_entities()
    t = visit(memory, clock.now, (2.5, 2.5), {"red mug": (2.1, 2.0)})
    memory.flush()
    clock.now = t + 500
    report = memory.extract_entities()
    assert (report.created, report.merged) == (0, 2)
    (mug,) = entities(memory)
    assert mug["sightings"] == 120 and mug["last"] == t - 1


def test_class_names_come_from_detection_metadata(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    for i in range(20):
        memory.add("cup 0.93 at the counter edge", x=1.0, y=1.0, timestamp=clock.now + i,
                   layer_name="detections", metadata={"class_id": "cup", "score": 0.93})
        memory.add("bottle", x=1.0, y=1.0, timestamp=clock.now + i, layer_name="yolo",
                   metadata={"class_id": 39, "score": 0.8})
    memory.flush()
    clock.now += 1000
    memory.extract_entities()
    assert sorted(e["name"] for e in entities(memory)) == ["bottle", "cup"]


class EntityLLM:
    """Answers entity prompts with a JSON list; counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, prompt: str, *, system=None) -> str:
        self.calls += 1
        if "JSON array" in prompt:
            return '["red mug", "table"]' if "mug" in prompt else "[]"
        return "A kitchen."


def test_free_text_gives_entities_by_name_without_an_llm_and_by_the_llm_with_one(tmp_path, clock):
    def scenes(memory):
        for i in range(40):
            memory.add("a kitchen with a red mug on the table" if i % 2 else "an empty hallway, no chair",
                       x=1.0, y=1.0, timestamp=clock.now + i, layer_name="scene")
        memory.flush()
        clock.now += 1000

    plain = open_memory(tmp_path / "plain.db", clock)
    scenes(plain)
    assert plain.extract_entities().sightings == 2
    found = {e["name"]: e for e in entities(plain)}
    assert sorted(found) == ["mug", "table"]  # by name (text_things); "no chair" is not a sighting
    assert found["mug"]["meta"]["position_source"] == "robot"  # a caption is perceived from where it was made

    llm = EntityLLM()
    smart = open_memory(tmp_path / "smart.db", clock, llm=llm)
    scenes(smart)
    smart.extract_entities()
    assert sorted(e["name"] for e in entities(smart)) == ["red mug", "table"]
    assert llm.calls == 2  # one call per distinct text, not per observation


def visit_many(memory, t0: float, robot: tuple[float, float], objects: list[tuple[str, tuple[float, float]]],
               seconds: int = 30, two_d: bool = False) -> float:
    """Like ``visit``, but objects may share a label (two chairs): a list of (label, position)."""
    for i in range(seconds):
        for label, (ox, oy) in objects:
            memory.add(label, x=ox, y=oy, z=0.8, timestamp=t0 + i, layer_name="objects3d",
                       source_type="perception", metadata={"class_id": label}, position_is="thing")
            if two_d:
                memory.add(label, x=robot[0], y=robot[1], timestamp=t0 + i, layer_name="detections",
                           source_type="perception", metadata={"class_id": label, "position_source": "odometry"})
    return t0 + seconds


@pytest.mark.parametrize("objects", [
    [("chair", (1.0, 3.0)), ("chair", (2.5, 3.0))],  # two chairs at one table
    [("red mug", (0.0, 2.0)), ("red mug", (4.0, 2.0))],  # two mugs 4 m apart in one view
], ids=["chairs-1.5m", "mugs-4m"])
def test_objects_of_one_label_measured_apart_in_one_visit_stay_apart(tmp_path, clock, objects):
    """The instances ``_sightings`` split must not merge back into one phantom at their midpoint,
    neither in the visit that split them nor when a later visit sees them again."""
    memory = open_memory(tmp_path / "m.db", clock)
    t = visit_many(memory, clock.now, (2.0, 2.0), objects, two_d=True)
    memory.flush()
    clock.now = t + 1000
    memory.extract_entities()
    end = visit_many(memory, clock.now, (2.0, 2.0), objects)
    memory.flush()
    clock.now = end + 1000
    memory.extract_entities()
    found = sorted((e for e in entities(memory) if e["name"] == objects[0][0]), key=lambda e: e["x"])
    assert [(e["x"], e["y"]) for e in found] == [(pytest.approx(x), pytest.approx(y)) for _, (x, y) in objects]
    assert all(e["spread"] < 0.01 for e in found)
    assert [e["meta"]["visits"] for e in found] in ([3, 2], [2, 3])  # the one 2-D sighting went to one of them


def test_the_same_mug_seen_through_a_doorway_is_one_entity(tmp_path, clock):
    """Measured positions 0.3 m apart from viewpoints 5 m apart: the same spot, so the same mug."""
    memory = open_memory(tmp_path / "m.db", clock)
    t = visit(memory, clock.now, (3.0, 5.0), {"red mug": (5.0, 5.0)}, three_d=True)
    end = visit(memory, t + 60, (8.0, 5.0), {"red mug": (5.3, 5.0)}, three_d=True)
    memory.flush()
    clock.now = end + 1000
    memory.extract_entities()
    (mug,) = entities(memory)
    assert (mug["x"], mug["y"]) == (pytest.approx(5.15), pytest.approx(5.0))


def test_robot_pose_sightings_count_for_the_measured_object_they_can_see(tmp_path, clock):
    """2-D detections from several spots up to 6 m away (one before the object was ever measured)
    all go to the one measured entity, not to a trail of entities where the robot stood."""
    memory = open_memory(tmp_path / "m.db", clock)
    t = clock.now
    for robot in ((7.0, 2.0), (7.0, 13.0)):  # far ends of a corridor: 2-D only
        t = visit(memory, t, robot, {"fire extinguisher": (7.7, 8.0)}, three_d=False) + 200
    t = visit(memory, t, (7.0, 6.0), {"fire extinguisher": (7.7, 8.0)}, three_d=True)
    memory.flush()
    clock.now = t + 1000
    memory.extract_entities()
    (extinguisher,) = entities(memory)
    assert (extinguisher["x"], extinguisher["y"]) == (pytest.approx(7.7), pytest.approx(8.0))
    assert extinguisher["sightings"] == 120 and extinguisher["meta"]["visits"] == 4
    # A later run: a robot-pose sighting from 6 m away still counts for it.
    end = visit(memory, clock.now, (7.0, 14.0), {"fire extinguisher": (7.7, 8.0)}, three_d=False)
    memory.flush()
    clock.now = end + 1000
    assert memory.extract_entities().created == 0
    (extinguisher,) = entities(memory)
    assert extinguisher["last"] == end - 1
