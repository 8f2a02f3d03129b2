"""The parts of emem_ros.emos that need neither ROS nor EmbodiedAgents: adapters, actions, parameters.

The component itself runs on the real Cortex in test/ros/test_emos_cortex.py.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import pytest

from emem_ros.core.config import MemoryConfig
from emem_ros.emos import actions as acts
from emem_ros.emos.params import flat_params, layer_name
from emem_ros.memory import Memory
from emem_ros.ros.adapters import adapt
from emem_ros.ros.adapters.agents_msgs import DETECTIONS_2D, DETECTIONS_MULTI, STREAMING_STRING
from emem_ros.ros.intake import SUBJECT_KEY
from emem_ros.ros.params import LayerSpec, parse_params
from emem_ros.ros.pipeline import IngestPipeline


def layer(name: str, msg_type: str) -> LayerSpec:
    return LayerSpec(name=name, topic=f"/{name}", msg_type=msg_type)


def header(t: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(stamp=SimpleNamespace(sec=int(t), nanosec=int(round((t % 1) * 1e9))), frame_id="cam")


def box(x0: float, y0: float, x1: float, y1: float) -> SimpleNamespace:
    return SimpleNamespace(top_left_x=x0, top_left_y=y0, bottom_right_x=x1, bottom_right_y=y1)


def detections(labels: list[str], scores: list[float], boxes: list[Any], t: float = 100.0) -> SimpleNamespace:
    return SimpleNamespace(header=header(t), labels=labels, scores=scores, boxes=boxes)


# ---------------------------------------------------------------------- adapters
def test_detections2d_give_one_draft_per_label_with_score_and_box() -> None:
    msg = detections(["red mug", "chair", "ghost"], [0.9, 0.6, math.nan], [box(10, 20, 30, 60), box(0, 0, 5, 5)])
    result = adapt(msg, layer("vision", DETECTIONS_2D), 200.0)
    assert [d.text for d in result.drafts] == ["red mug", "chair"]
    mug = result.drafts[0]
    assert mug.stamp == 100.0 and mug.confidence == pytest.approx(0.9)
    assert mug.metadata[SUBJECT_KEY] == "red mug" and mug.metadata["bbox"] == {"center": [20.0, 40.0],
                                                                               "size": [20.0, 40.0]}
    assert result.partial == ("label 2 has no name or no finite score",)


def test_detections2d_without_labels_are_skipped_with_a_reason() -> None:
    assert adapt(detections([], [], []), layer("vision", DETECTIONS_2D), 1.0).skipped_reason == "no labels"


def test_multisource_detections_keep_each_source_stamp() -> None:
    msg = SimpleNamespace(header=header(50.0), detections=[detections(["cup"], [0.5], [], t=51.0),
                                                           detections(["tv"], [0.7], [], t=0.0)])
    drafts = adapt(msg, layer("vision", DETECTIONS_MULTI), 99.0).drafts
    assert [(d.text, d.stamp) for d in drafts] == [("cup", 51.0), ("tv", 50.0)]


def test_a_streamed_reply_is_stored_once_whole_stamped_when_it_began() -> None:
    spec = layer("speech", STREAMING_STRING)

    def chunk(data: str, t: float, done: bool) -> Any:
        return adapt(SimpleNamespace(header=header(t), stream=True, done=done, data=data), spec, t)

    assert chunk("The mug ", 10.0, False).drafts == [] and chunk("is red.", 10.5, False).drafts == []
    whole = chunk("", 11.0, True).drafts
    assert [(d.text, d.stamp) for d in whole] == [("The mug is red.", 10.0)]
    single = adapt(SimpleNamespace(header=header(12.0), stream=False, done=True, data=" hello "), spec, 12.0)
    assert [d.text for d in single.drafts] == ["hello"]


# ---------------------------------------------------------------------- actions
def test_actions_have_their_names_and_phases_and_our_descriptions() -> None:
    assert [a.name for a in acts.ACTIONS if a.phase == acts.EXECUTION] == [
        "store", "store_specific_memory", "start_episode", "end_episode"]
    assert acts.ACTIONS_BY_NAME["body_status"].phase == acts.BOTH and len(acts.RETRIEVAL) == 10
    note = acts.description(acts.ACTIONS_BY_NAME["store_specific_memory"])["function"]
    assert note["parameters"]["required"] == ["content"] and "text" not in note["parameters"]["properties"]
    assert "radius" in acts.description(acts.ACTIONS_BY_NAME["locate"])["function"]["description"]


@pytest.fixture()
def memory(tmp_path: Any) -> Any:
    from emem_ros.embeddings.hashing import HashingEmbeddingProvider

    with Memory(str(tmp_path / "m.db"), config=MemoryConfig(flush_interval=0.0, maintenance_process=False),
                embedding_provider=HashingEmbeddingProvider(64)) as opened:
        yield opened


def registry_of(memory: Any) -> Any:
    return acts.action_registry(lambda tool: memory.tools.registry.get(tool).handler, lambda: "stored")


def test_a_note_is_stored_under_their_argument_name(memory: Any) -> None:
    registry = registry_of(memory)
    answer = acts.run_action(registry, "store_specific_memory", {"content": "the charger is behind the sofa",
                                                                 "x": 1.0, "y": 2.0})
    assert answer.startswith("Stored obs-") and "(1.0, 2.0" in answer
    assert "the charger" in acts.run_action(registry, "semantic_search", {"query": "charger"})


@pytest.mark.parametrize("name, arguments, expected", [
    ("teleport", {}, "no action named 'teleport'. Its actions are: store, "),
    ("locat", {}, "Did you mean locate?"),
    ("locate", {}, "locate needs 'concept'"),
    ("locate", [1], "must be a JSON object"),
    ("store_specific_memory", {"text": "x"}, "has no argument 'text'. Did you mean 'content'?"),
    ("store_specific_memory", {"content": "x", "metadata": {"a": [1.0, math.inf]}}, "'metadata.a[1]' must be finite"),
    ("spatial_query", {"x": 1e308, "y": 0}, "'x' must be at most"),
    ("end_episode", {}, "No episode is active"),
])
def test_bad_calls_raise_in_plain_words_and_store_nothing(memory: Any, name: str, arguments: Any,
                                                          expected: str) -> None:
    with pytest.raises(acts.ActionError) as error:
        acts.run_action(registry_of(memory), name, arguments)
    assert expected in str(error.value).replace("a finite number", "finite")
    assert memory.store.reader().execute("SELECT COUNT(*) FROM observations").fetchone()[0] == 0


# ---------------------------------------------------------------------- parameters
def test_their_constructor_arguments_become_node_parameters_that_validate() -> None:
    topic = lambda name, cls: SimpleNamespace(name=name, ros_msg_type=cls)  # noqa: E731
    from types import new_class

    String = new_class("String")
    String.__module__ = "std_msgs.msg._string"
    Battery = new_class("BatteryState")
    Battery.__module__ = "sensor_msgs.msg._battery_state"
    layers = [SimpleNamespace(subscribes_to=topic("robot/scene", String), temporal_change=True,
                              is_internal_state=False),
              SimpleNamespace(subscribes_to=topic("battery", Battery), temporal_change=False, is_internal_state=True)]
    theirs = SimpleNamespace(db_path="/tmp/x.db", working_memory_size=50, flush_interval=2.0, recency_weight=0.3,
                             entity_extract_time_interval=30.0, embedding_checkpoint="all-MiniLM-L6-v2")
    defaults = SimpleNamespace(db_path="memory.db", working_memory_size=50, flush_interval=2.0, recency_weight=0.0)
    flat = flat_params(layers, SimpleNamespace(name="odom"), theirs, 5.0, {"embedding.backend": "hashing"},
                       config_defaults=defaults)
    params = parse_params(flat)
    scene, battery = params.layers
    assert (scene.name, scene.topic, scene.msg_type) == ("robot_scene", "/robot/scene", "std_msgs/msg/String")
    assert scene.intake.min_period == 5.0 and scene.intake.change_only and battery.is_internal_state
    assert params.odom_topic == "/odom" and params.memory.db_path == "/tmp/x.db"
    assert params.memory.recency_weight == 0.3 and params.memory.maintenance_interval == 30.0
    assert params.memory.working_memory_size == MemoryConfig().working_memory_size  # their default: ours
    assert layer_name("2d/boxes") == "layer_2d_boxes"
    IngestPipeline(object(), params)  # the one ingest path takes them as they are
    json.dumps(flat)


# ---------------------------------------------------------------------- the memory in the component's process
def test_local_memory_ingests_through_the_pipeline_and_places_notes_at_the_robot(tmp_path: Any) -> None:
    from emem_ros.emos.local import LocalMemory
    from test.test_pose_history import T0, odometry

    flat = {"db_path": str(tmp_path / "m.db"), "embedding.backend": "hashing", "layer_names": ["scene"],
            "layers.scene.topic": "/scene", "layers.scene.msg_type": "std_msgs/msg/String",
            "consolidation_period": 0.0, "archive_period": 0.0, "maintenance_process": False, "flush_interval": 0.0}
    clock = [T0 + 1.0]
    local = LocalMemory.open(flat, lambda: clock[0], warn=lambda message: None)
    try:
        for k in range(3):
            assert local.on_odometry(odometry(T0 + k, 2.0 + k, 3.0), T0 + k)
        caption = SimpleNamespace(data="a kettle on the stove")
        assert local.store_latest({"scene": caption}, T0 + 1.0) == 1
        row = local.memory.store.reader().execute("SELECT x, y FROM observations WHERE layer = 'scene'").fetchone()
        assert row == pytest.approx((3.0, 3.0))  # the robot's pose at the caption's time
        registry = acts.action_registry(local.handler_for, lambda: "")
        clock[0] = T0 + 2.0
        note = acts.run_action(registry, "store_specific_memory", {"content": "the kettle is new"})
        assert "at (4.0, 3.0" in note  # no coordinates given: the robot's position now
        with pytest.raises(KeyError):
            local.handler_for("no_such_tool")
    finally:
        local.close()


def test_local_memory_refuses_a_fleet_it_would_not_sync(tmp_path: Any) -> None:
    from emem_ros.core.errors import InvalidInputError
    from emem_ros.emos.local import LocalMemory

    flat = {"db_path": str(tmp_path / "m.db"), "embedding.backend": "hashing", "fleet.url": "postgresql://x@h/db",
            "fleet.robot_id": "r1"}
    with pytest.raises(InvalidInputError, match="proxy_to"):
        LocalMemory.open(flat, lambda: 0.0, warn=lambda message: None)
    assert not (tmp_path / "m.db").exists()
