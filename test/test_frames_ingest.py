"""The ingest path with a fixed frame: every observation placed in ``map`` from TF at its own stamp.

Real messages (rosbags' Humble typestore), a real memory (hashing embedder),
the pipeline the node and replay share.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

pytest.importorskip("rosbags.typesys")

from emem_ros.ros.params import ParamError, parse_params
from emem_ros.ros.pipeline import IngestPipeline
from test.support import ros_messages as msgs
from test.support.ros_messages import InterfaceFactory

MAKE = InterfaceFactory()
T0 = 1_741_000_000.0
OPTICAL = (-0.5, 0.5, -0.5, 0.5)
"""camera_link <- camera_optical_frame (REP 103)."""


def flat(db: Path, **overrides):
    values = {
        "db_path": str(db), "embedding.backend": "hashing", "fixed_frame": "map",
        "layer_names": ["detections", "detections_3d", "scene"],
        "layers.detections.topic": "/detections", "layers.detections.msg_type": "vision_msgs/msg/Detection2DArray",
        "layers.detections.camera_info_topic": "/camera/camera_info",
        "layers.detections_3d.topic": "/detections_3d",
        "layers.detections_3d.msg_type": "vision_msgs/msg/Detection3DArray",
        "layers.scene.topic": "/scene", "layers.scene.msg_type": "std_msgs/msg/String",
    }
    values.update(overrides)
    return values


@pytest.fixture
def warnings():
    return []


@pytest.fixture
def pipeline(memory, tmp_path, warnings):
    return IngestPipeline(memory, parse_params(flat(tmp_path / "memory.db")), warn=warnings.append)


def tf(t, parent, child, x, y, z=0.0, yaw=0.0, rotation=None):
    return msgs.transform_stamped(MAKE, t, parent, child, x, y, z, yaw, rotation=rotation)


def static_camera(pipeline, *, yaw=0.0, t=T0):
    """base_link -> camera_link (0.2 m ahead, 0.9 m up, turned by ``yaw``) -> camera_optical_frame."""
    pipeline.on_tf(msgs.tf_message(MAKE, tf(t, "base_link", "camera_link", 0.2, 0.0, 0.9, yaw),
                                   tf(t, "camera_link", "camera_optical_frame", 0.0, 0.0, rotation=OPTICAL)),
                   static=True, receive_time=t)


def robot_at(pipeline, t, odom_xy, *, map_odom=(10.0, 0.0, math.pi / 2), odom_yaw=0.0):
    """One /tf message: map -> odom and odom -> base_link at stamp t."""
    mx, my, myaw = map_odom
    return pipeline.on_tf(msgs.tf_message(MAKE, tf(t, "map", "odom", mx, my, yaw=myaw),
                                          tf(t, "odom", "base_link", odom_xy[0], odom_xy[1], yaw=odom_yaw)),
                          static=False, receive_time=t)


def stored(memory, layer):
    memory.flush()
    rows = memory.store.reader().execute(
        "SELECT t.text, o.x, o.y, o.z, o.frame_id, o.metadata FROM observations o JOIN texts t ON t.id = o.text_id "
        "WHERE o.layer = ? ORDER BY o.stamp", (layer,)
    ).fetchall()
    return [(text, x, y, z, frame, json.loads(meta) if meta else {}) for text, x, y, z, frame, meta in rows]


def caption(t):
    return MAKE("std_msgs/msg/String", data=f"a kitchen at {t:.1f}")


# ---------------------------------------------------------------------- the robot's pose
def test_the_robot_is_placed_in_map_through_odom_at_the_message_stamp(pipeline, memory):
    robot_at(pipeline, T0, (0.0, 0.0))
    robot_at(pipeline, T0 + 1.0, (2.0, 0.0))
    outcome = pipeline.on_message("scene", caption(T0 + 0.5), T0 + 0.5)  # String: stamped on arrival
    assert len(outcome.ids) == 1 and outcome.waiting == 0
    (_, x, y, _, frame, meta), = stored(memory, "scene")
    # odom is turned 90 degrees in map and starts at (10, 0): 1 m along odom's x is 1 m along map's y
    assert (x, y) == pytest.approx((10.0, 1.0)) and frame == "map"
    assert meta["position_source"] == "odometry" and meta["view_range"] == 6.0  # a robot-pose sighting


def test_a_measured_3d_position_is_turned_from_the_camera_frame_into_map(pipeline, memory):
    static_camera(pipeline)
    robot_at(pipeline, T0, (1.0, 0.0))
    robot_at(pipeline, T0 + 0.2, (1.0, 0.0))
    # 2 m in front of the optical frame, 0.5 m to its right, level with it
    pipeline.on_message("detections_3d", msgs.detections_3d(MAKE, T0 + 0.1, "camera_optical_frame",
                                                            ("red mug", 0.5, 0.0, 2.0)), T0 + 0.1)
    (text, x, y, z, frame, meta), = stored(memory, "detections_3d")
    # base at map (10, 1) facing +y; the camera 0.2 m ahead; the mug 2 m further and 0.5 m right (= +x in map)
    assert text == "red mug" and frame == "map"
    assert (x, y, z) == pytest.approx((10.5, 1.0 + 0.2 + 2.0, 0.9))
    assert "object_position" not in meta


def test_a_message_waits_for_its_transform_and_is_placed_when_it_comes(pipeline, memory):
    static_camera(pipeline)
    robot_at(pipeline, T0, (0.0, 0.0))
    outcome = pipeline.on_message("detections_3d", msgs.detections_3d(MAKE, T0 + 0.5, "camera_optical_frame",
                                                                      ("red mug", 0.0, 0.0, 1.0)), T0 + 0.5)
    assert outcome.ids == () and outcome.waiting == 1 and pipeline.waiting == 1
    robot_at(pipeline, T0 + 1.0, (2.0, 0.0))  # arrives later, within tf_timeout of the stamp
    assert pipeline.waiting == 0
    (_, x, y, *_), = stored(memory, "detections_3d")
    assert (x, y) == pytest.approx((10.0, 1.0 + 0.2 + 1.0))  # interpolated at the stamp, not the newest pose


def test_a_message_stamped_on_arrival_takes_the_newest_pose_at_once(pipeline, memory):
    pipeline.on_message("scene", caption(T0 - 0.1), T0 - 0.1)  # before any transform: it waits for one
    assert pipeline.waiting == 1
    robot_at(pipeline, T0, (0.0, 0.0))
    assert pipeline.waiting == 0
    robot_at(pipeline, T0 + 1.0, (2.0, 0.0))
    outcome = pipeline.on_message("scene", caption(T0 + 1.3), T0 + 1.3)  # std_msgs/String: no header
    assert len(outcome.ids) == 1 and pipeline.waiting == 0
    (_, x0, y0, *_), (_, x, y, *_) = stored(memory, "scene")
    assert (x0, y0) == pytest.approx((10.0, 0.0)) and (x, y) == pytest.approx((10.0, 2.0))


def test_a_stale_edge_leaves_the_message_without_a_position_once_tf_has_moved_on(pipeline, memory, warnings):
    robot_at(pipeline, T0, (0.0, 0.0))  # localization's map -> odom is published once, then stops
    pipeline.on_message("detections", msgs.detections(MAKE, T0 + 2.0, "chair"), T0 + 2.0)
    for i in range(1, 5):  # the odometry goes on: TF's time passes the stamp
        t = T0 + 2.0 + 0.05 * i
        pipeline.on_tf(msgs.tf_message(MAKE, tf(t, "odom", "base_link", 0.0, 0.0)), static=False, receive_time=t)
        assert pipeline.waiting == (1 if i < 4 else 0)  # due once /tf is tf_timeout (0.2 s) past the stamp
    (_, x, y, *_), = stored(memory, "detections")
    assert x is None and y is None  # never the origin
    counts = pipeline.counts()["detections"]
    assert counts.no_transform == 1 and counts.without_position == 1
    line, = [w for w in warnings if "no transform" in w]
    assert "map <- base_link" in line and "2.00 s older than the stamp" in line
    pipeline.on_message("detections", msgs.detections(MAKE, T0 + 3.0, "chair"), T0 + 3.0)
    pipeline.expire(T0 + 13.5)
    assert len([w for w in warnings if "no transform" in w]) == 1  # one line per frame pair
    assert pipeline.counts()["detections"].no_transform == 2


def test_when_tf_stops_a_message_waits_for_the_sensors_to_move_on_or_the_clock(pipeline, memory):
    robot_at(pipeline, T0, (0.0, 0.0))
    pipeline.on_message("detections", msgs.detections(MAKE, T0 + 2.0, "chair"), T0 + 2.0)
    assert pipeline.expire(T0 + 12.1) == 0  # nothing arrives: tf_timeout + QUIET_STALL = 10.2 s of the clock
    assert pipeline.expire(T0 + 12.25) == 1
    (_, x, y, *_), = stored(memory, "detections")
    assert x is None and pipeline.counts()["detections"].no_transform == 1
    pipeline.on_message("detections", msgs.detections(MAKE, T0 + 13.0, "sofa"), T0 + 13.0)
    # stamped messages go on while /tf is silent: due once they are tf_timeout + TF_STALL (5.2 s) further
    pipeline.on_message("detections_3d", msgs.detections_3d(MAKE, T0 + 18.1, "map", ("chair", 1.0, 1.0, 0.0)),
                        T0 + 18.1)
    assert pipeline.waiting == 1
    pipeline.on_message("detections_3d", msgs.detections_3d(MAKE, T0 + 18.25, "map", ("chair", 1.0, 1.0, 0.0)),
                        T0 + 18.25)
    assert pipeline.waiting == 0 and pipeline.counts()["detections"].no_transform == 2


def test_a_transform_just_missed_takes_the_newest_within_the_extrapolation_limit(pipeline, memory):
    robot_at(pipeline, T0, (0.0, 0.0))
    robot_at(pipeline, T0 + 1.0, (2.0, 0.0))
    pipeline.on_message("detections_3d", msgs.detections_3d(MAKE, T0 + 1.3, "map", ("chair", 1.0, 1.0, 0.0)),
                        T0 + 1.3)
    pipeline.on_message("detections", msgs.boxes(MAKE, T0 + 1.3, ("sofa", 320.0, 240.0, 40.0, 40.0)), T0 + 1.3)
    assert pipeline.waiting == 1  # the 2-D detection waits for the robot's motion; the 3-D one is in map
    pipeline.expire(T0 + 11.6)  # and then /tf stops
    (_, x, y, *_), = stored(memory, "detections")
    assert (x, y) == pytest.approx((10.0, 2.0)) and pipeline.counts()["detections"].no_transform == 0


def test_a_3d_detection_in_a_frame_tf_never_names_is_kept_at_the_robot_pose(pipeline, memory, warnings):
    robot_at(pipeline, T0, (0.0, 0.0))
    robot_at(pipeline, T0 + 1.0, (0.0, 0.0))
    pipeline.on_message("detections_3d", msgs.detections_3d(MAKE, T0 + 0.5, "ghost_camera", ("chair", 1.0, 0.0, 3.0)),
                        T0 + 0.5)
    robot_at(pipeline, T0 + 2.0, (0.0, 0.0))  # TF moves on; ghost_camera never appears
    (_, x, y, _, frame, meta), = stored(memory, "detections_3d")
    assert (x, y) == pytest.approx((10.0, 0.0))  # where the robot was, not 3 m from the map origin
    assert meta["object_position"] == [1.0, 0.0, 3.0] and meta["object_frame"] == "ghost_camera"
    assert pipeline.counts()["detections_3d"].object_position_dropped == 1
    assert any("map <- ghost_camera" in w and "unknown frame" in w for w in warnings)


def test_a_late_tf_static_still_places_the_detections_that_waited_for_it(pipeline, memory):
    robot_at(pipeline, T0, (0.0, 0.0))
    robot_at(pipeline, T0 + 1.0, (0.0, 0.0))
    pipeline.on_message("detections_3d", msgs.detections_3d(MAKE, T0 + 0.5, "camera_optical_frame",
                                                            ("red mug", 0.0, 0.0, 1.0)), T0 + 0.5)
    assert pipeline.waiting == 1
    static_camera(pipeline, t=T0 + 0.6)  # /tf_static arrives 0.1 s later
    (_, x, y, *_), = stored(memory, "detections_3d")
    assert (x, y) == pytest.approx((10.0, 1.2))


def test_a_bearing_uses_the_cameras_pose_from_tf_not_the_static_parameters(pipeline, memory):
    pipeline.on_camera_info("/camera/camera_info", msgs.camera_info(MAKE, T0))
    static_camera(pipeline, yaw=math.pi / 2)  # the camera looks to the robot's left; camera.yaw says 0
    robot_at(pipeline, T0, (0.0, 0.0))
    robot_at(pipeline, T0 + 1.0, (0.0, 0.0))
    boxes = msgs.boxes(MAKE, T0 + 0.5, ("red mug", 320.0, 240.0, 40.0, 40.0))
    for detection in [boxes, *boxes.detections]:
        detection.header.frame_id = "camera_optical_frame"
    pipeline.on_message("detections", boxes, T0 + 0.5)
    (_, x, y, _, _, meta), = stored(memory, "detections")
    ox, oy, oz, azimuth, elevation, _ = meta["ray"]
    # the robot faces map +y (odom is turned 90 degrees); the camera another 90 degrees: it looks along -x
    assert azimuth == pytest.approx(math.pi, abs=1e-4) or azimuth == pytest.approx(-math.pi, abs=1e-4)
    assert (ox, oy, oz) == pytest.approx((10.0, 0.2, 0.9), abs=1e-3) and elevation == pytest.approx(0.0, abs=1e-4)


def test_without_tf_for_the_camera_the_static_mounting_is_the_fallback(pipeline, memory):
    pipeline.on_camera_info("/camera/camera_info", msgs.camera_info(MAKE, T0))
    robot_at(pipeline, T0, (0.0, 0.0))
    robot_at(pipeline, T0 + 1.0, (0.0, 0.0))
    pipeline.on_message("detections", msgs.boxes(MAKE, T0 + 0.5, ("red mug", 320.0, 240.0, 40.0, 40.0)), T0 + 0.5)
    robot_at(pipeline, T0 + 2.0, (0.0, 0.0))  # TF moves on; the boxes' frame 'camera' never appears
    (_, _, _, _, _, meta), = stored(memory, "detections")
    assert meta["ray"][3] == pytest.approx(math.pi / 2, abs=1e-4)  # camera.yaw 0: along the robot's heading


# ---------------------------------------------------------------------- reboots and relocalization
def test_the_same_object_before_and_after_a_reboot_is_one_place_and_one_entity(pipeline, memory):
    static_camera(pipeline)
    truth = (12.0, 5.0)
    # before: odom starts at map (10, 0) turned 90 degrees; the robot at odom (3, 0) = map (10, 3) faces +y
    for i in range(6):
        robot_at(pipeline, T0 + i, (3.0, 0.0), odom_yaw=0.0)
    pipeline.on_message("detections_3d", msgs.detections_3d(MAKE, T0 + 2.5, "camera_optical_frame",
                                                            ("red mug", 2.0, 0.0, 1.8)), T0 + 2.5)
    # reboot: odometry restarts at the origin; localization's map -> odom jumps to the robot's map pose
    for i in range(20, 26):
        robot_at(pipeline, T0 + i, (0.0, 0.0), map_odom=(10.0, 3.0, math.pi / 2))
    pipeline.on_message("detections_3d", msgs.detections_3d(MAKE, T0 + 22.5, "camera_optical_frame",
                                                            ("red mug", 2.0, 0.0, 1.8)), T0 + 22.5)
    rows = stored(memory, "detections_3d")
    assert len(rows) == 2
    for _, x, y, *_ in rows:
        assert (x, y) == pytest.approx(truth)
    memory.extract_entities(final=True)
    mugs = memory.store.reader().execute("SELECT x, y FROM entities WHERE name = 'red mug'").fetchall()
    assert len(mugs) == 1 and mugs[0] == pytest.approx(truth)


def test_a_relocalization_jump_is_not_smeared(pipeline, memory):
    robot_at(pipeline, T0, (0.0, 0.0), map_odom=(10.0, 0.0, math.pi / 2))
    robot_at(pipeline, T0 + 0.2, (0.0, 0.0), map_odom=(10.0, 2.0, math.pi / 2))  # localization corrects by 2 m
    pipeline.on_message("scene", caption(T0 + 0.15), T0 + 0.15)
    (_, x, y, *_), = stored(memory, "scene")
    assert (x, y) == pytest.approx((10.0, 2.0))  # the nearer transform, not the 1.5 m point in between
    assert pipeline.transforms.stats().jumps == 1


# ---------------------------------------------------------------------- bad transforms
def test_bad_transforms_are_refused_counted_and_logged_once(pipeline, memory, warnings):
    robot_at(pipeline, T0, (0.0, 0.0))
    robot_at(pipeline, T0 + 1.0, (2.0, 0.0))
    bad = [
        msgs.tf_message(MAKE, tf(T0 + 1.5, "map", "odom", math.nan, 0.0)),
        msgs.tf_message(MAKE, tf(T0 + 1.5, "base_link", "map", 0.0, 0.0)),  # a cycle
        msgs.tf_message(MAKE, tf(T0 + 1.5, "world", "odom", 0.0, 0.0)),  # a second parent for odom
        msgs.tf_message(MAKE, tf(T0 + 1000.0, "map", "odom", 50.0, 0.0)),  # from the future
    ]
    for msg in bad * 2:
        assert pipeline.on_tf(msg, static=False, receive_time=T0 + 1.0) == 0
    rejected = pipeline.transforms.stats().rejected
    assert rejected == {"not finite (NaN) or not a rotation": 2, "cycle": 2, "second parent": 2,
                        "stamped in the future": 2}
    assert len([w for w in warnings if "transform refused" in w]) == 4
    pipeline.on_message("scene", caption(T0 + 0.5), T0 + 0.5)
    (_, x, y, *_), = stored(memory, "scene")
    assert (x, y) == pytest.approx((10.0, 1.0))  # what was there still places


def test_odometry_feeds_odom_to_base_where_tf_lacks_it(pipeline, memory):
    for i in range(3):
        pipeline.on_tf(msgs.tf_message(MAKE, tf(T0 + i, "map", "odom", 10.0, 0.0, yaw=math.pi / 2)), static=False,
                       receive_time=T0 + i)
        assert pipeline.on_odometry(msgs.odometry(MAKE, T0 + i, 2.0 * i, 0.0), T0 + i)
    pipeline.on_message("scene", caption(T0 + 0.5), T0 + 0.5)
    (_, x, y, *_), = stored(memory, "scene")
    assert (x, y) == pytest.approx((10.0, 1.0))


def test_without_a_fixed_frame_tf_is_not_used(memory, tmp_path):
    pipeline = IngestPipeline(memory, parse_params(flat(tmp_path / "memory.db", fixed_frame="")))
    assert robot_at(pipeline, T0, (0.0, 0.0)) == 0
    pipeline.on_odometry(msgs.odometry(MAKE, T0, 1.0, 2.0), T0)
    pipeline.on_message("scene", caption(T0), T0)
    (_, x, y, _, frame, _), = stored(memory, "scene")
    assert (x, y) == (1.0, 2.0)


def test_the_live_pose_is_the_newest_pose_in_map(pipeline, memory, clock):
    clock.now = T0 + 1.0
    assert pipeline.live_pose() is None
    robot_at(pipeline, T0 + 1.0, (2.0, 0.0))
    assert pipeline.live_pose() == pytest.approx((10.0, 2.0, 0.0))
    clock.now = T0 + 30.0
    assert pipeline.live_pose() is None  # too old to be where the robot is now


@pytest.mark.parametrize("override, words", [
    ({"base_frame": "map"}, "base_frame and fixed_frame are both 'map'"),
    ({"fixed_frame": "my map"}, "is not a TF frame name"),
    ({"tf_timeout": -1.0}, "tf_timeout must be zero or a positive number"),
    ({"tf_timeout": math.nan}, "tf_timeout must be a finite number"),
    ({"tf_static_topic": "/tf"}, "tf_topic and tf_static_topic must differ"),
    ({"base_frame": ""}, "base_frame must name the robot's base frame"),
])
def test_bad_frame_parameters_are_refused_in_words(tmp_path, override, words):
    with pytest.raises(ParamError, match=words):
        parse_params(flat(tmp_path / "m.db", **override))


def test_the_memory_frame_is_the_fixed_frame(tmp_path):
    params = parse_params(flat(tmp_path / "m.db", fixed_frame="/map", frame_id="odom"))
    assert params.fixed_frame == "map" and params.memory.frame_id == "map"
    assert parse_params(flat(tmp_path / "m.db", fixed_frame="", frame_id="odom")).memory.frame_id == "odom"


def test_a_bag_without_tf_says_so_and_places_nothing(tmp_path, caplog):
    from emem_ros.replay import ReplayOptions, replay_bag
    from emem_ros.ros.params import load_params_yaml

    root = Path(__file__).resolve().parents[1]
    params = load_params_yaml(root / "config" / "memory.yaml",
                              overrides={"fixed_frame": "map", "embedding.backend": "hashing"})
    with caplog.at_level(logging.INFO):
        summary = replay_bag(root / "rosbags" / "camera_only_mcap", params,
                             ReplayOptions(db_path=str(tmp_path / "m.db"), progress=False, consolidate=False))
    assert any("the bag has no /tf" in note for note in summary.notes)
    assert summary.observations > 0 and summary.without_position == summary.observations
    assert sum(layer.no_transform for layer in summary.layers) == summary.observations
    assert "no transform" in summary.render() or "without a position" in summary.render()
