"""Node parameters: flat dict parsing, one-sentence errors, the params YAML, declarations."""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import InvalidInputError
from emem_ros.ros.params import (
    LayerSpec,
    NodeParams,
    ParamError,
    declarations,
    layer_declarations,
    layer_param_applies,
    load_params_yaml,
    normalize_msg_type,
    parse_params,
)

CONFIG = Path(__file__).resolve().parent.parent / "config" / "memory.yaml"


def base(**extra) -> dict:
    flat = {
        "layer_names": ["detections", "scene"],
        "layers.detections.topic": "/detections",
        "layers.detections.msg_type": "vision_msgs/msg/Detection2DArray",
        "layers.scene.topic": "/scene",
        "layers.scene.msg_type": "std_msgs/String",
        "db_path": "/tmp/robot.db",
        "embedding.backend": "hashing",
        "llm.backend": "none",
    }
    flat.update(extra)
    return flat


def test_defaults_parse_to_a_node_without_layers():
    params = parse_params({})
    assert isinstance(params, NodeParams)
    assert params.layers == []
    assert params.memory == MemoryConfig()
    from emem_ros.embeddings.factory import default_backend

    assert (params.odom_topic, params.embedding_backend, params.llm_backend) == ("/odom", default_backend(), "none")
    assert params.embedding_model == "all-MiniLM-L6-v2"


def test_a_typical_flat_dict():
    params = parse_params(base(**{
        "flush_interval": 0.5, "working_memory_size": 500, "flush_batch_size": 100,
        "layers.scene.intake.mode": "sampled", "layers.scene.intake.change_only": True,
        "layers.scene.intake.min_period": 2, "layers.detections.reliability": "best_effort",
        "use_sim_time": True, "qos_overrides./parameter_events.publisher.depth": 1000,
    }))
    assert params.memory.db_path == "/tmp/robot.db"
    assert params.memory.flush_interval == 0.5 and params.memory.working_memory_size == 500
    detections, scene = params.layers
    assert detections == LayerSpec("detections", "/detections", "vision_msgs/msg/Detection2DArray",
                                   reliability="best_effort")
    assert scene.msg_type == "std_msgs/msg/String"  # short form accepted, normalized
    assert (scene.intake.mode, scene.intake.min_period, scene.intake.change_only) == ("sampled", 2.0, True)
    assert isinstance(scene.intake.min_period, float)
    assert params.layer("scene") is scene
    assert scene.source_type == "perception"


def test_internal_state_layers_are_interoception():
    params = parse_params({"layer_names": ["battery"], "layers.battery.topic": "/battery",
                           "layers.battery.msg_type": "sensor_msgs/msg/BatteryState",
                           "layers.battery.is_internal_state": True})
    assert params.layers[0].source_type == "interoception"


def test_max_text_length_is_the_memory_limit():
    assert parse_params({"max_text_length": 300}).max_text_length == 300


def test_embedding_model_feeds_the_memory_config():
    params = parse_params({"embedding.backend": "ollama", "embedding.model": "nomic-embed-text",
                           "ollama_host": "http://127.0.0.1:11500", "llm.backend": "ollama",
                           "llm.model": "qwen2.5:3b"})
    assert params.memory.embedding_model == "nomic-embed-text"
    assert (params.ollama_host, params.llm_model) == ("http://127.0.0.1:11500", "qwen2.5:3b")


BAD = [
    ({"layers.kitchen.topic": "/kitchen"}, "layers.kitchen.topic"),
    ({"layers.scene.topic": ""}, "layers.scene.topic"),
    ({"layers.scene.topic": "/detections"}, "layers.scene.topic"),
    ({"layers.scene.topic": "scene topic"}, "layers.scene.topic"),
    ({"layers.scene.msg_type": "String"}, "layers.scene.msg_type"),
    ({"layers.scene.msg_type": "std_msgs/srv/Trigger"}, "layers.scene.msg_type"),
    ({"layers.scene.msg_type": "std_msgs/msg/string"}, "layers.scene.msg_type"),
    ({"layers.scene.msg_type": ""}, "layers.scene.msg_type"),
    ({"layers.scene.topc": "/scene"}, "layers.scene.topc"),
    ({"layers.scene": "/scene"}, "layers.scene"),
    ({"layers.scene.qos_depth": 0}, "layers.scene.qos_depth"),
    ({"layers.scene.qos_depth": 2.5}, "layers.scene.qos_depth"),
    ({"layers.scene.reliability": "sometimes"}, "layers.scene.reliability"),
    ({"layers.scene.is_internal_state": "yes"}, "layers.scene.is_internal_state"),
    ({"layers.scene.intake.mode": "every"}, "layers.scene.intake.mode"),
    ({"layers.scene.intake.mode": "sampled", "layers.scene.intake.min_period": -1.0},
     "layers.scene.intake.min_period"),
    ({"layers.scene.intake.change_only": True}, "layers.scene.intake.change_only"),
    ({"layers.scene.intake.max_silence": "1m"}, "layers.scene.intake.max_silence"),
    ({"layer_names": ["detections", "detections"]}, "layer_names"),
    ({"layer_names": ["bad-name"]}, "layer_names"),
    ({"layer_names": "detections"}, "layer_names"),
    ({"flush_interval": "abc"}, "flush_interval"),
    ({"flush_interval": -1.0}, "flush_interval"),
    ({"flush_interval": math.nan}, "flush_interval"),
    ({"flush_interval": True}, "flush_interval"),
    ({"working_memory_size": 1.5}, "working_memory_size"),
    ({"working_memory_size": 10, "flush_batch_size": 20}, "flush_batch_size"),
    ({"hnsw_m": 0}, "hnsw_m"),
    ({"entity_similarity_threshold": 1.5}, "entity_similarity_threshold"),
    ({"archive_retention": "forever"}, "archive_retention"),
    ({"db_path": ""}, "db_path"),
    ({"db_path": 3}, "db_path"),
    ({"flush_intervall": 1.0}, "flush_intervall"),
    ({"embedding.backend": "word2vec"}, "embedding.backend"),
    ({"embedding.backend": "ollama"}, "embedding.model"),
    ({"llm.backend": "ollama"}, "llm.model"),
    ({"llm.backend": "openai"}, "llm.backend"),
    ({"odom_topic": "odom topic"}, "odom_topic"),
    ({"odom_max_extrapolation": -0.1}, "odom_max_extrapolation"),
    ({"odom_history_seconds": -5.0}, "odom_history_seconds"),
    ({"archive_period": -1.0}, "archive_period"),
    ({"marker_period": 0.0}, "marker_period"),
    ({"maintenance_interval": 30.0, "consolidation_period": 60.0}, "maintenance_interval"),
    ({"markers_enabled": 1}, "markers_enabled"),
]


@pytest.mark.parametrize("extra, name", BAD, ids=[name for _, name in BAD])
def test_every_bad_parameter_is_named_in_one_sentence(extra, name):
    with pytest.raises(ParamError) as info:
        parse_params(base(**extra))
    message = str(info.value)
    assert name in message
    assert "\n" not in message


def test_param_error_is_an_invalid_input_error():
    assert issubclass(ParamError, InvalidInputError) and issubclass(ParamError, ValueError)


def test_unknown_key_suggests_the_close_name():
    with pytest.raises(ParamError, match="did you mean flush_interval"):
        parse_params({"flush_intervall": 1.0})


def test_unknown_layer_error_points_at_layer_names():
    with pytest.raises(ParamError, match="not in layer_names"):
        parse_params(base(**{"layers.kitchen.topic": "/kitchen"}))


def test_strict_types_reject_an_integer_double_like_rclpy():
    assert parse_params({"flush_interval": 2}).memory.flush_interval == 2.0
    with pytest.raises(ParamError, match=r"flush_interval.*2\.0"):
        parse_params({"flush_interval": 2}, strict_types=True)


@pytest.mark.parametrize("name, expected", [
    ("std_msgs/String", "std_msgs/msg/String"), ("std_msgs/msg/String", "std_msgs/msg/String"),
    (" vision_msgs/msg/Detection3DArray ", "vision_msgs/msg/Detection3DArray"),
])
def test_normalize_msg_type(name, expected):
    assert normalize_msg_type(name) == expected


# ---------------------------------------------------------------------- the bundled params file
def flat_yaml(path: Path) -> dict:
    document = yaml.safe_load(path.read_text())
    out: dict = {}

    def walk(tree: dict, prefix: str) -> None:
        for key, value in tree.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = value

    walk(document["/**"]["ros__parameters"], "")
    return out


def test_bundled_config_loads():
    params = load_params_yaml(CONFIG)
    names = [layer.name for layer in params.layers]
    assert names == ["detections", "detections_3d", "scene", "battery", "cpu_temp", "diagnostics"]
    topics = {layer.name: layer.topic for layer in params.layers}
    assert topics == {"detections": "/detections", "detections_3d": "/detections_3d", "scene": "/scene",
                      "battery": "/battery", "cpu_temp": "/cpu_temp", "diagnostics": "/diagnostics"}
    assert params.odom_topic == "/odom"
    internal = {layer.name for layer in params.layers if layer.is_internal_state}
    assert internal == {"battery", "cpu_temp", "diagnostics"}
    scene = params.layer("scene")
    assert scene.intake.mode == "sampled" and scene.intake.change_only
    assert params.layer("battery").intake.value_tolerance > 0


def test_bundled_config_documents_every_parameter():
    flat = flat_yaml(CONFIG)
    for field in fields(MemoryConfig):
        if field.name not in ("embedding_model", "retention_max_age", "retention_rules"):  # set through node params
            assert field.name in flat, f"config/memory.yaml lacks MemoryConfig.{field.name}"
    for name, _default, _type_name, _ in declarations():
        assert name in flat, f"config/memory.yaml lacks {name}"
    for layer in flat["layer_names"]:
        msg_type = flat[f"layers.{layer}.msg_type"]
        internal = flat[f"layers.{layer}.is_internal_state"]
        for name, *_ in layer_declarations(layer):
            key = name[len(f"layers.{layer}."):]
            if layer_param_applies(key, msg_type, internal):
                assert name in flat, f"config/memory.yaml lacks {name}"
            else:  # camera settings of a layer without boxes, the view range of a body layer
                assert name not in flat, f"config/memory.yaml sets {name}, which means nothing for this layer"


def test_bundled_config_values_have_the_declared_ros_types():
    """rclpy refuses a params file whose value type differs from the declared one (1 vs 1.0)."""
    declared = {name: type_name for name, _, type_name, _ in declarations()}
    flat = flat_yaml(CONFIG)
    for layer in flat["layer_names"]:
        declared.update({name: type_name for name, _, type_name, _ in layer_declarations(layer)})
    python = {"BOOL": bool, "INTEGER": int, "DOUBLE": float, "STRING": str, "STRING_ARRAY": list}
    for name, value in flat.items():
        assert type(value) is python[declared[name]], f"{name}: {value!r} is not {declared[name]}"


def test_params_file_node_sections(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(
        "/**:\n  ros__parameters:\n    db_path: shared.db\n"
        "/robot/memory_node:\n  ros__parameters:\n    flush_interval: 0.5\n"
        "other_node:\n  ros__parameters:\n    speed: 3.0\n"
    )
    params = load_params_yaml(path, node_name="/robot/memory_node")
    assert (params.memory.db_path, params.memory.flush_interval) == ("shared.db", 0.5)
    with pytest.raises(ParamError, match="node_name"):
        load_params_yaml(path)
    with pytest.raises(ParamError, match="speed"):
        load_params_yaml(path, node_name="other_node")


def test_params_file_wildcard_section(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("/**/memory_node:\n  ros__parameters:\n    layer_names: []\n    hnsw_m: 8\n")
    assert load_params_yaml(path, node_name="/ns/memory_node").memory.hnsw_m == 8
    with pytest.raises(ParamError, match="no section"):
        load_params_yaml(path, node_name="/ns/planner")


@pytest.mark.parametrize("text, match", [
    ("/**:\n  db_path: x.db\n", "ros__parameters"),
    ("- a\n- b\n", "ros__parameters"),
    ("/**:\n  ros__parameters:\n    flush_interval: 1\n", "flush_interval"),
    ("/**:\n  ros__parameters:\n    layers:\n      scene:\n        topic: /scene\n", "layers.scene.topic"),
    ("/**: [unclosed\n", "not valid YAML"),
])
def test_bad_params_files(tmp_path, text, match):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ParamError, match=match):
        load_params_yaml(path)


def test_missing_params_file(tmp_path):
    with pytest.raises(ParamError, match="cannot read"):
        load_params_yaml(tmp_path / "absent.yaml")


# ---------------------------------------------------------------------- declarations
ROS_TYPES = {"BOOL": bool, "INTEGER": int, "DOUBLE": float, "STRING": str, "STRING_ARRAY": list}


def test_declarations_cover_every_top_level_parameter_with_typed_defaults():
    declared = declarations()
    names = [name for name, *_ in declared]
    assert len(names) == len(set(names))
    from_node = {"embedding_model", "retention_max_age", "retention_rules"}  # embedding.model, retention.*
    assert {f.name for f in fields(MemoryConfig)} - from_node <= set(names)
    assert {"embedding.model", "retention.max_age", "retention.rules"} <= set(names)
    for name, default, type_name, description in declared:
        assert type(default) is ROS_TYPES[type_name], name
        assert description and "\n" not in description, name
    assert ("layer_names", [], "STRING_ARRAY") == next(d[:3] for d in declared if d[0] == "layer_names")


def test_declared_defaults_parse_strictly():
    flat = {name: default for name, default, _, _ in declarations()}
    assert parse_params(flat, strict_types=True) == parse_params({})


def test_layer_declarations_with_required_values_parse():
    flat = {"layer_names": ["scene"]}
    flat.update({name: default for name, default, _, _ in layer_declarations("scene")})
    with pytest.raises(ParamError, match="layers.scene.topic"):
        parse_params(flat, strict_types=True)  # declared defaults leave the required topic empty
    flat.update({"layers.scene.topic": "/scene", "layers.scene.msg_type": "std_msgs/msg/String"})
    assert parse_params(flat, strict_types=True).layers[0] == LayerSpec("scene", "/scene", "std_msgs/msg/String")


def test_declarations_do_not_share_mutable_defaults():
    first = declarations()
    next(d for d in first if d[0] == "layer_names")[1].append("oops")
    assert next(d for d in declarations() if d[0] == "layer_names")[1] == []


def test_retention_travels_as_json_text_and_bad_json_is_refused():
    params = parse_params({"retention.max_age": '{"scene": 86400}',
                           "retention.rules": '[{"match": "person|man", "max_age": 3600}]'})
    assert params.memory.retention_max_age == {"scene": 86400}
    assert params.memory.retention_rules == [{"match": "person|man", "max_age": 3600}]
    with pytest.raises(ParamError, match="retention.max_age must be JSON"):
        parse_params({"retention.max_age": "scene: 1"})
    with pytest.raises(ParamError, match="max_age must be positive"):
        parse_params({"retention.rules": '[{"match": "person", "max_age": -1}]'})
