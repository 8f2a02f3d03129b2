"""EmbodiedAgents' real Cortex drives emem_ros's Memory: a recipe, a scripted Ollama, the patrol bag.

One recipe (emos_recipe.py: Launcher with Cortex and ``emem_ros.emos.Memory``)
runs per form: the memory in the component's process, and the memory as the
launched emem_ros node with the component forwarding to its ``~/call_tool``.
The bag's odometry, 3-D detections, captions and battery are played in; the
planner model is a scripted server on 127.0.0.1 that calls the tools Cortex
offers it. Checked: (a) "where is the red mug?" -> Cortex calls memory.locate
and answers with a place within 0.3 m of the ground truth; (b) an action task
is planned between start_episode and end_episode, and that episode is in the
memory with what was observed during it; (c) "how is your battery?" ->
body_status; (d) Cortex added its memory guidance (with our layers) to the
planning prompt.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("agents", reason="EmbodiedAgents is in the Humble overlay (/opt/ros/humble-extras)")
pytest.importorskip("emem_ros.srv", reason="build and source emem_ros (colcon build) to get its interfaces")

from test.ros import emos_graph as eg
from test.ros import graph
from test.ros.emos_ollama import ScriptedOllama, called, is_confirmation, plan, text, tool_call, tool_results

pytestmark = pytest.mark.humble_only

MUG = "red mug"
NEAR = 0.3
"""Metres: how close to the ground truth the answer's place must be."""


class Form:
    """A running recipe (one form of the memory) and what the tests need of it."""

    def __init__(self, name: str, recipe: eg.Recipe, db: Path, client: eg.EmosClient, ollama: ScriptedOllama,
                 node: Any = None) -> None:
        self.name, self.recipe, self.db, self.client, self.ollama, self.node = name, recipe, db, client, ollama, node


@pytest.fixture(scope="module")
def ollama() -> Iterator[ScriptedOllama]:
    server = ScriptedOllama().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client() -> Iterator[eg.EmosClient]:
    node = eg.EmosClient()
    yield node
    node.close()


def _fill(db: Path) -> None:
    """The first ~35 s of the patrol (the kitchen, 6+ sightings of the red mug in 3-D) played in."""
    eg.play_part(lambda: eg.sightings(db, MUG, "detections_3d") >= 6 and eg.query(
        db, "SELECT 1 FROM observations WHERE layer = 'battery' LIMIT 1") != [])
    assert eg.sightings(db, MUG, "detections_3d") >= 3, "the bag's 3-D detections did not reach the memory"


@pytest.fixture(scope="module", params=["local", "proxy"])
def form(request: Any, tmp_path_factory: Any, ollama: ScriptedOllama, client: eg.EmosClient) -> Iterator[Form]:
    folder = tmp_path_factory.mktemp(f"emos_{request.param}")
    node = None
    if request.param == "proxy":
        params, db = graph.write_params(folder, **{"consolidation_period": 0.0, "archive_period": 0.0})
        node = graph.LaunchedMemory(folder, params, namespace="emem")
        node.wait_active()
        recipe = eg.Recipe(folder, ollama.port, folder / "unused.db", proxy_to="/emem/memory")
    else:
        db = folder / "memory.db"
        recipe = eg.Recipe(folder, ollama.port, db)
    try:
        recipe.wait_ready()
        _fill(db)
        yield Form(request.param, recipe, db, client, ollama, node)
    finally:
        recipe.stop()
        if node is not None:
            node.stop()


# ---------------------------------------------------------------------- (a) where is the red mug?
def test_a_where_is_the_red_mug_answered_by_locate(form: Form) -> None:
    def planner(request: dict[str, Any]) -> dict[str, Any]:
        if "memory.locate" not in called(request):
            return tool_call("memory.locate", concept=MUG)
        return text(f"The red mug: {tool_results(request)[-1]}")

    form.ollama.script(planner)
    result = form.client.task("Where is the red mug?")
    assert result.success, result.feedback
    assert any("memory.locate" in called(r) for r in form.ollama.chats)
    locate_answer = tool_results(form.ollama.chats[-1])[-1]
    assert not locate_answer.startswith("Error"), locate_answer
    place = eg.place_in(result.final)
    assert place is not None, f"no place in Cortex's answer: {result.final}"
    truth = eg.ground_truth(MUG)
    assert math.dist(place, truth) <= NEAR, f"{place} is {math.dist(place, truth):.2f} m from {truth}: {result.final}"
    assert any(locate_answer in out for out in result.outputs), "the answer was not published on cortex_output"


# ---------------------------------------------------------------------- (b) an action task
def test_b_action_task_is_one_episode_with_what_was_seen(form: Form) -> None:
    def planner(request: dict[str, Any]) -> dict[str, Any]:
        if is_confirmation(request):
            if "Next action: memory.end_episode" in str(request["messages"][-1]["content"]):
                time.sleep(1.5)  # the patrol goes on: 15 s of the bag play into the open episode
            return text("EXECUTE")
        done = called(request)
        if "memory.body_status" not in done:
            return tool_call("memory.body_status")
        if "memory.start_episode" not in done:
            return plan(("memory.start_episode", {"name": "kitchen patrol"}),
                        ("memory.store_specific_memory", {"content": "patrolled the kitchen for the red mug"}),
                        ("memory.end_episode", {}))
        return text("Patrol done.")

    form.ollama.script(planner)
    outcome: dict[str, Any] = {}

    def task() -> bool:
        outcome["result"] = form.client.task("Patrol the kitchen and remember what you see.")
        return True

    import threading

    runner = threading.Thread(target=task, daemon=True)
    runner.start()
    eg.play_part(lambda: not runner.is_alive(), start_offset=60.0, timeout=60.0)
    runner.join(30.0)
    result = outcome["result"]
    assert result.success, result.feedback
    plans = [f for f in result.feedback if f.startswith("Plan: ")]
    assert plans and plans[0] == "Plan: memory.start_episode, memory.store_specific_memory, memory.end_episode"
    assert not [f for f in result.feedback if "completed: Error" in f], result.feedback
    episodes = eg.query(form.db, "SELECT id, status, end FROM episodes WHERE name = 'kitchen patrol'")
    assert len(episodes) == 1, episodes
    episode, status, end = episodes[0]
    assert end is not None and status != "active", episodes
    layers = dict(eg.query(form.db, "SELECT layer, COUNT(*) FROM observations WHERE episode_id = ? GROUP BY layer",
                           episode))
    assert layers.get("agent_notes") == 1, layers
    assert sum(n for layer, n in layers.items() if layer != "agent_notes") >= 1, \
        f"no perception of the patrol in the episode: {layers}"


# ---------------------------------------------------------------------- (c) how is your battery?
def test_c_battery_question_answered_by_body_status(form: Form) -> None:
    def planner(request: dict[str, Any]) -> dict[str, Any]:
        if "memory.body_status" not in called(request):
            return tool_call("memory.body_status")
        return text(f"Body: {tool_results(request)[-1]}")

    form.ollama.script(planner)
    result = form.client.task("How is your battery?")
    assert result.success, result.feedback
    reading = tool_results(form.ollama.chats[-1])[-1]
    assert re.search(r"battery.*\d+(\.\d+)?\s*%", reading, re.IGNORECASE), reading
    assert reading in result.final


# ---------------------------------------------------------------------- (d) the memory guidance
def test_d_cortex_put_its_memory_guidance_in_the_planning_prompt(form: Form) -> None:
    form.ollama.script(lambda request: text("Nothing to do."))
    assert form.client.task("Say hello.").success
    prompt = form.ollama.planning_requests()[-1]["messages"][0]["content"]
    assert "=== Memory Guidance ===" in prompt
    assert "Begin your execution plan with 'memory.start_episode'" in prompt
    assert "'memory.body_status' ONLY" in prompt
    retrieval = re.search(r"Retrieved via: ([^\n]*)\.\n", prompt)
    assert retrieval is not None and "memory.locate" in retrieval.group(1) and "memory.recall" in retrieval.group(1)
    tools = {t["function"]["name"] for t in form.ollama.planning_requests()[-1]["tools"]}
    assert {"memory.locate", "memory.start_episode", "memory.end_episode", "memory.body_status"} <= tools
    locate = next(t for t in form.ollama.planning_requests()[-1]["tools"] if t["function"]["name"] == "memory.locate")
    assert "radius" in locate["function"]["description"]  # our description, not eMEM's
    if form.name == "local":  # our layer names, as inspect_component lists them
        assert "detections_3d  (from topic 'detections_3d'" in prompt and "battery  (from topic" in prompt


# ---------------------------------------------------------------------- bad input from the planner
BAD_CALLS = (
    ("teleport", "{}", "no action named 'teleport'"),
    ("destroy_node", "{}", "no action named 'destroy_node'"),  # a method, but no action: refused, not run
    ("locate", "{}", "locate needs 'concept'"),
    ("locate", "{not json", "not valid JSON"),
    ("locate", "[1, 2]", "must be a JSON object"),
    ("locate", '{"concept": "red mug", "colour": "red"}', "locate has no argument 'colour'"),
    ("semantic_search", '{"query": "mug", "n_results": "many"}', "'n_results' must be a whole number"),
    ("spatial_query", '{"x": 1e308, "y": 0}', "'x' must be at most"),
    ("spatial_query", '{"x": NaN, "y": 0}', "must be a finite number"),
    ("body_status", '{"below": Infinity}', "must be a finite number"),
    ("store_specific_memory", '{"content": "a bad note", "x": NaN, "y": 1.0}', "must be a finite number"),
    ("store_specific_memory", '{"content": "a bad note", "x": 1e300, "y": 1.0}', "'x' must be at most"),
    ("store_specific_memory", '{"content": ["a bad note"]}', "'content' must be text"),
    ("store_specific_memory", '{"layer_name": "agent_notes"}', "store_specific_memory needs 'content'"),
    ("start_episode", '{"name": "x", "parent_episode_id": "ep-999999"}', "ep-999999"),
    ("end_episode", '{"success": "perhaps"}', "'success' must be true or false"),
)


def test_bad_calls_through_execute_method_are_answered_and_nothing_is_stored(form: Form) -> None:
    for name, kwargs, expected in BAD_CALLS:
        response = form.client.execute("memory", name, kwargs)
        assert not response.success, f"{name}({kwargs}) was accepted: {response.response_json}"
        assert expected in response.error_msg, f"{name}({kwargs}): {response.error_msg}"
    assert eg.sightings(form.db, "a bad note", "agent_notes") == 0
    good = form.client.execute("memory", "store_specific_memory", '{"content": "a good note", "x": 1.0, "y": 2.0}')
    assert good.success, good.error_msg
    assert "Stored obs-" in eg.answer_json(good)
    assert eg.sightings(form.db, "a good note", "agent_notes") == 1  # once: stored at once, not twice
    stored = form.client.execute("memory", "store", "{}")
    assert stored.success and ("written now" in eg.answer_json(stored) or "nothing to snapshot" in
                               eg.answer_json(stored)), stored.error_msg
    still = form.client.execute("memory", "locate", '{"concept": "red mug"}')  # the component keeps serving
    assert still.success and eg.place_in(eg.answer_json(still)) is not None, still.error_msg
    assert form.recipe.proc.poll() is None


# ---------------------------------------------------------------------- their message types
def test_their_message_types_go_through_the_ingest_path(form: Form) -> None:
    from automatika_embodied_agents.msg import Bbox2D, Detections2D, StreamingString
    from std_msgs.msg import String

    form.client.publish("/scene", [String(data="a purple umbrella by the door")])
    expected = [("a purple umbrella by the door", "scene")]
    if form.name == "local":  # the node of the proxy form has no layers of EmbodiedAgents' types
        box = Bbox2D(top_left_x=10.0, top_left_y=20.0, bottom_right_x=50.0, bottom_right_y=80.0)
        form.client.publish("/vision", [Detections2D(labels=["green bottle"], scores=[0.8], boxes=[box])])
        form.client.publish("/speech", [StreamingString(stream=True, done=False, data="The bottle "),
                                        StreamingString(stream=True, done=False, data="is green."),
                                        StreamingString(stream=True, done=True, data="")])
        expected += [("green bottle", "vision"), ("The bottle is green.", "speech")]
    deadline = time.monotonic() + 20.0
    while any(eg.sightings(form.db, t, layer) != 1 for t, layer in expected) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [eg.sightings(form.db, t, layer) for t, layer in expected] == [1] * len(expected)
    if form.name == "local":
        metadata = json.loads(eg.query(form.db, "SELECT o.metadata FROM observations o JOIN texts t "
                                                "ON t.id = o.text_id WHERE t.text = 'green bottle'")[0][0])
        assert metadata["bbox"] == {"center": [30.0, 50.0], "size": [40.0, 60.0]} and metadata["score"] == 0.8


def test_a_bad_call_from_the_planner_reaches_it_as_cortex_shows_errors(form: Form) -> None:
    def planner(request: dict[str, Any]) -> dict[str, Any]:
        results = tool_results(request)
        if not results:
            return tool_call("memory.locate", where="red mug")  # the model got the argument's name wrong
        if len(results) == 1:
            return tool_call("memory.locate", concept=MUG)  # ... and corrects itself from the answer
        return text(f"The red mug: {results[-1]}")

    form.ollama.script(planner)
    result = form.client.task("Where is the red mug?")
    assert result.success, result.feedback
    first, second = tool_results(form.ollama.chats[-1])
    assert first.startswith("Error: memory.locate failed with error: locate has no argument 'where'"), first
    assert "Its arguments are: concept" in first
    assert eg.place_in(second) is not None and eg.place_in(result.final) == eg.place_in(second)
