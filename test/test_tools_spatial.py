"""spatial_query, locate, recall and get_current_context against known object positions."""

from __future__ import annotations

import math

import pytest

from emem_ros.geometry.uncertainty import COVERAGE
from test.support.scene import OBJECTS, ROOMS, add_entity, add_gist, scene_memory

BODY_LAYERS = ("battery", "cpu_temp")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    memory, clock, scene = scene_memory(tmp_path_factory.mktemp("spatial"))
    add_entity(memory, "red chair", "furniture", OBJECTS["red chair"][1], 300, scene.episodes["kitchen"].start,
               scene.episodes["kitchen"].end)
    add_entity(memory, "printer", "appliance", OBJECTS["printer"][1], 185, scene.episodes["office"].start,
               scene.episodes["office"].end)
    add_gist(memory, "the kitchen holds a red chair, a blue table and a coffee mug", (3.0, 3.0, 0.0), 2.5,
             scene.episodes["kitchen"].start, scene.episodes["kitchen"].end)
    yield memory, clock, scene
    memory.close()


def test_spatial_query_lists_what_is_near_nearest_first(world):
    memory, _, scene = world
    result = memory.tools.spatial_query(2.5, 3.0, radius=1.0)
    observed = [h for h in result.hits if h.kind == "observation"]
    texts = [h.text for h in observed]
    assert {"red chair", "blue table", "coffee mug"} <= set(texts)
    assert "refrigerator" not in texts and "green sofa" not in texts
    distances = [h.distance for h in observed]
    assert distances == sorted(distances)
    chair = next(h for h in observed if h.text == "red chair")
    assert chair.count == scene.detections["red chair"]
    assert len([t for t in texts if t == "red chair"]) == 1
    assert all(h.layer not in BODY_LAYERS and "battery" not in h.text for h in result.hits)


def test_spatial_query_time_window_and_layer(world):
    memory, _, scene = world
    later = memory.tools.spatial_query(2.5, 3.0, radius=1.5, time_after=scene.episodes["living room"].start)
    assert not [h for h in later.hits if h.kind == "observation"]
    cut = scene.episodes["kitchen"].start + 301.0
    chair = next(h for h in memory.tools.spatial_query(2.0, 3.0, radius=0.5, time_after=cut).hits
                 if h.text == "red chair")
    expected = memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations o JOIN texts t ON t.id = o.text_id"
        " WHERE t.text = 'red chair' AND o.stamp >= ?", (cut,)).fetchone()[0]
    assert chair.count == expected
    scene_only = memory.tools.spatial_query(3.0, 3.0, radius=2.0, layer="scene")
    assert scene_only.hits and all(h.layer == "scene" for h in scene_only.hits if h.kind == "observation")


def test_spatial_query_uses_height_when_given(world):
    memory, _, _ = world
    x, y, z = OBJECTS["coffee mug"][1]
    flat = [h.text for h in memory.tools.spatial_query(x, y, radius=1.0).hits]
    raised = [h.text for h in memory.tools.spatial_query(x, y, z, radius=1.0).hits]
    assert "red chair" in flat and "coffee mug" in flat
    assert raised and raised[0] == "coffee mug" and "red chair" not in raised


def test_spatial_query_fills_with_area_summaries(world):
    memory, _, _ = world
    result = memory.tools.spatial_query(3.0, 3.0, radius=0.3)
    assert any(h.kind == "gist" for h in result.hits)


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_locate_lands_within_a_metre_of_every_object(world, name):
    memory, _, _ = world
    result = memory.tools.locate(name)
    assert result.found
    truth = OBJECTS[name][1]
    assert math.dist(result.position[:2], truth[:2]) < 1.0, (name, result.position, truth)
    assert result.evidence[0].text == name
    assert result.radius < 1.5


def test_locate_is_precise_where_other_objects_are_close(world):
    memory, _, _ = world
    chair = memory.tools.locate("red chair")
    table = memory.tools.locate("blue table")
    assert math.dist(chair.position[:2], OBJECTS["red chair"][1][:2]) < 0.2
    assert math.dist(table.position[:2], OBJECTS["blue table"][1][:2]) < 0.2
    assert chair.confidence > 0.9


def test_locate_does_not_average_a_chair_with_an_often_seen_red_door(make_memory, clock):
    memory = make_memory()
    t = clock.now
    for i in range(20):
        memory.add("red chair", x=2.0, y=3.0, timestamp=t + i, layer_name="detections", source_type="perception")
    for i in range(2000):
        memory.add("red door", x=10.0 + 0.01 * (i % 7), y=-4.0, timestamp=t + i, layer_name="detections",
                   source_type="perception")
    memory.add("red chair next to the window", x=2.1, y=3.1, timestamp=t + 5, layer_name="scene")
    clock.now = t + 3000
    result = memory.tools.locate("red chair")
    assert math.dist(result.position[:2], (2.0, 3.0)) < 0.3
    assert all(math.dist(h.position[:2], (2.0, 3.0)) < 0.5 for h in result.evidence)


def test_locate_reports_other_places_instead_of_averaging(make_memory, clock):
    memory = make_memory()
    t = clock.now
    for i in range(30):
        memory.add("charging station", x=0.0, y=0.0, timestamp=t + i, source_type="perception")
    for i in range(10):
        memory.add("charging station", x=20.0, y=5.0, timestamp=t + 100 + i, source_type="perception")
    clock.now = t + 500
    result = memory.tools.locate("charging station")
    assert math.dist(result.position[:2], (0.0, 0.0)) < 0.3
    assert result.elsewhere and math.dist(result.elsewhere[0].position[:2], (20.0, 5.0)) < 0.3
    assert 0.5 < result.confidence < 1.0
    assert "Also seen elsewhere" in str(result)


def test_locate_a_room_from_captions_made_around_it(world):
    memory, _, _ = world
    result = memory.tools.locate("kitchen")
    assert math.dist(result.position[:2], ROOMS["kitchen"]) < 1.5


def test_locate_filters_and_failures(world, make_memory):
    memory, _, scene = world
    office_only = memory.tools.locate("chair", time_after=scene.episodes["office"].start)
    assert math.dist(office_only.position[:2], OBJECTS["office chair"][1][:2]) < 1.0
    unplaced = make_memory("unplaced.db")
    unplaced.add("the password is swordfish", layer_name="speech")
    result = unplaced.tools.locate("password")
    assert not result.found and "Could not locate" in str(result)
    assert result.evidence and result.evidence[0].text == "the password is swordfish"
    assert "Could not locate" in unplaced.locate("nothing like this at all")


def test_recall_gathers_the_surroundings(world):
    memory, _, _ = world
    result = memory.tools.recall("red chair")
    assert math.dist(result.center[:2], OBJECTS["red chair"][1][:2]) < 0.3
    assert result.radius >= 2.0
    nearby = {h.text for h in result.nearby}
    assert {"red chair", "blue table", "coffee mug"} <= nearby
    assert not nearby & {"green sofa", "laptop", "printer"}
    assert [h.text for h in result.entities] == ["red chair"]
    assert result.gists and "kitchen" in result.gists[0].text
    assert result.matches[0].text == "red chair"
    assert all(h.layer not in BODY_LAYERS for h in result.matches + result.nearby)
    assert "Nearby:" in str(result)
    wider = memory.tools.recall("red chair", radius_multiplier=20.0)
    assert wider.radius > result.radius


def test_recall_without_positions_still_answers(make_memory):
    memory = make_memory()
    memory.add("alice said the meeting moved to friday", layer_name="speech")
    result = memory.tools.recall("meeting friday")
    assert result.center is None and result.matches[0].text.startswith("alice said")
    assert "no position known" in str(result)


def test_current_context_from_the_last_pose(world):
    memory, _, scene = world
    context = memory.tools.get_current_context(radius=4.0)
    assert context.position is not None and "body reading" in context.position_source
    assert math.dist(context.position[:2], ROOMS["office"]) < 2.0
    assert {h.text for h in context.nearby} & {"laptop", "office chair", "printer", "red door"}
    assert all(h.layer not in BODY_LAYERS and "battery" not in h.text for h in context.nearby + context.recent)
    assert [h.text for h in context.entities] == ["printer"]
    assert context.recent and all(h.stamp >= scene.end - 300 for h in context.recent)
    assert context.body is not None and {r.layer for r in context.body.readings} == set(BODY_LAYERS)
    text = str(context)
    assert "Body status:" in text and "Recent (last 5 min)" in text


def test_current_context_uses_the_live_position(world):
    memory, _, _ = world
    try:
        memory.set_live_pose(lambda: (2.5, 3.0, 0.0))
        context = memory.tools.get_current_context(radius=1.0)
        assert context.position == (2.5, 3.0, 0.0) and context.position_source == "odometry"
        assert {"red chair", "blue table", "coffee mug"} <= {h.text for h in context.nearby}
        assert [h.text for h in context.entities] == ["red chair"]
        memory.set_live_pose(lambda: [13.0, 3.0])
        context = memory.tools.get_current_context(radius=2.5)
        assert context.position == (13.0, 3.0, 0.0)
        assert "green sofa" in {h.text for h in context.nearby}
    finally:
        memory.set_live_pose(None)


def test_current_context_of_an_empty_memory(make_memory):
    memory = make_memory()
    text = memory.get_current_context()
    assert "Position: unknown" in text and "Nothing observed in the last 5 min" in text
    episode = memory.start_episode("tidy up")
    assert f"Active episode: {episode} 'tidy up'" in memory.get_current_context()


def test_dense_areas_answer_like_a_full_scan(make_memory, clock):
    """Hundreds of places around the point: nearest-first reading and per-text seeks, checked by brute force."""
    import random

    from emem_ros.tools.aggregate import EAGER_PLACES, area_box

    memory = make_memory()
    rng = random.Random(5)
    t = clock.now
    truth = []
    for i in range(900):
        x, y = 100 + rng.uniform(-4.0, 4.0), 100 + rng.uniform(-4.0, 4.0)
        text = f"caption {i} of the busy corridor"
        memory.add(text, x=x, y=y, timestamp=t + i, layer_name="scene", source_type="perception")
        truth.append((math.hypot(x - 100, y - 100), text))
    for i in range(1500):
        memory.add(f"red chair variant {i}", x=float(i % 40), y=float(i // 40), timestamp=t + i,
                   layer_name="catalogue", source_type="perception")
    memory.add("a red chair near the corridor", x=101.0, y=101.5, timestamp=t + 2000, layer_name="detections",
               source_type="perception")
    clock.now = t + 3000
    memory.flush()
    assert memory.store.count_places_in(area_box((100.0, 100.0, 0.0), 5.0, 0.5)) > EAGER_PLACES
    found = memory.tools.semantic_search("red chair", near_x=100.0, near_y=100.0, spatial_radius=5.0)
    assert found.hits[0].text == "a red chair near the corridor"
    assert not [h for h in found.hits if "variant" in h.text or math.dist(h.position[:2], (100, 100)) > 5.0]
    nearest = memory.tools.spatial_query(100.0, 100.0, radius=5.0, n_results=8, layer="scene")
    assert [h.text for h in nearest.hits] == [text for _, text in sorted(truth)[:8]]
    anything = memory.tools.spatial_query(100.0, 100.0, radius=5.0, n_results=8)
    assert [h.text for h in anything.hits] == [text for _, text in sorted(truth)[:8]]
    chair = memory.tools.spatial_query(100.0, 100.0, radius=5.0, layer="detections")
    assert [h.text for h in chair.hits] == ["a red chair near the corridor"]
    recent = memory.tools.spatial_query(100.0, 100.0, radius=5.0, time_after=t + 850, n_results=60)
    expected = {text for d, text in truth if d <= 5.0 and int(text.split()[1]) >= 850} | \
        {"a red chair near the corridor"}
    assert {h.text for h in recent.hits} == expected


def test_locate_trusts_a_measured_object_position_over_where_the_robot_stood(make_memory, clock):
    from emem_ros.ingest.drafts import ObservationDraft

    memory = make_memory()
    t0 = clock.now - 600
    for i in range(40):  # a 2-D detector sees the mug from the doorway, 3 m away, again and again
        memory.add_draft(ObservationDraft("red mug", t0 + i, "detections"), robot_position=(4.0, 0.0, 0.0))
    for i in range(5):  # a 3-D detector measured it on the table a few times
        memory.add_draft(ObservationDraft("red mug", t0 + 100 + i, "detections_3d", position=(1.0, 0.0, 0.8)))
    memory.flush()
    result = memory.tools.locate("red mug")
    assert math.dist(result.position[:2], (1.0, 0.0)) < 0.5
    assert any("measured object positions" in note and "detections" in note for note in result.notes)
    assert {h.layer for h in result.evidence} == {"detections_3d"}


def test_locate_says_so_when_only_the_robot_pose_is_known(make_memory, clock):
    from emem_ros.ingest.drafts import ObservationDraft

    memory = make_memory()
    for i in range(10):
        memory.add_draft(ObservationDraft("blue cup", clock.now - 100 + i, "detections"),
                         robot_position=(4.0, 2.0, 0.0))
    memory.flush()
    result = memory.tools.locate("blue cup")
    assert math.dist(result.position[:2], (4.0, 2.0)) < 0.5
    assert any("where the robot stood" in note for note in result.notes)
    assert "where the robot stood" in str(result)


def _see(memory, text, xy, start, n, layer="detections"):
    for i in range(n):
        memory.add(text, x=xy[0] + 0.05 * (i % 3), y=xy[1], timestamp=start + i, layer_name=layer,
                   source_type="perception")


def test_locate_in_a_time_window_answers_from_what_was_seen_in_it(make_memory, clock):
    """At A, then at B (inside the window), then at A again: whole-history places would say A with 20."""
    memory = make_memory()
    t = clock.now - 10_000
    _see(memory, "green bottle", (1.0, 1.0), t, 10)
    _see(memory, "green bottle", (8.0, 8.0), t + 1000, 10)
    _see(memory, "green bottle", (1.0, 1.0), t + 2000, 10)
    memory.flush()
    result = memory.tools.locate("green bottle", time_after=t + 900, time_before=t + 1100)
    assert math.dist(result.position[:2], (8.0, 8.0)) < 0.2 and result.count == 10
    assert result.elsewhere == [] and result.confidence == COVERAGE  # all the evidence points here
    assert result.evidence[0].count == 10 and t + 1000 <= result.evidence[0].first_stamp <= result.evidence[0].stamp
    # A window that cuts A's first stay: only its sightings inside count.
    partial = memory.tools.locate("green bottle", time_after=t + 6, time_before=t + 1100)
    assert math.dist(partial.position[:2], (8.0, 8.0)) < 0.2 and partial.count == 10
    assert [p.count for p in partial.elsewhere] == [4]
    assert math.dist(partial.elsewhere[0].position[:2], (1.0, 1.0)) < 0.2
    assert memory.tools.locate("green bottle", time_after=t + 2000).count == 10


def test_locate_follows_an_object_that_moved(make_memory, clock):
    """More sightings at the old place do not outvote the newer place; the old one is listed as elsewhere."""
    memory = make_memory()
    now = clock.now
    _see(memory, "red mug", (1.0, 1.0), now - 86_400, 20)  # yesterday, on the table
    _see(memory, "red mug", (6.0, 3.0), now - 3_600, 10)  # an hour ago, by the sink
    memory.flush()
    result = memory.tools.locate("red mug")
    assert math.dist(result.position[:2], (6.0, 3.0)) < 0.2 and result.count == 10
    assert math.dist(result.elsewhere[0].position[:2], (1.0, 1.0)) < 0.2 and result.elsewhere[0].count == 20
    # One newest glance elsewhere does not outweigh a place seen many times just before it.
    _see(memory, "charging dock", (0.0, 5.0), now - 600, 30)
    _see(memory, "charging dock", (9.0, 9.0), now - 10, 1)
    memory.flush()
    dock = memory.tools.locate("charging dock")
    assert math.dist(dock.position[:2], (0.0, 5.0)) < 0.2 and dock.elsewhere[0].count == 1
