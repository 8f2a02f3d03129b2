"""The bundled patrol bags replayed end to end, then asked what the ground truth says happened.

Both storages (sqlite3 and mcap) are replayed once per module with the
deterministic hashing embedder and the shipped config/memory.yaml; the
memory is then queried through the same tools a planner uses.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("rosbags")

from rosbags.highlevel import AnyReader

from emem_ros.cli.common import open_memory
from emem_ros.replay import ReplayOptions, replay_bag
from emem_ros.ros.params import load_params_yaml
from test.support.bags import BAGS, REPO

TRUTH = json.loads((BAGS / "ground_truth.json").read_text(encoding="utf-8"))
PARAMS = REPO / "config" / "memory.yaml"
DETECTION_LAYERS = ("detections", "detections_3d")


def hashing_params():
    params = load_params_yaml(PARAMS)
    return dataclasses.replace(params, embedding_backend="hashing", embedding_model="")


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    """{'db3': (summary, db path), 'mcap': (...)}: each bundled bag replayed once."""
    out = {}
    for name in ("db3", "mcap"):
        db = tmp_path_factory.mktemp(name) / "memory.db"
        summary = replay_bag(BAGS / f"patrol_{name}", hashing_params(), ReplayOptions(db_path=str(db), progress=False))
        out[name] = (summary, db)
    return out


@pytest.fixture(scope="module")
def memory(replays):
    mem = open_memory(replays["db3"][1])
    yield mem
    mem.close()


def room_of(x: float, y: float) -> str:
    for name in ("hallway", "kitchen", "living room", "office"):  # the generator's order: doors count as hallway
        box = TRUTH["rooms"][name]
        if box["min"][0] <= x <= box["max"][0] and box["min"][1] <= y <= box["max"][1]:
            return name
    return "outside"


def bag_topic_counts(path: Path) -> dict[str, int]:
    with AnyReader([path]) as reader:
        return {c.topic: c.msgcount for c in reader.connections}


# ---------------------------------------------------------------------- the summary
@pytest.mark.parametrize("name", ["db3", "mcap"])
def test_every_message_of_the_bag_is_accounted_for(replays, name):
    summary, _ = replays[name]
    counts = bag_topic_counts(BAGS / f"patrol_{name}")
    assert summary.stopped_early is None
    assert summary.messages_read == sum(counts.values()) - counts["/cmd_vel"]
    assert summary.ignored_topics == {"/cmd_vel": counts["/cmd_vel"]}
    assert summary.missing_topics == {}
    assert summary.odometry.messages == summary.odometry.accepted == counts["/odom"]
    for layer in summary.layers:
        assert layer.messages == counts[layer.topic], layer.name
        assert layer.without_position == 0, layer.name  # odometry covers the whole bag
    assert summary.bag_start == pytest.approx(TRUTH["start"], abs=0.5)
    assert summary.bag_end == pytest.approx(TRUTH["end"], abs=0.5)


def test_skipped_messages_are_exactly_the_empty_detection_arrays(replays):
    summary, _ = replays["db3"]
    with AnyReader([BAGS / "patrol_db3"]) as reader:
        conns = [c for c in reader.connections if c.topic == "/detections"]
        empty = sum(1 for c, _, raw in reader.messages(conns) if not reader.deserialize(raw, c.msgtype).detections)
    assert empty > 0
    assert summary.layer("detections").skipped == {"no detections": empty}
    assert all(not layer.skipped for layer in summary.layers if layer.name != "detections")


def test_intake_thins_the_repetitive_streams(replays):
    summary, _ = replays["db3"]
    battery = summary.layer("battery")
    assert battery.observations < battery.messages / 10  # 1 Hz, kept only when the charge moved by 1 %
    assert battery.observations + battery.dropped_by_intake == battery.messages
    assert summary.layer("detections_3d").dropped_by_intake == 0  # 1 Hz meets the 1 s min_period exactly


def test_summary_text_names_layers_reasons_and_results(replays):
    summary, db = replays["db3"]
    text = summary.render()
    for needle in ("detections_3d", "no detections", "/cmd_vel (", "gists", "entities", str(db), "13.1 min"):
        assert needle in text, needle
    assert summary.consolidated and summary.gists_created > 0 and summary.entities_created > 0
    assert summary.gists_total == summary.gists_created and summary.observations_total == summary.observations


# ---------------------------------------------------------------------- db3 == mcap
def _rows(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_db3_and_mcap_replays_give_the_same_memory(replays):
    a, b = replays["db3"][1], replays["mcap"][1]
    observations = ("SELECT o.id, t.text, o.stamp, o.layer, o.source_type, o.x, o.y, o.z, o.confidence, o.value,"
                    " o.metadata, o.gist_id, o.tier FROM observations o JOIN texts t ON t.id = o.text_id ORDER BY o.id")
    rows = _rows(a, observations)
    assert len(rows) > 500
    assert rows == _rows(b, observations)
    gists = "SELECT text, cx, cy, radius, time_start, time_end, source_count FROM gists ORDER BY id"
    entities = "SELECT name, x, y, spread, first_seen, last_seen, sightings FROM entities ORDER BY id"
    assert _rows(a, gists) == _rows(b, gists) != []
    assert _rows(a, entities) == _rows(b, entities) != []


# ---------------------------------------------------------------------- ground truth: where things are
NAMES = sorted({o["name"] for o in TRUTH["objects"]})
"""Classes; the chair is in two rooms (one class, two objects)."""


def instances(name: str) -> list[dict]:
    return [o for o in TRUTH["objects"] if o["name"] == name]


def spots(result, name: str) -> list[tuple]:
    """Where locate says the thing is: its answer and the other places of the same label."""
    return [result.position] + [p.position for p in result.elsewhere if p.label == name]


@pytest.mark.parametrize("name", NAMES)
def test_the_3d_detections_locate_each_object_within_a_metre(memory, name):
    result = memory.tools.locate(name, layer="detections_3d")
    assert result.position is not None and result.source == "measured"
    assert min(math.dist(result.position[:2], o["position"][:2]) for o in instances(name)) < 1.0
    for thing in instances(name):  # every object of the class is reported, the best first
        assert min(math.dist(spot[:2], thing["position"][:2]) for spot in spots(result, name)) < 1.0
    assert result.evidence[0].text == name


@pytest.mark.parametrize("name", NAMES)
def test_an_entity_of_each_object_sits_within_a_metre_and_none_in_another_room(memory, name):
    result = memory.tools.entity_query(name=name, n_results=20)
    same = [h for h in result.hits if h.text == name]
    assert len(same) == len(instances(name)), result  # one object, one entity: 2-D sightings count for it
    for thing in instances(name):
        assert min(math.dist(h.position[:2], thing["position"][:2]) for h in same) < 1.0
    assert sorted(room_of(*h.position[:2]) for h in same) == sorted(o["room"] for o in instances(name))
    radii = dict(memory.store.reader().execute(
        "SELECT 'ent-' || id, json_extract(metadata, '$.radius') FROM entities WHERE name = ?", (name,)).fetchall())
    for thing in instances(name):  # measured: the stated radius holds the object
        hit = min(same, key=lambda h: math.dist(h.position[:2], thing["position"][:2]))
        assert math.dist(hit.position[:2], thing["position"][:2]) <= radii[hit.id] <= 0.5


@pytest.mark.parametrize("name", NAMES)
def test_locate_without_a_layer_trusts_measured_positions_over_the_robot_pose(memory, name):
    """All layers together: 2-D sightings (stored where the robot stood) must not pull the answer away."""
    result = memory.tools.locate(name)
    assert result.position is not None
    for thing in instances(name):
        assert min(math.dist(spot[:2], thing["position"][:2]) for spot in spots(result, name)) < 1.0
    assert any(n.startswith("placed by measured object positions") for n in result.notes), result.notes
    assert all(h.layer == "detections_3d" for h in result.evidence)
    assert all(p.source == "measured" for p in result.elsewhere), str(result)  # no stray box as another object


def test_the_red_mug_is_not_confused_with_the_blue_one(memory):
    red = next(o for o in TRUTH["objects"] if o["name"] == "red mug")
    result = memory.tools.locate("red mug", layer="detections_3d")
    assert math.dist(result.position[:2], red["position"][:2]) < 0.5
    assert all(room_of(*p.position[:2]) != "kitchen" for p in result.elsewhere)


# ---------------------------------------------------------------------- ground truth: what was seen where and when
LONG_VISITS = [v for v in TRUTH["visits"] if v["end"] - v["start"] >= 30.0]


@pytest.mark.parametrize("visit", LONG_VISITS, ids=lambda v: f"{v['room']}@{v['start'] - TRUTH['start']:.0f}s")
def test_temporal_query_over_each_visit_lists_what_was_seen_there(memory, visit):
    result = memory.tools.temporal_query(time_after=visit["start"], time_before=visit["end"], n_results=60)
    seen = {h.text for h in result.hits if h.kind == "observation" and h.layer in DETECTION_LAYERS}
    assert seen == set(visit["objects"])


@pytest.mark.parametrize("room", ["kitchen", "living room", "office"])
def test_spatial_query_in_each_room_finds_only_that_rooms_objects(memory, room):
    box = TRUTH["rooms"][room]
    radius = min(box["max"][0] - box["min"][0], box["max"][1] - box["min"][1]) / 2
    cx, cy = box["center"]
    result = memory.tools.spatial_query(cx, cy, radius=radius, n_results=100)
    seen = {h.text for h in result.hits if h.kind == "observation" and h.layer in DETECTION_LAYERS}
    expected = {o["name"] for o in TRUTH["objects"] if o["room"] == room}
    assert seen and seen <= expected
    near = {o["name"] for o in TRUTH["objects"]
            if o["room"] == room and math.dist((cx, cy), o["position"][:2]) < radius}
    assert near <= seen


def test_scene_captions_are_placed_in_the_room_they_describe(memory):
    rows = memory.store.reader().execute(
        "SELECT t.text, o.x, o.y FROM observations o JOIN texts t ON t.id = o.text_id"
        " WHERE o.layer = 'scene'").fetchall()
    words = {"kitchen": "a kitchen", "hallway": "a hallway", "living room": "a living room", "office": "an office"}
    assert len(rows) > 50
    assert all(text.startswith(words[room_of(x, y)]) for text, x, y in rows)


# ---------------------------------------------------------------------- ground truth: the body
def _battery(memory) -> list[tuple[float, float]]:
    return memory.store.reader().execute(
        "SELECT stamp, value FROM observations WHERE layer = 'battery' ORDER BY stamp").fetchall()


@pytest.mark.parametrize("level", sorted(TRUTH["battery_below"]))
def test_the_memory_knows_when_the_battery_fell_below_each_level(memory, level):
    """No stored reading is below the level before it happened; the first one comes within 30 s."""
    truth = TRUTH["battery_below"][level]
    readings = _battery(memory)
    below = [stamp for stamp, value in readings if value < float(level)]
    assert below and truth <= below[0] <= truth + 30.0


def test_body_status_reports_the_final_charge(memory, replays):
    result = memory.tools.body_status(["battery"])
    (reading,) = result.readings
    final = TRUTH["battery_start"] - 0.0005 * (TRUTH["end"] - TRUTH["start"])
    assert abs(reading.value - final) < 0.02
    assert TRUTH["end"] - reading.stamp < 30.0
    assert "discharging" in reading.text


def _sampling_period(readings: list[tuple[float, float]]) -> float:
    """The longest gap between two stored battery readings (intake keeps one per 1 % of charge)."""
    return max(b[0] - a[0] for a, b in zip(readings, readings[1:]))


@pytest.mark.parametrize("level", sorted(TRUTH["battery_below"]))
def test_body_status_reports_when_the_battery_fell_below_each_level(memory, level):
    """body_status(below=80) in the units it shows: the crossing lands within one sampling period of the truth."""
    truth = TRUTH["battery_below"][level]
    percent = float(level) * 100
    result = memory.tools.body_status(["battery"], below=percent)
    (crossing,) = result.crossings  # the battery drains once: one crossing per level
    period = _sampling_period(_battery(memory))
    assert truth <= crossing.after.stamp <= truth + period
    assert crossing.before is not None and crossing.before.stamp < truth
    assert crossing.before_level >= percent > crossing.after_level
    assert crossing.after.stamp - crossing.before.stamp <= period
    assert f"fell below {percent:g}%" in str(result) and "discharging" in crossing.after.text
    asked = memory.dispatch_tool_call("body_status", {"layers": ["battery"], "below": percent})
    assert asked == str(result)


def test_body_status_reports_the_charge_at_a_past_time(memory):
    at = TRUTH["start"] + 300.0
    (reading,) = memory.tools.body_status(["battery"], at_time=at).readings
    assert at - _sampling_period(_battery(memory)) <= reading.stamp <= at
    expected = TRUTH["battery_start"] - 0.0005 * (reading.stamp - TRUTH["start"])
    assert abs(reading.value - expected) < 0.002
    assert reading.trend is not None and reading.trend.startswith("-")


def test_the_motor_warning_is_remembered_in_its_window(memory):
    rows = memory.store.reader().execute(
        "SELECT o.stamp FROM observations o JOIN texts t ON t.id = o.text_id"
        " WHERE o.layer = 'diagnostics' AND t.text LIKE 'WARN motor_left%'").fetchall()
    window = TRUTH["motor_warning"]
    assert rows and all(window["start"] <= stamp < window["end"] for (stamp,) in rows)


def test_perception_tools_do_not_return_body_readings(memory):
    result = memory.tools.temporal_query(time_after=TRUTH["start"], time_before=TRUTH["end"], n_results=200)
    assert not {h.layer for h in result.hits if h.kind == "observation"} & {"battery", "cpu_temp", "diagnostics"}


def test_the_replayed_gists_carry_no_body_reading(memory):
    """The replay consolidates at its end: the gists are perception summaries, the readings sit in metadata."""
    body = {"battery", "cpu_temp", "diagnostics"}
    rows = memory.store.reader().execute("SELECT id FROM gists").fetchall()
    gists = memory.store.get_gists([r[0] for r in rows])
    assert gists
    for gist in gists:
        assert not set(gist.layers) & body and "battery" not in gist.text and "°C" not in gist.text
    assert any("battery" in g.metadata.get("body", {}) for g in gists)
    found = memory.tools.search_gists("battery temperature motor warning", n_results=50)
    assert all(not set(h.layers) & body for h in found.hits)


# ---------------------------------------------------------------------- consolidation covers the whole bag
def test_final_consolidation_closes_the_last_visit(replays):
    summary, db = replays["db3"]
    (last_end,) = _rows(db, "SELECT MAX(time_end) FROM gists")[0]
    assert TRUTH["end"] - last_end < 60.0
    (left,) = _rows(db, "SELECT COUNT(*) FROM observations WHERE tier = 'short_term' AND gist_id IS NULL")[0]
    assert left < 0.05 * summary.observations  # only DBSCAN-style noise stays unsummarised

