"""The retrieval tools over a real fleet store: three robots, three frames, one place to ask.

Three robot memories (a multi-room patrol each, under their own ids and map
frames) are synced into one PostgreSQL fleet store; the fleet tools must
answer with hits from the right robots at the right fleet-frame positions,
honour the ``robots`` filter, and see what an offline robot stored once it
catches up.
"""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout

import pytest

psycopg = pytest.importorskip("psycopg")

from emem_ros.fleet import db  # noqa: E402
from emem_ros.fleet.errors import FleetError, FleetUnavailableError  # noqa: E402
from emem_ros.fleet.memory import FleetMemory  # noqa: E402
from emem_ros.fleet.robots import add_robot  # noqa: E402
from emem_ros.fleet.schema import init_fleet  # noqa: E402
from emem_ros.fleet.sync import sync_memory  # noqa: E402
from emem_ros.fleet.tools import fleet_tooldefs  # noqa: E402
from emem_ros.fleet.transform import RigidTransform  # noqa: E402
from emem_ros.tools.specs import TOOLS  # noqa: E402
from test.support.patrol import memory_adder, multi_room_patrol, open_memory  # noqa: E402

DIM = 384
FRAMES = {"robot1": RigidTransform(), "robot2": RigidTransform(100.0, 0.0, 0.0),
          "robot3": RigidTransform(0.0, 50.0, math.pi / 2)}


def _sight(memory, text: str, x: float, y: float, start: float, n: int = 12) -> None:
    """A measured 3-D object: n sightings a few seconds apart, a few centimetres of noise."""
    for i in range(n):
        memory.add(text, x=x + 0.02 * math.sin(i), y=y + 0.02 * math.cos(i), z=0.8, timestamp=start + 2.0 * i,
                   layer_name="objects3d", metadata={"class_id": text, "frame": "map"})


@pytest.fixture
def fleet3(tmp_path, clock, fleet_url):
    """Three robots' memories synced into one fleet store; robot3 saw the pallet after robot1 did."""
    with db.connect(fleet_url) as conn:
        init_fleet(conn, dim=DIM)
        for robot, frame in FRAMES.items():
            add_robot(conn, robot, frame)
    start = clock.now - 3600
    memories = {}
    for k, robot in enumerate(FRAMES):
        memory = open_memory(tmp_path / f"{robot}.db", clock)
        multi_room_patrol(memory_adder(memory), 400, start=start, seed=k + 1)
        memories[robot] = memory
    _sight(memories["robot1"], "pallet 4711", 2.0, 3.0, start + 100)
    _sight(memories["robot3"], "pallet 4711", 1.0, 2.0, start + 1500)
    _sight(memories["robot2"], "blue forklift", 4.0, 4.0, start + 200)
    for robot, memory in memories.items():
        memory.flush()
        assert sync_memory(memory.config.db_path, fleet_url, robot).caught_up
    yield fleet_url, memories
    for memory in memories.values():
        memory.close()


def _fleet(url: str, clock) -> FleetMemory:
    return FleetMemory(url, now=clock)


def test_the_fleet_tools_are_the_robot_tools_with_a_robots_filter():
    fleet = {td.name: td for td in fleet_tooldefs()}
    robot = {td.name: td for td in TOOLS}
    assert set(fleet) == set(robot)  # all ten
    for name, td in fleet.items():
        assert set(td.properties) == set(robot[name].properties) | {"robots"}
        assert list(td.signature.parameters) == list(td.properties)  # the JSON schema is run's keywords
        assert td.required == robot[name].required


def test_locate_finds_each_robots_objects_in_the_fleet_frame(fleet3, clock):
    url, _ = fleet3
    with _fleet(url, clock) as fleet:
        forklift = fleet.call("locate", "blue forklift")
        assert forklift.found
        assert math.dist(forklift.position[:2], (104.0, 4.0)) < 0.2  # robot2's (4, 4) moved by x + 100
        assert forklift.evidence and {h.robot for h in forklift.evidence} == {"robot2"}
        assert "[robot2/objects3d]" in str(forklift)

        # robot3 (rotated a quarter turn, at y + 50) saw the pallet last: its (1, 2) is (-2, 51) in the fleet
        pallet = fleet.call("locate", "pallet 4711")
        assert math.dist(pallet.position[:2], (-2.0, 51.0)) < 0.2
        assert any(math.dist(p.position[:2], (2.0, 3.0)) < 0.3 and p.robots == ("robot1",)
                   for p in pallet.elsewhere)
        assert "last by robot3" in str(pallet)

        only1 = fleet.call("locate", "pallet 4711", robots=["robot1"])
        assert math.dist(only1.position[:2], (2.0, 3.0)) < 0.2
        assert {h.robot for h in only1.evidence} == {"robot1"}


def test_semantic_search_names_the_robots_and_the_filter_keeps_to_them(fleet3, clock):
    url, _ = fleet3
    with _fleet(url, clock) as fleet:
        result = fleet.call("semantic_search", "pallet 4711", n_results=5)
        pallets = [h for h in result.hits if h.text == "pallet 4711"]
        assert [h.robot for h in pallets] == ["robot3", "robot1"]  # the robot that saw it last first
        assert pallets[0].count == 12 and math.dist(pallets[0].position[:2], (-2.0, 51.0)) < 0.2
        text = fleet.semantic_search("pallet 4711", n_results=5)
        assert text.splitlines()[1].startswith('1. [robot3/objects3d] "pallet 4711" ×12')

        both = fleet.call("semantic_search", "pallet 4711 or blue forklift", n_results=5)
        assert {h.text for h in both.hits} >= {"pallet 4711", "blue forklift"}
        only2 = fleet.call("semantic_search", "pallet 4711 or blue forklift", n_results=5, robots=["robot2"])
        assert only2.hits and all(h.robot == "robot2" for h in only2.hits)
        assert "blue forklift" in {h.text for h in only2.hits} and "pallet 4711" not in {h.text for h in only2.hits}
        only13 = fleet.call("semantic_search", "pallet 4711 or blue forklift", n_results=5,
                            robots=["robot1", "robot3"])
        assert {h.robot for h in only13.hits if h.text == "pallet 4711"} == {"robot1", "robot3"}
        assert "blue forklift" not in {h.text for h in only13.hits}

        answer = fleet.dispatch_tool_call("semantic_search", {"query": "pallet", "robots": ["robot9"]})
        assert answer.startswith("Error:") and "robot9" in answer and "robot1, robot2, robot3" in answer


def test_spatial_and_temporal_queries_over_the_fleet(fleet3, clock):
    url, memories = fleet3
    with _fleet(url, clock) as fleet:
        around = fleet.call("spatial_query", x=104.0, y=4.0, radius=0.5)
        assert any(h.text == "blue forklift" for h in around.hits)
        assert {h.robot for h in around.hits} == {"robot2"}  # nobody else's frame reaches x = 100
        for h in around.hits:
            assert math.dist(h.position[:2], (104.0, 4.0)) <= 0.5 + 1e-6

        robot1_end = memories["robot1"].store.reader().execute("SELECT max(stamp) FROM observations").fetchone()[0]
        recent = fleet.call("temporal_query", time_before=robot1_end, time_after=robot1_end - 60,
                            robots=["robot1"], layer="detections")
        assert recent.hits and {h.robot for h in recent.hits} == {"robot1"}
        assert all(robot1_end - 60 <= h.stamp <= robot1_end for h in recent.hits)
        assert all(h.layer == "detections" for h in recent.hits)
        stamps = [h.stamp for h in recent.hits]
        assert stamps == sorted(stamps, reverse=True)
        assert recent.summary.startswith("by robot1, layer 'detections', after ")

        nowhere = fleet.call("spatial_query", x=500.0, y=500.0, radius=1.0, layer="nosuch")
        assert not nowhere.hits and nowhere.notes[0].startswith("there is no layer 'nosuch'")
        before = fleet.call("temporal_query", time_before=robot1_end - 86400, robots=["robot1"])
        assert not before.hits and before.notes[0].startswith("nothing passes the filters (by robot1, before ")


def test_recall_gathers_the_surroundings_across_robots(fleet3, clock):
    url, _ = fleet3
    with _fleet(url, clock) as fleet:
        about = fleet.call("recall", "blue forklift", n_results=5)
        assert about.center is not None and math.dist(about.center[:2], (104.0, 4.0)) < 0.2
        assert about.matches[0].text == "blue forklift" and about.matches[0].robot == "robot2"
        assert about.nearby and all(h.robot == "robot2" for h in about.nearby)


def test_an_offline_robot_catches_up(fleet3, clock, tmp_path):
    url, memories = fleet3
    robot2 = memories["robot2"]
    _sight(robot2, "yellow crate", 3.0, 1.0, clock.now - 60)  # stored while the fleet store is out of reach
    robot2.flush()
    dead = f"postgresql://postgres@127.0.0.1:{_closed_port()}/postgres"
    with pytest.raises(FleetUnavailableError):
        sync_memory(robot2.config.db_path, dead, "robot2")
    assert "yellow crate" in robot2.semantic_search("yellow crate")  # the robot keeps working offline
    with _fleet(url, clock) as fleet:
        before = fleet.call("semantic_search", "yellow crate")
        assert not any(h.text == "yellow crate" for h in before.hits)
        assert sync_memory(robot2.config.db_path, url, "robot2").caught_up
        after = fleet.call("locate", "yellow crate")
        assert math.dist(after.position[:2], (103.0, 1.0)) < 0.2 and after.evidence[0].robot == "robot2"


def test_the_cli_asks_the_fleet(fleet3, clock):
    from emem_ros.cli.main import main

    url, _ = fleet3
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["query", "--fleet", url, "--now", str(clock.now), "locate", "concept=blue forklift"])
    assert code == 0
    assert "most likely at (104.0, 4.0, 0.8)" in out.getvalue() and "[robot2/objects3d]" in out.getvalue()

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["query", "--fleet", url, "--now", str(clock.now), "--json", "body_status", 'robots=["robot2"]'])
    assert code == 0
    payload = json.loads(out.getvalue())
    assert [robot for robot, _ in payload["result"]["answers"]] == ["robot2"]
    assert payload["text"].startswith("[robot2]\nBody status:")
    assert payload["result"]["answers"][0][1]["readings"][0]["layer"] == "battery"


def test_a_fleet_memory_refuses_what_it_cannot_answer(fleet_url):
    with pytest.raises(FleetError, match="emem fleet init"):
        FleetMemory(fleet_url)  # no fleet store in this database yet
    with db.connect(fleet_url) as conn:
        init_fleet(conn, dim=DIM)
    with pytest.raises(FleetError, match="embedding model"):
        FleetMemory(fleet_url)  # nobody synced: which model embeds the questions is not known


def _closed_port() -> int:
    from test.support.postgres import free_port

    return free_port()


def test_gists_and_entities_over_the_fleet(tmp_path, clock, fleet_url):
    from test.support.fleet import robot_workload

    with db.connect(fleet_url) as conn:
        init_fleet(conn, dim=DIM)
        add_robot(conn, "robot2", FRAMES["robot2"])
    for k, robot in enumerate(("robot1", "robot2")):
        memory = open_memory(tmp_path / f"{robot}.db", clock)
        robot_workload(memory, clock, n=600, seed=k + 3)
        memory.close()
        sync_memory(tmp_path / f"{robot}.db", fleet_url, robot)
    with _fleet(fleet_url, clock) as fleet:
        gists = fleet.call("search_gists", "kitchen", n_results=6)
        assert gists.hits and {h.robot for h in gists.hits} == {"robot1", "robot2"}
        assert all(h.kind == "gist" for h in gists.hits)
        assert "[robot1: summary of" in str(gists) or "[robot2: summary of" in str(gists)
        only = fleet.call("search_gists", "kitchen", robots=["robot2"])
        assert only.hits and {h.robot for h in only.hits} == {"robot2"}

        chairs = fleet.call("entity_query", name="chair", n_results=20)
        assert chairs.hits and {h.robot for h in chairs.hits} == {"robot1", "robot2"}
        assert all("chair" in h.text.lower() for h in chairs.hits if h.score == 1.0)
        # robot2's map is 100 m along x in the fleet frame: its entities are there
        assert all(h.position[0] > 90 for h in chairs.hits if h.robot == "robot2")
        assert all(h.position[0] < 20 for h in chairs.hits if h.robot == "robot1")
        near = fleet.call("entity_query", near_x=107.5, near_y=2.5, spatial_radius=5.0, n_results=50)
        assert near.hits and {h.robot for h in near.hits} == {"robot2"}
        assert "[robot2/entity" in str(near)

        episodes = fleet.call("episode_summary", last_n=5)
        assert sorted(e.id for e in episodes.episodes) == ["robot1/ep-1", "robot2/ep-1"]
        assert all(e.name == "patrol" and e.success and e.observations > 500 for e in episodes.episodes)
        one = fleet.call("episode_summary", episode_id="ep-1", robots=["robot2"])
        assert [e.id for e in one.episodes] == ["robot2/ep-1"] and one.episodes[0].top_texts
        assert "per robot" in fleet.dispatch_tool_call("episode_summary", {"episode_id": "ep-1"})


def test_three_robots_replaying_the_bundled_bag_are_found_in_the_fleet_frame(tmp_path, fleet_url):
    """The patrol bag replayed by three robots whose maps sit differently in the fleet frame."""
    pytest.importorskip("rosbags")
    import dataclasses
    import json

    from emem_ros.replay import ReplayOptions, replay_bag
    from emem_ros.ros.params import load_params_yaml
    from test.support.bags import BAGS, REPO

    truth = {o["name"]: o["position"] for o in json.loads((BAGS / "ground_truth.json").read_text())["objects"]}
    params = dataclasses.replace(load_params_yaml(REPO / "config" / "memory.yaml"), embedding_backend="hashing",
                                 embedding_model="")
    frames = {"robot1": RigidTransform(), "robot2": RigidTransform(60.0, 0.0, 0.0),
              "robot3": RigidTransform(0.0, 60.0, math.pi / 2)}
    with db.connect(fleet_url) as conn:
        init_fleet(conn, dim=DIM)
        for robot, frame in frames.items():
            add_robot(conn, robot, frame)
    for robot in frames:
        path = tmp_path / f"{robot}.db"
        replay_bag(BAGS / "patrol_db3", params, ReplayOptions(db_path=str(path), progress=False))
        assert sync_memory(path, fleet_url, robot).caught_up
    with FleetMemory(fleet_url, now="latest") as fleet:
        for name in ("laptop", "red mug", "sofa"):
            expected = {robot: frame.apply(*truth[name][:2]) for robot, frame in frames.items()}
            for robot, where in expected.items():
                one = fleet.call("locate", name, layer="detections_3d", robots=[robot])
                assert math.dist(one.position[:2], where) < 1.0, (name, robot, one.position, where)
                assert {h.robot for h in one.evidence} == {robot}
            every = fleet.call("locate", name, layer="detections_3d")
            places = [(every.position, None)] + [(p.position, p.robots) for p in every.elsewhere]
            for robot, where in expected.items():
                assert any(math.dist(p[:2], where) < 1.0 for p, _ in places), (name, robot, places)
            assert all(len(robots) == 1 for _, robots in places[1:])  # the three maps do not overlap
            hits = fleet.call("semantic_search", name, layer="detections_3d", n_results=3)
            assert {h.robot for h in hits.hits if h.text == name} == set(frames)
            for h in hits.hits:
                if h.text == name:
                    assert math.dist(h.position[:2], expected[h.robot]) < 1.5


def test_a_fleet_memory_outlives_an_outage(tmp_path, clock, own_postgres):
    url = own_postgres.create_database()
    with db.connect(url) as conn:
        init_fleet(conn, dim=DIM)
    memory = open_memory(tmp_path / "robot1.db", clock)
    _sight(memory, "blue forklift", 4.0, 4.0, clock.now - 100)
    memory.flush()
    sync_memory(memory.config.db_path, url, "robot1")
    with _fleet(url, clock) as fleet:
        assert "blue forklift" in fleet.locate("blue forklift")
        own_postgres.stop()
        answer = fleet.dispatch_tool_call("locate", {"concept": "blue forklift"})
        assert answer.startswith("Error:") and "fleet store" in answer  # plain words, nothing raised
        with pytest.raises(FleetUnavailableError):
            fleet.call("semantic_search", "blue forklift")
        own_postgres.start()
        assert "[robot1/objects3d]" in fleet.locate("blue forklift")  # the reader reconnects
    memory.close()


def test_body_status_over_the_fleet_is_each_robots_own(fleet3, clock):
    """Readings and battery crossings from the synced interoception rows equal each robot's own answer."""
    url, memories = fleet3
    levels = {}
    for robot, memory in memories.items():
        values = [v for (v,) in memory.store.reader().execute(
            "SELECT value FROM observations WHERE layer = 'battery' AND value IS NOT NULL")]
        assert len(values) > 10
        levels[robot] = 100.0 * sorted(values)[len(values) // 2]  # the median: crossed both ways
    with _fleet(url, clock) as fleet:
        for robot, memory in memories.items():
            own = memory.tools.body_status(["battery"], below=levels[robot], n_results=5)
            assert own.crossings
            answer = fleet.call("body_status", layers=["battery"], below=levels[robot], n_results=5,
                                robots=[robot])
            assert [name for name, _ in answer.answers] == [robot]
            over = answer[robot]
            assert [(c.before.stamp, c.after.stamp) for c in over.crossings] == \
                [(c.before.stamp, c.after.stamp) for c in own.crossings]
            assert [c.after.text for c in over.crossings] == [c.after.text for c in own.crossings]
            latest, own_latest = fleet.call("body_status", robots=[robot])[robot], memory.tools.body_status()
            assert [(r.layer, r.text, r.stamp, r.trend) for r in latest.readings] == \
                [(r.layer, r.text, r.stamp, r.trend) for r in own_latest.readings]
        every = fleet.call("body_status", layers=["battery"])
        assert [name for name, _ in every.answers] == sorted(memories)
        text = str(every)
        assert text.startswith("[robot1]\nBody status:") and "[robot3]\nBody status:" in text
        answer = fleet.dispatch_tool_call("body_status", {"robots": ["robot9"]})
        assert answer.startswith("Error:") and "robot9" in answer


def test_current_context_over_the_fleet_names_each_robots_place(fleet3, clock):
    """A robot's latest synced pose, moved into the fleet frame, and what is around it (its sightings only)."""
    url, memories = fleet3
    with _fleet(url, clock) as fleet:
        for robot, memory in memories.items():
            own = memory.tools.get_current_context(radius=3.0, include_recent_minutes=60.0)
            context = fleet.call("get_current_context", radius=3.0, include_recent_minutes=60.0,
                                 robots=[robot])[robot]
            assert own.position is not None and context.position is not None
            expected = FRAMES[robot].apply(own.position[0], own.position[1])
            assert math.dist(context.position[:2], expected) < 1e-6, (robot, context.position, expected)
            assert robot in context.position_source
            assert context.nearby and {h.robot for h in context.nearby} == {robot}
            assert {h.text for h in context.nearby} == {h.text for h in own.nearby}
            assert context.recent and {h.robot for h in context.recent} == {robot}
            assert context.body is not None and [r.text for r in context.body.readings] == \
                [r.text for r in own.body.readings]
        every = fleet.get_current_context()
        assert all(f"[{robot}]\nNow:" in every for robot in memories)


def test_the_fleet_runs_the_robots_own_runner_for_every_tool():
    """One runner per tool: the fleet binds the robot's function object to its reads (plus robots)."""
    fleet = {td.name: td for td in fleet_tooldefs()}
    robot = {td.name: td for td in TOOLS}
    assert set(fleet) == set(robot) and len(fleet) == 10
    for name, td in fleet.items():
        assert td.run.runner is robot[name].run, name
