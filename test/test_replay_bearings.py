"""The camera-only bag (no 3-D layer) replayed end to end: where things are, from bearings alone.

The robot has a plain camera (2-D detections, CameraInfo) and odometry. Its
detections become rays; ``locate`` and the entities triangulate them. Checked
against ``rosbags/ground_truth_camera_only.json``: the error, whether every
stated radius holds the true position as often as it claims (calibration),
and that the two chairs (one class, two rooms) are both reported. The same
bag without its camera model (detections stored at the robot's pose only)
must still be honest: every radius holds the object.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import pytest

pytest.importorskip("rosbags")

from rosbags.highlevel import AnyReader

from emem_ros.cli.common import open_memory
from emem_ros.replay import ReplayOptions, replay_bag
from emem_ros.ros.camera import CameraSpec
from emem_ros.ros.params import load_params_yaml
from test.support.bags import BAGS, REPO

BAG = BAGS / "camera_only_mcap"
TRUTH = json.loads((BAGS / "ground_truth_camera_only.json").read_text(encoding="utf-8"))
NAMES = sorted({o["name"] for o in TRUTH["objects"]})
WINDOWS = [(TRUTH["start"] + t, TRUTH["start"] + t + 120.0) for t in range(0, int(TRUTH["end"] - TRUTH["start"]), 60)]


def params(camera: bool = True):
    values = load_params_yaml(REPO / "config" / "memory.yaml")
    values = dataclasses.replace(values, embedding_backend="hashing", embedding_model="")
    if not camera:
        values = dataclasses.replace(values, layers=[dataclasses.replace(s, camera=CameraSpec())
                                                     for s in values.layers])
    return values


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """{'camera': (summary, memory), 'pose only': (summary, memory)}."""
    out = {}
    for name, camera in (("camera", True), ("pose only", False)):
        db = tmp_path_factory.mktemp(name.replace(" ", "_")) / "memory.db"
        summary = replay_bag(BAG, params(camera), ReplayOptions(db_path=str(db), progress=False))
        out[name] = (summary, open_memory(db))
    yield out
    for _, memory in out.values():
        memory.close()


def instances(name: str) -> list[dict]:
    return [o for o in TRUTH["objects"] if o["name"] == name]


def nearest_error(name: str, position) -> float:
    return min(math.dist(o["position"][:2], position[:2]) for o in instances(name))


def answers(memory, windowed: bool = True):
    """(name, result) for the whole bag and every two-minute window its own label was seen in."""
    out = []
    for name in NAMES:
        for after, before in [(None, None)] + (WINDOWS if windowed else []):
            result = memory.tools.locate(name, time_after=after, time_before=before)
            if result.position is not None and result.evidence and result.evidence[0].text == name:
                out.append((name, result))
    return out


# ---------------------------------------------------------------------- the replay
def test_the_camera_only_bag_has_no_3d_layer_and_most_detections_get_a_ray(replayed):
    summary, _ = replayed["camera"]
    with AnyReader([BAG]) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
    assert "/detections_3d" not in counts and summary.missing_topics["detections_3d"] == "/detections_3d"
    assert summary.camera_infos == {"/camera/camera_info": counts["/camera/camera_info"]}
    assert summary.messages_read == sum(counts.values())
    detections = summary.layer("detections")
    assert detections.camera is not None and detections.camera.fx == TRUTH["camera"]["fx"]
    assert detections.bearings + sum(detections.without_bearing.values()) == detections.observations
    assert detections.bearings >= 0.7 * detections.observations  # the rest: boxes cut by the border (~23 %)
    assert set(detections.without_bearing) <= {
        "the box is cut by the image border (the object's centre may lie beyond it)",
        "the box centre lies outside the image"}
    assert "bearings  detections:" in summary.render()


# ---------------------------------------------------------------------- locate
def test_bearings_place_each_object_seen_from_three_poses_within_half_a_metre(replayed):
    _, memory = replayed["camera"]
    errors = []
    for name in NAMES:
        result = memory.tools.locate(name)
        assert result.source == "bearings", (name, str(result))
        assert any(n.startswith("placed by bearings") for n in result.notes)
        if min(o["poses_2d"] for o in instances(name)) >= 3:
            errors.append(nearest_error(name, result.position))
    assert len(errors) >= 10 and statistics.median(errors) <= 0.5
    assert max(errors) <= 1.0


def test_both_chairs_are_reported_best_first_the_other_elsewhere(replayed):
    _, memory = replayed["camera"]
    result = memory.tools.locate("chair")
    others = [p for p in result.elsewhere if p.label == "chair"]
    assert others and others[0].source == "bearings" and others[0].poses >= 2
    for chair in instances("chair"):
        assert any(math.dist(chair["position"][:2], spot[:2]) <= radius
                   for spot, radius in [(result.position, result.radius)] + [(p.position, p.radius) for p in others])
    assert {round(p.weight + result.confidence / 0.95, 2) for p in others[:1]} == {1.0}  # shares add up
    assert "Also seen elsewhere:" in str(result) and "bearings from" in str(result)


@pytest.mark.parametrize("case", ["camera", "pose only"])
def test_stated_radii_hold_the_truth_at_least_as_often_as_the_confidence_says(replayed, case):
    """Calibration per evidence kind, over the whole bag and two-minute windows (less evidence each)."""
    _, memory = replayed[case]
    by_kind: dict[str, list[tuple[bool, float]]] = {}
    for name, result in answers(memory):
        hit = nearest_error(name, result.position) <= result.radius
        by_kind.setdefault(result.source, []).append((hit, result.confidence))
    expected = {"bearings", "ray"} if case == "camera" else {"robot pose"}
    assert expected <= set(by_kind), by_kind.keys()
    for kind, rows in by_kind.items():
        share = sum(hit for hit, _ in rows) / len(rows)
        stated = statistics.fmean(c for _, c in rows)
        assert share >= 0.9 and share >= stated - 0.02, (kind, share, stated, len(rows))


def test_without_a_camera_model_the_answer_says_the_view_range_and_covers_it(replayed):
    _, memory = replayed["pose only"]
    result = memory.tools.locate("red mug")
    assert result.source == "robot pose" and result.radius > 2.0
    assert nearest_error("red mug", result.position) <= result.radius
    assert any("may be up to 6" in n for n in result.notes)


def test_a_window_seen_from_one_spot_reads_as_a_direction_and_a_range(replayed):
    _, memory = replayed["camera"]
    single = [(name, r) for name, r in answers(memory) if r.source == "ray"]
    assert single
    name, result = single[0]
    text = str(result)
    assert "was seen from one spot only" in text and "looking" in text and " m away" in text
    assert result.segment is not None and result.segment.far == pytest.approx(6.0)
    assert nearest_error(name, result.position) <= result.radius


# ---------------------------------------------------------------------- entities
@pytest.mark.parametrize("name", NAMES)
def test_each_object_is_one_entity_placed_by_bearings(replayed, name):
    _, memory = replayed["camera"]
    rows = memory.store.reader().execute(
        "SELECT x, y, spread, metadata FROM entities WHERE name = ?", (name,)).fetchall()
    assert len(rows) == len(instances(name))
    for thing in instances(name):
        x, y, spread, meta = min(rows, key=lambda r: math.dist((r[0], r[1]), thing["position"][:2]))
        meta = json.loads(meta)
        error = math.dist((x, y), thing["position"][:2])
        assert meta["position_source"] == "bearings" and meta["poses"] >= 2 and meta["rays"]
        assert error <= meta["radius"] and error < 1.0, (name, error, meta["radius"])
        assert 0.0 < spread < meta["radius"]
    found = memory.tools.entity_query(name=name, n_results=10)
    assert len([h for h in found.hits if h.text == name]) == len(instances(name))


def test_entities_of_robot_poses_only_state_a_radius_that_holds_the_object(replayed):
    _, memory = replayed["pose only"]
    rows = memory.store.reader().execute("SELECT name, x, y, metadata FROM entities").fetchall()
    for thing in TRUTH["objects"]:
        mine = [(x, y, json.loads(meta)) for name, x, y, meta in rows if name == thing["name"]]
        x, y, meta = min(mine, key=lambda e: math.dist(e[:2], thing["position"][:2]))
        assert meta["position_source"] == "robot" and meta["view_range"] == 6.0
        assert math.dist((x, y), thing["position"][:2]) <= meta["radius"], (thing["name"], meta["radius"])
