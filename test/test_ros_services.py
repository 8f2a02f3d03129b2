"""ROS service handlers (emem_ros/ros/services.py) on a real memory, with rosbags-built srv parts.

Requests are built the way a ROS caller gets them (rosidl defaults: 0.0,
'' and the .srv's own defaults), responses are checked field by field with
rclpy's setter rules (test/support/ros_messages.py), and the typed fields are
compared with the ground truth of test/support/scene.py.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("rosbags.typesys")

from emem_ros.ros import services
from emem_ros.ros.services import SERVICES, SERVICES_BY_NAME, handle, to_jsonable
from test.support.ros_messages import InterfaceFactory
from test.support.scene import OBJECTS, START, add_entity, add_gist, scene_memory

ROOT = Path(__file__).resolve().parents[1]
NAN = math.nan
GIST_TEXT = "kitchen: red chair, blue table, coffee mug"


@pytest.fixture(scope="module")
def make() -> InterfaceFactory:
    return InterfaceFactory()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    memory, clock, scene = scene_memory(tmp_path_factory.mktemp("services"), steps_per_room=100)
    gist = add_gist(memory, GIST_TEXT, (3.0, 3.0, 0.0), 2.0, START, START + 200)
    entity = add_entity(memory, "red chair", "furniture", (2.0, 3.0, 0.0), 40, START, START + 200)
    yield SimpleNamespace(memory=memory, clock=clock, scene=scene, gist=gist, entity=entity)
    memory.close()


@pytest.fixture
def call(world, make):
    """call(service, **request fields) -> the filled response, checked like rclpy would."""

    def run(service: str, **fields):
        srv = SERVICES_BY_NAME[service].srv_name
        response = handle(world.memory, service, make.request(srv, **fields), make.response(srv), make)
        make.check(response)
        if not response.success:
            assert response.message and response.text.startswith(("Error: ", response.message[:10]))
        return response

    return run


def near(point, expected, tol=0.25) -> bool:
    return math.hypot(point.x - expected[0], point.y - expected[1]) <= tol


def answer_lines(text: str) -> list[str]:
    """The rendering without a query-cache note (a repeated call may be answered from the cache)."""
    return [line for line in text.splitlines() if "cache" not in line]


def seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


# ---------------------------------------------------------------------- the table
def test_one_service_per_srv_file_and_registered_tool(world):
    assert sorted(s.srv_name for s in SERVICES) == sorted(p.stem for p in (ROOT / "srv").glob("*.srv"))
    assert len(SERVICES_BY_NAME) == len(SERVICES)
    registered = set(world.memory.tools.registry.names)
    for spec in SERVICES:
        assert spec.srv_type == f"emem_ros/srv/{spec.srv_name}"
        if spec.name not in ("call_tool", "list_tools"):
            offered = spec.tool in registered or not world.memory.tools.declared[spec.tool].llm  # forget: ROS only
            assert spec.tool == spec.name and offered, spec.name
    declared = world.memory.tools.declared
    for spec in SERVICES:  # derived from the declarations: each names the .srv of its service
        if spec.name not in ("call_tool", "list_tools"):
            assert declared[spec.tool].srv == spec.srv_name, spec.name


# ---------------------------------------------------------------------- semantic_search
def test_semantic_search_fills_typed_hits(call, world):
    res = call("semantic_search", query="red chair")
    assert res.success and res.message == ""
    top = res.hits[0]
    assert (top.kind, top.text, top.layer, top.source_type) == ("observation", "red chair", "detections", "perception")
    assert top.has_position and near(top.position, OBJECTS["red chair"][1]) and top.frame_id == "map"
    assert top.count > 1 and top.episode_id == world.scene.episodes["kitchen"].id
    assert world.scene.episodes["kitchen"].start <= seconds(top.stamp) <= world.scene.episodes["kitchen"].end
    assert 0.0 < top.score <= 1.0
    extra = json.loads(top.metadata_json)
    assert extra["confidence"] == pytest.approx(0.9) and extra["first_seen"] <= seconds(top.stamp)
    gists = [h for h in res.hits if h.kind == "gist"]
    assert gists and gists[0].text == GIST_TEXT and gists[0].source_type == "" and gists[0].has_position
    # The text is the tool's own rendering of the same call.
    assert answer_lines(res.text) == answer_lines(str(world.memory.tools.semantic_search("red chair")))


def test_semantic_search_unset_values_mean_no_filter(call):
    fresh = call("semantic_search", query="red chair")  # near 0.0/0.0, radius 0: a fresh request
    explicit = call("semantic_search", query="red chair", near_x=NAN, near_y=NAN, spatial_radius=NAN)
    assert [h.id for h in fresh.hits] == [h.id for h in explicit.hits]
    assert len(fresh.hits) > 1 and not fresh.text.startswith("Nothing")


def test_semantic_search_filters_are_honoured(call, world):
    anywhere = call("semantic_search", query="sofa chair", n_results=20)
    placed = call("semantic_search", query="sofa chair", near_x=13.0, near_y=3.0, spatial_radius=2.5, n_results=20)
    assert "red chair" in {h.text for h in anywhere.hits}
    assert "green sofa" in {h.text for h in placed.hits} and "red chair" not in {h.text for h in placed.hits}
    assert all(math.hypot(h.position.x - 13.0, h.position.y - 3.0) <= 2.5 + 0.1
               for h in placed.hits if h.kind == "observation")
    scene = call("semantic_search", query="kitchen", layer="scene", n_results=3)
    assert 0 < len(scene.hits) <= 3 and {h.layer for h in scene.hits if h.kind == "observation"} == {"scene"}
    office = world.scene.episodes["office"].id
    in_episode = call("semantic_search", query="chair", episode_id=office)
    assert in_episode.hits and {h.episode_id for h in in_episode.hits if h.kind == "observation"} == {office}
    early = call("semantic_search", query="chair", time_before=str(START + 100))
    assert early.hits and all(seconds(h.stamp) <= START + 100 + 1e-6 for h in early.hits if h.kind == "observation")


@pytest.mark.parametrize("fields, words", [
    ({"query": ""}, "query"),
    ({"query": "chair", "time_after": "the day before yesterday-ish"}, "time_after"),
    ({"query": "chair", "episode_id": "ep-99"}, "ep-99"),
    ({"query": "chair", "episode_id": "obs-3"}, "episode"),
    ({"query": "chair", "near_x": 2.0, "near_y": NAN}, "near_y"),
    ({"query": "chair", "near_x": math.inf, "near_y": 1.0}, "finite"),
    ({"query": "chair", "time_after": "-1m", "time_before": "-2h"}, "swap"),
])
def test_semantic_search_bad_input_is_a_plain_failure(call, fields, words):
    res = call("semantic_search", **fields)
    assert not res.success and words in res.message and res.hits == []
    assert res.text == f"Error: {res.message}"


# ---------------------------------------------------------------------- spatial / temporal
def test_spatial_query_around_a_point(call):
    res = call("spatial_query", x=2.0, y=3.0)  # radius 0 = the tool default (2 m)
    assert res.success and res.hits
    distances = [json.loads(h.metadata_json)["distance"] for h in res.hits if h.kind == "observation"]
    assert distances == sorted(distances) and max(distances) <= 2.0 + 1e-6
    assert "red chair" in {h.text for h in res.hits}
    wide = call("spatial_query", x=2.0, y=3.0, radius=6.0, n_results=50)
    assert len(wide.hits) > len(res.hits)
    assert not call("spatial_query", x=NAN, y=3.0).success


def test_temporal_query_window_and_order(call, world):
    now = world.memory.now()
    recent = call("temporal_query", last_n_minutes=2.0)
    assert recent.success and recent.hits
    assert all(seconds(h.stamp) >= now - 120 - 1e-6 for h in recent.hits if h.kind == "observation")
    stamps = [seconds(h.stamp) for h in recent.hits]
    assert stamps == sorted(stamps, reverse=True)  # '' = newest first
    oldest = call("temporal_query", order="oldest", n_results=5)
    first_seen = [json.loads(h.metadata_json)["first_seen"] for h in oldest.hits]
    assert len(first_seen) == 5 and first_seen == sorted(first_seen) and first_seen[0] < START + 10
    bad = call("temporal_query", order="sideways")
    assert not bad.success and "order" in bad.message


# ---------------------------------------------------------------------- episodes, context, gists, entities
def test_episode_summary_episodes(call, world):
    default = call("episode_summary")  # last_n 0 = the tool default: the last episode
    assert [e.id for e in default.episodes] == [world.scene.episodes["office"].id]
    res = call("episode_summary", last_n=3)
    ids = [world.scene.episodes[r].id for r in ("office", "living room", "kitchen")]
    assert [e.id for e in res.episodes] == ids
    office = res.episodes[0]
    assert (office.name, office.status, office.goal) == ("office patrol", "completed", "check the office")
    assert office.previous_id == ids[1] and office.parent_id == "" and office.success == -1
    assert seconds(office.start) == pytest.approx(world.scene.episodes["office"].start)
    assert seconds(office.end) == pytest.approx(world.scene.episodes["office"].end)
    assert office.observation_count > 100
    unknown = call("episode_summary", episode_id="ep-42")
    assert not unknown.success and "ep-42" in unknown.message


def test_get_current_context(call, world):
    res = call("get_current_context")
    expected = world.memory.tools.get_current_context()
    assert res.success and res.has_position
    assert (res.position.point.x, res.position.point.y) == pytest.approx(expected.position[:2])
    assert res.position.header.frame_id == "map" and res.position_source == expected.position_source
    assert len(res.nearby) == len(expected.nearby) and len(res.recent) == len(expected.recent)
    assert {b.layer for b in res.body} == {"battery", "cpu_temp"}
    assert answer_lines(res.text) == answer_lines(str(expected))


def test_search_gists_and_entity_query(call, world):
    gists = call("search_gists", query="kitchen red chair")
    gist = next(g for g in gists.gists if g.id == f"gist-{world.gist}")
    assert gist.text == GIST_TEXT and (gist.centroid.x, gist.centroid.y) == (3.0, 3.0) and gist.radius == 2.0
    assert seconds(gist.time_start) == START and seconds(gist.time_end) == START + 200
    assert list(gist.layers) == ["detections"] and gist.episode_id == ""
    entities = call("entity_query", name="chair")  # fresh request: no place filter
    entity = entities.entities[0]
    assert (entity.id, entity.name, entity.entity_type) == (f"ent-{world.entity}", "red chair", "furniture")
    assert (entity.position.x, entity.position.y, entity.spread) == (2.0, 3.0, 0.2)
    assert (entity.sightings, entity.confidence, entity.layer, entity.frame_id) == (40, 0.9, "detections", "map")
    assert seconds(entity.first_seen) == START and seconds(entity.last_seen) == START + 200
    far = call("entity_query", name="chair", near_x=30.0, near_y=30.0, spatial_radius=1.0)
    assert far.success and far.entities == []


# ---------------------------------------------------------------------- locate, recall, body
def test_locate_found_and_not_found(call):
    res = call("locate", concept="coffee mug")
    assert res.success and res.found and near(res.location.point, OBJECTS["coffee mug"][1], 0.3)
    assert res.location.header.frame_id == "map" and res.location.header.stamp.sec > 0
    assert 0 < res.radius < 2.0 and res.hits and res.hits[0].text == "coffee mug"
    missing = call("locate", concept="coffee mug", layer="no_such_layer")
    assert missing.success and not missing.found and math.isnan(missing.radius)
    assert missing.location.header.frame_id == "" and "no_such_layer" in missing.text
    assert not call("locate", concept="").success


def test_recall_gathers_surroundings(call):
    res = call("recall", query="red chair")
    assert res.success and res.found and near(res.center.point, OBJECTS["red chair"][1], 0.3)
    assert res.radius > 0 and res.hits and res.hits[0].text == "red chair"
    kinds = {h.kind for h in res.nearby}
    assert "observation" in kinds and {"gist", "entity"} & kinds
    assert not call("recall", query="red chair", radius_multiplier=-1.0).success


def test_body_status_readings(call, world):
    everything = call("body_status")
    readings = {r.layer: r for r in everything.readings}
    assert set(readings) == {"battery", "cpu_temp"}
    last_stamp, last_percent = world.scene.battery[-1]
    assert readings["battery"].value == pytest.approx(last_percent / 100.0)
    assert seconds(readings["battery"].stamp) == last_stamp and readings["battery"].has_position
    assert readings["cpu_temp"].value == 61.0 and not readings["cpu_temp"].has_position
    only = call("body_status", layers=["battery"])
    assert [r.layer for r in only.readings] == ["battery"]


def test_body_status_crossings_and_past_readings(call, world):
    battery = world.scene.battery
    index = next(i for i, (_, pct) in enumerate(battery) if pct < 80)
    res = call("body_status", layers=["battery"], below=80.0)  # above stays 0.0, as in a fresh request
    assert res.success and res.readings == [] and len(res.crossings) == 1
    (crossing,) = res.crossings
    assert (crossing.layer, crossing.direction, crossing.threshold, crossing.unit) == ("battery", "below", 80.0, "%")
    assert crossing.has_before and seconds(crossing.before.stamp) == battery[index - 1][0]
    assert seconds(crossing.after.stamp) == battery[index][0] and crossing.after.has_position
    assert crossing.before_level >= 80.0 > crossing.after_level == pytest.approx(battery[index][1])
    assert crossing.after.value == pytest.approx(battery[index][1] / 100) and "fell below 80%" in res.text

    fresh = call("body_status")  # below = above = 0: no crossing search, the latest readings
    assert fresh.crossings == [] and {r.layer for r in fresh.readings} == {"battery", "cpu_temp"}
    zero = call("body_status", layers=["battery"], below=0.0, above=NAN)  # a real 0 next to a NaN
    assert zero.success and zero.crossings == [] and zero.text.startswith("No body reading crossed below 0%")
    hot = call("body_status", layers=["cpu_temp"], above=60.0)
    (first,) = hot.crossings
    assert not first.has_before and math.isnan(first.before_level) and first.before.text == ""

    at = battery[20][0] + 1.0
    past = call("body_status", layers=["battery"], at_time=str(at))
    (reading,) = past.readings
    assert seconds(reading.stamp) == battery[20][0] and past.text.startswith("Body status at ")
    window = call("body_status", layers=["battery"], below=80.0, time_after=str(battery[index][0] + 5), n_results=3)
    assert window.success and window.crossings == [] and "already below 80%" in window.text

    both = call("body_status", below=30.0, above=70.0)
    assert not both.success and "either below or above" in both.message
    bad_time = call("body_status", at_time="when the cows come home")
    assert not bad_time.success and "at_time" in bad_time.message
    lonely = call("body_status", time_after="-1h")
    assert not lonely.success and "below/above" in lonely.message


# ---------------------------------------------------------------------- write actions
def test_store_specific_memory_positions(call, world):
    fresh = call("store_specific_memory", text="the charger is behind the sofa")
    assert fresh.success and re.fullmatch(r"obs-\d+", fresh.id)
    assert world.memory.get_observation(fresh.id).position is None  # 0/0/0 of a fresh request = no position
    placed = call("store_specific_memory", text="spill near the sink", x=4.0, y=0.5, layer_name="notes",
                  metadata_json='{"source": "operator"}')
    stored = world.memory.get_observation(placed.id)
    assert stored.position == (4.0, 0.5, 0.0) and stored.layer == "notes" and stored.source_type == "manual"
    assert stored.metadata == {"source": "operator"}
    assert world.memory.get_observation(call("store_specific_memory", text="x", x=NAN, y=NAN).id).position is None
    origin = call("store_specific_memory", text="the dock is at the origin", x=0.0, y=0.0, z=0.01)
    assert world.memory.get_observation(origin.id).position == (0.0, 0.0, 0.01)
    found = call("semantic_search", query="spill near the sink")
    assert found.hits[0].id == placed.id and found.hits[0].source_type == "manual"


def test_store_specific_memory_says_what_the_position_is(call, world):
    """position_is / view_range: empty and 0 (a fresh request) are 'not said'; said, they are stored."""
    seen = call("store_specific_memory", text="a mug seen from the doorway", x=4.0, y=0.5, layer_name="sightings",
                position_is="robot", view_range=3.0)
    assert seen.success, seen.message
    assert world.memory.get_observation(seen.id).metadata == {"position_source": "odometry", "view_range": 3.0}
    told = call("store_specific_memory", text="the charger is at the wall", x=1.0, y=0.5, layer_name="places",
                position_is="thing")
    assert world.memory.get_observation(told.id).metadata == {"position_source": "object"}
    unsaid = call("store_specific_memory", text="a note", x=1.0, y=0.5, layer_name="places2")
    assert world.memory.get_observation(unsaid.id).metadata == {}
    wrong = call("store_specific_memory", text="a note", x=1.0, y=0.5, position_is="nearby")
    assert not wrong.success and "thing, robot" in wrong.message


@pytest.mark.parametrize("fields, words", [
    ({"text": ""}, "text"),
    ({"text": "a note", "metadata_json": "{not json"}, "metadata_json"),
    ({"text": "a note", "metadata_json": "[1, 2]"}, "JSON object"),
    ({"text": "a note", "layer_name": "battery"}, "body"),
])
def test_store_specific_memory_refuses_bad_input(call, world, fields, words):
    before = world.memory.store.counts()["observations"]
    res = call("store_specific_memory", **fields)
    assert not res.success and words in res.message and res.id == ""
    assert world.memory.store.counts()["observations"] == before


def test_episode_actions(call, world):
    assert not call("start_episode", name="sub", parent_episode_id="ep-99").success
    assert not call("start_episode", name="").success
    started = call("start_episode", name="fetch the mug", goal="mug on the table")
    assert started.success and re.fullmatch(r"ep-\d+", started.episode_id)
    assert world.memory.active_episode_id == started.episode_id
    assert not call("end_episode", success=5).success and world.memory.active_episode_id == started.episode_id
    ended = call("end_episode", result="mug delivered", success=1)  # consolidate defaults to true
    assert ended.success and ended.episode_id == started.episode_id
    episode = world.memory.store.get_episode(int(started.episode_id.split("-")[1]))
    assert (episode.result, episode.success, episode.goal) == ("mug delivered", True, "mug on the table")
    again = call("end_episode")
    assert not again.success and "No episode is active" in again.message
    assert again.text == again.message and again.episode_id == ""


# ---------------------------------------------------------------------- through the registry
def test_experience_services(call, world):
    first = call("record_experience", goal="grasp the mug", action="top grasp", result="slipped", success=0,
                 tags=["grasping", "kitchen"], metadata_json='{"gripper": "parallel"}')
    assert first.success and re.fullmatch(r"[0-9a-f]{64}", first.id) and first.id[:12] in first.text
    again = call("record_experience", goal="grasp the mug", action="top grasp", result="slipped", success=0,
                 tags=["grasping", "kitchen"], metadata_json='{"gripper": "parallel"}')
    assert again.id == first.id
    found = call("find_experiences", query="grasp mug")
    records = json.loads(found.result_json)
    assert found.success and records[0]["id"] == first.id and records[0]["success"] is False
    assert records[0]["tags"] == ["grasping", "kitchen"] and "grasp the mug" in found.text
    successes = json.loads(call("find_experiences", query="grasp mug", success=1).result_json)
    assert first.id not in {r["id"] for r in successes}
    assert not call("record_experience", goal="").success
    assert not call("record_experience", goal="x", success=2).success


def test_memory_stats(call, world):
    res = call("memory_stats")
    stats = json.loads(res.stats_json)
    assert res.success and res.text
    assert stats["counts"]["observations"] == world.memory.store.counts()["observations"]


def test_call_tool(call, world):
    res = call("call_tool", tool="locate", arguments_json='{"concept": "sink"}')
    result = json.loads(res.result_json)
    assert res.success and result["position"][:2] == pytest.approx(OBJECTS["sink"][1][:2], abs=0.3)
    assert answer_lines(res.text) == answer_lines(str(world.memory.tools.locate("sink")))
    assert call("call_tool", tool="memory_stats").success  # '' arguments = none
    typo = call("call_tool", tool="lcoate", arguments_json='{"concept": "sink"}')
    assert not typo.success and "locate" in typo.message and typo.result_json == ""
    for arguments, words in (('{"concept": ', "not valid JSON"), ('{"concpet": "sink"}', "concept"),
                             ("[1]", "JSON object")):
        bad = call("call_tool", tool="locate", arguments_json=arguments)
        assert not bad.success and words in bad.message
    nameless = call("call_tool", tool=" ")
    assert not nameless.success and "semantic_search" in nameless.message
    refused = call("call_tool", tool="end_episode")
    assert not refused.success and "No episode is active" in refused.message


def test_list_tools_answers_the_tool_definitions_and_each_runs_through_call_tool(call, world, make):
    res = call("list_tools")
    listed = json.loads(res.tools_json)
    assert res.success and listed == json.loads(json.dumps(world.memory.get_tool_definitions()))
    names = [d["function"]["name"] for d in listed]
    assert res.text.splitlines() == names and {"locate", "store_specific_memory"} <= set(names)
    read_only = json.loads(call("list_tools", read_only=True).tools_json)
    assert read_only == json.loads(json.dumps(world.memory.get_tool_definitions(include_actions=False)))
    assert "store_specific_memory" not in {d["function"]["name"] for d in read_only} and len(read_only) < len(listed)
    for definition in read_only:  # what list_tools offers, call_tool runs (read tools: no state changed)
        name = definition["function"]["name"]
        answer = call("call_tool", tool=name, arguments_json="{}")
        assert answer.success or "no tool named" not in answer.message, (name, answer.message)
    closed = handle(None, "list_tools", make.request("ListTools"), make.response("ListTools"), make)
    assert not closed.success and "not open" in closed.message and closed.tools_json == ""


def test_call_tool_reaches_memfs(call, world):
    wrote = call("call_tool", tool="fs_write", arguments_json=json.dumps(
        {"path": "/memory/ros.md", "content": "written through ROS", "agent_id": "ros_planner"}))
    assert wrote.success and "/memory/ros.md v1" in wrote.text
    read = call("call_tool", tool="fs_read", arguments_json='{"path": "/memory/ros.md"}')
    assert read.success and "1\twritten through ROS" in read.text
    refused = call("call_tool", tool="fs_write", arguments_json='{"path": "/raw/x.md", "content": "x"}')
    assert not refused.success and "/memory/" in refused.message


# ---------------------------------------------------------------------- nothing escapes
def test_handler_never_raises(world, make, monkeypatch):
    srv = "SemanticSearch"
    unknown = handle(world.memory, "no_such_service", make.request(srv, query="x"), make.response(srv), make)
    assert not unknown.success and "no_such_service" in unknown.message
    broken_request = handle(world.memory, "semantic_search", SimpleNamespace(query="x"), make.response(srv), make)
    assert not broken_request.success and broken_request.message

    def explode(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(world.memory.tools, "call", explode)
    res = handle(world.memory, "semantic_search", make.request(srv, query="x"), make.response(srv), make)
    assert not res.success and "failed unexpectedly" in res.message and "disk on fire" in res.message


def test_closed_or_missing_memory_answers_in_words(make, tmp_path):
    from emem_ros import Memory, MemoryConfig
    from emem_ros.embeddings import HashingEmbeddingProvider

    memory = Memory(config=MemoryConfig(db_path=str(tmp_path / "m.db"), flush_interval=0.0,
                                        index_save_interval=0.0), embedding_provider=HashingEmbeddingProvider())
    memory.close()
    for target in (memory, None):
        res = handle(target, "body_status", make.request("BodyStatus"), make.response("BodyStatus"), make)
        assert not res.success and "not open" in res.message


def test_to_jsonable_is_strict_json():
    from emem_ros.tools.results import Hit

    value = to_jsonable(Hit(id="obs-1", kind="observation", text="x", position=(1.0, 2.0, 0.0), score=math.nan))
    assert value["position"] == [1.0, 2.0, 0.0] and value["score"] is None
    json.dumps(value, allow_nan=False)
    assert to_jsonable("plain text") == {"text": "plain text"}
    assert services._place(0.0, 0.0, 0.0) == {"near_x": None, "near_y": None, "spatial_radius": None}
    assert services._place(0.0, 0.0, 2.0) == {"near_x": 0.0, "near_y": 0.0, "spatial_radius": 2.0}


def test_forget_service_dry_run_then_forget(call, world):
    noted = call("store_specific_memory", text="a visitor in a green qzxhat9 at the door")
    dry = call("forget", match="qzxhat9", dry_run=True)
    assert dry.success and dry.id == "" and "would forget 1" in dry.text and noted.id in dry.text
    assert world.memory.get_observation(noted.id)
    done = call("forget", match="qzxhat9", reason="asked")
    assert done.success and re.fullmatch(r"forget-\d+", done.id) and "forgot 1" in done.text
    assert "qzxhat9" not in call("semantic_search", query="qzxhat9").text.replace('"qzxhat9"', "")
    entry = world.memory.forget_log()[-1]
    assert entry.reason == "asked" and entry.selector == {"match": "[withheld]"}
    refused = call("forget", ids=["ep-1"])
    assert not refused.success and "observation ids" in refused.message
    assert not call("forget").success  # nothing selected: refused, never "forget everything"
