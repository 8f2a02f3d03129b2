"""The Memory component places through TF, as the node does: ``fixed_frame: map`` and the TF patrol.

The recipe's Memory gets ``emem_params={"fixed_frame": "map"}``; the TF patrol
(rosbags/patrol_tf_mcap: 3-D detections in the camera's optical frame, the
robot's pose only through /tf and /tf_static, drifting odometry) is played in,
and Cortex's "where is the red mug?" is answered, through memory.locate, with
a place in the map within 0.3 m of the ground truth.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import pytest

pytest.importorskip("agents", reason="EmbodiedAgents is in the Humble overlay (/opt/ros/humble-extras)")
pytest.importorskip("emem_ros.srv", reason="build and source emem_ros (colcon build) to get its interfaces")

from test.ros import emos_graph as eg
from test.ros.emos_ollama import ScriptedOllama, called, text, tool_call, tool_results

pytestmark = pytest.mark.humble_only

TF_BAG = eg.BAG.parent / "patrol_tf_mcap"
TF_TRUTH = eg.GROUND_TRUTH.parent / "ground_truth_tf.json"
TOPICS = ("/tf", "/tf_static", "/odom", "/detections_3d", "/scene", "/battery")


@pytest.fixture(scope="module")
def running(tmp_path_factory: Any) -> Iterator[tuple[ScriptedOllama, eg.EmosClient, Any]]:
    folder = tmp_path_factory.mktemp("emos_tf")
    db = folder / "memory.db"
    ollama = ScriptedOllama().start()
    client = eg.EmosClient()
    recipe = eg.Recipe(folder, ollama.port, db, fixed_frame="map")
    try:
        recipe.wait_ready()
        eg.play_part(lambda: eg.sightings(db, "red mug", "detections_3d") >= 5, bag=TF_BAG, topics=TOPICS)
        yield ollama, client, db
    finally:
        recipe.stop()
        client.close()
        ollama.stop()


def test_where_is_the_red_mug_in_the_map(running: tuple[ScriptedOllama, eg.EmosClient, Any]) -> None:
    ollama, client, db = running
    assert eg.query(db, "SELECT DISTINCT frame_id FROM observations WHERE layer = 'detections_3d'") == [("map",)]

    def planner(request: dict[str, Any]) -> dict[str, Any]:
        if "memory.locate" not in called(request):
            return tool_call("memory.locate", concept="red mug")
        return text(f"The red mug: {tool_results(request)[-1]}")

    ollama.script(planner)
    result = client.task("Where is the red mug?")
    assert result.success, result.feedback
    place, truth = eg.place_in(result.final), eg.ground_truth("red mug", TF_TRUTH)
    assert place is not None and math.dist(place, truth) <= 0.3, f"{place} vs {truth}: {result.final}"
