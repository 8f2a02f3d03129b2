"""record_experience / find_experiences / memory_stats on the tool-calling surface, and the stats they read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from emem_ros.agent.stats import stats_of_file
from emem_ros.agent.tools import AGENT_TOOLS
from emem_ros.cli.main import main
from emem_ros.core.types import EdgeKind
from test.support.scene import add_entity

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_763_800_000.0


def srv_request_fields(name: str) -> list[str]:
    """Request field names of a service definition."""
    text = (ROOT / "srv" / f"{name}.srv").read_text().split("---")[0]
    return [line.split()[1] for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_definitions_cover_the_service_fields(make_memory):
    memory = make_memory()
    definitions = {d["function"]["name"]: d["function"] for d in memory.get_tool_definitions()}
    assert {"record_experience", "find_experiences", "memory_stats"} <= set(definitions)
    record = definitions["record_experience"]["parameters"]
    assert record["required"] == ["goal"]
    wanted = {f.replace("metadata_json", "metadata") for f in srv_request_fields("RecordExperience")}
    assert wanted <= set(record["properties"])
    find = definitions["find_experiences"]["parameters"]["properties"]
    assert set(srv_request_fields("FindExperiences")) <= set(find)
    assert definitions["find_experiences"]["parameters"]["properties"]["time_after"]["type"] == ["string", "number"]
    queries = [d["function"]["name"] for d in memory.get_tool_definitions(include_actions=False)]
    assert "find_experiences" in queries and "memory_stats" in queries and "record_experience" not in queries
    for spec in AGENT_TOOLS:
        assert len(spec.description) > 80
        assert all(p.get("description") for p in spec.parameters["properties"].values()), spec.name


def test_record_and_find_through_dispatch(make_memory, clock):
    memory = make_memory()
    clock.now = T0
    episode = memory.start_episode("fetch mug")
    answer = memory.dispatch_tool_call("record_experience", {
        "goal": "fetch the red mug from the kitchen", "action": "drove to the kitchen", "success": False,
        "result": "the kitchen door was closed", "reflection": "open the kitchen door first",
        "tags": ["Kitchen", "fetch"], "metadata": {"attempt": 1}, "x": 2.0, "y": 3.0})
    assert answer.startswith("Recorded experience") and episode in answer
    first_id = re.search(r"experience ([0-9a-f]{12})", answer).group(1)
    memory.end_episode(consolidate=False)
    clock.advance(600)
    memory.dispatch_tool_call("record_experience", {"goal": "charge the battery", "action": "docked",
                                                    "result": "charged", "success": "true", "tags": ["dock"]})
    clock.advance(600)
    fixed = memory.dispatch_tool_call("record_experience", {
        "goal": "fetch the red mug from the kitchen", "result": "door was locked, asked a person",
        "success": False, "corrects": first_id, "tags": ["kitchen"]})
    assert fixed.startswith("Recorded experience")

    found = memory.dispatch_tool_call("find_experiences", {"query": "red mug kitchen door"})
    lines = found.splitlines()
    assert lines[0].startswith("1 experience for") and "door was locked" in lines[1]
    assert f"corrects {first_id}" in lines[1]  # the corrected record is hidden, the correction says so
    typed = memory.tools.find_experiences(query="battery", n_results=5)
    assert typed.hits[0].experience.goal == "charge the battery" and typed.hits[0].score is not None
    records = json.loads(json.dumps(typed.to_dict()))
    assert set(records[0]) >= {"id", "goal", "action", "result", "reflection", "success", "tags", "metadata",
                               "stamp", "episode_id", "score"}

    def goals(args):
        return [h.experience.goal for h in memory.tools.find_experiences(**args).hits]

    assert goals({"success": True}) == ["charge the battery"]
    assert goals({"success": False}) == ["fetch the red mug from the kitchen"]
    assert goals({"tags": ["dock"]}) == ["charge the battery"]
    assert goals({"time_before": T0 + 100}) == []  # only the corrected original is that old
    assert goals({"time_after": "-15m"}) == ["fetch the red mug from the kitchen", "charge the battery"]
    assert goals({"near_x": 2.0, "near_y": 3.0, "spatial_radius": 1.0}) == []  # the original had the position
    assert goals({"episode_id": episode}) == []
    assert "No experience recorded matches" in memory.dispatch_tool_call("find_experiences", {"tags": ["garage"]})


@pytest.mark.parametrize("name, arguments, expected", [
    ("record_experience", {}, "needs 'goal'"),
    ("record_experience", {"goal": "  "}, "needs a goal"),
    ("record_experience", {"goal": "x", "success": "maybe"}, "'success' must be"),
    ("record_experience", {"goal": "x", "tags": ["kitchen", " "]}, "each tag must be"),
    ("record_experience", {"goal": "x", "x": 1.0}, "both x and y"),
    ("record_experience", {"goal": "x", "episode_id": "ep-42"}, "no episode ep-42"),
    ("record_experience", {"goal": "x", "corrects": "0123456789ab"}, "no experience with id"),
    ("record_experience", {"goal": "x", "corrects": "not-an-id"}, "corrects must be"),
    ("record_experience", {"goal": "x", "metadata": "[1, 2]"}, "metadata"),
    ("record_experience", {"goal": "x", "mood": "happy"}, "has no argument 'mood'"),
    ("find_experiences", {"querry": "mug"}, "Did you mean 'query'"),
    ("find_experiences", {"time_after": "the day before yesterday-ish"}, "time_after"),
    ("find_experiences", {"n_results": 0}, "n_results"),
    ("find_experiences", {"near_x": 1.0}, "near_x and near_y"),
    ("find_experiences", {"time_after": "-1m", "time_before": "-2h"}, "later than"),
    ("find_experiences", {"episode_id": "obs-3"}, "not an episode id"),
    ("find_experiences", "{not json", "not valid JSON"),
    ("memory_stats", {"top_n": -1}, "top_n"),
    ("memory_stats", {"min_support": 0}, "min_support"),
])
def test_bad_calls_get_plain_words_errors(make_memory, name, arguments, expected):
    memory = make_memory()
    answer = memory.dispatch_tool_call(name, arguments)
    assert answer.startswith("Error:") and expected in answer, answer
    assert memory.ledger.count() == 0  # nothing was recorded by a bad call


def known_memory(make_memory, clock):
    """A memory whose statistics are known by construction."""
    clock.now = T0 + 1000
    memory = make_memory()
    for i in range(5):
        memory.add("red chair", 1.0, 1.0, timestamp=T0 + i, layer_name="detections", source_type="perception")
    for i in range(3):
        memory.add("coffee mug", 2.0, 1.0, timestamp=T0 + 10 + i, layer_name="detections", source_type="perception")
    memory.add("the kitchen is bright", 1.5, 1.0, timestamp=T0 + 20, layer_name="scene", source_type="perception")
    for i in range(4):
        memory.add_body_state(f"battery {90 - i}%", "battery", timestamp=T0 + 30 + i, value=0.9 - i / 100)
    memory.start_episode("patrol")
    memory.end_episode(consolidate=False)
    chair = add_entity(memory, "red chair", "furniture", (1.0, 1.0, 0.0), 5, T0, T0 + 4)
    mug = add_entity(memory, "coffee mug", "object", (2.0, 1.0, 0.0), 3, T0 + 10, T0 + 12)
    table = add_entity(memory, "table", "furniture", (1.5, 1.0, 0.0), 1, T0, T0)
    with memory.store.write() as conn:
        memory.store.bump_edge(conn, EdgeKind.COOCCURS_WITH.value, f"ent-{chair}", f"ent-{mug}", 3.0, now=T0)
        memory.store.bump_edge(conn, EdgeKind.COOCCURS_WITH.value, f"ent-{chair}", f"ent-{table}", 1.0, now=T0)
    first = memory.record_experience("fetch the mug", success=True, timestamp=T0 + 40)
    memory.record_experience("open the door", success=False, timestamp=T0 + 41)
    memory.record_experience("water the plant", timestamp=T0 + 42)
    memory.ledger.correct(first, success=False, result="dropped it")
    return memory


def test_memory_stats_on_a_known_memory(make_memory, clock):
    memory = known_memory(make_memory, clock)
    stats = memory.tools.memory_stats(top_n=2, min_support=2)
    assert stats.counts["observations"] == 13 and stats.counts["texts"] == 7
    assert stats.tiers == {"short_term": 13}
    assert stats.layers == {"detections": {"observations": 8, "body": False},
                            "scene": {"observations": 1, "body": False},
                            "battery": {"observations": 4, "body": True}}
    assert stats.episodes == {"completed": 1} and stats.counts["entities"] == 3
    assert [(n.name, n.count) for n in stats.top_concepts] == [("red chair", 5), ("coffee mug", 3)]
    assert [(n.name, n.count, n.kind) for n in stats.top_entities] == [("red chair", 5, "furniture"),
                                                                      ("coffee mug", 3, "object")]
    assert [(p.a, p.b, p.support) for p in stats.patterns] == [("red chair", "coffee mug", 3.0)]
    e = stats.experiences
    # The corrected success now counts as a failure: 0 of 2 known outcomes succeeded.
    assert (e["total"], e["current"], e["superseded"], e["succeeded"], e["failed"], e["unknown"]) == (4, 3, 1, 0, 2, 1)
    assert e["success_rate"] == 0.0
    assert stats.disk["db"] > 0 and stats.disk["log"] > 0 and stats.indexes["entities"] == 3
    assert stats.time_span == (T0, T0 + 33)
    text = memory.dispatch_tool_call("memory_stats", {"top_n": 2})
    assert '"red chair" + "coffee mug" ×3' in text and "success rate 0%" in text and "battery 4 (body)" in text
    loose = memory.tools.memory_stats(top_n=5, min_support=1)
    assert [(p.a, p.b) for p in loose.patterns] == [("red chair", "coffee mug"), ("red chair", "table")]


def test_emem_stats_cli(make_memory, clock, capsys):
    memory = known_memory(make_memory, clock)
    memory.close()
    path = memory.config.db_path
    assert main(["stats", path, "--json", "--top", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["counts"]["observations"] == 13 and data["top_concepts"] == [{"text": "red chair", "count": 5}]
    assert data["experiences"]["superseded"] == 1 and data["disk"]["db"] > 0
    assert main(["stats", path]) == 0
    assert "Memory: 13 observations" in capsys.readouterr().out
    assert stats_of_file(path).counts == data["counts"]
    assert main(["stats", str(Path(path).with_name("missing.db"))]) == 2
    assert "no memory file" in capsys.readouterr().err
