"""The replay typestores: vision_msgs 4.x exactly as upstream defines it, our own messages, clear errors.

The RIHS01 hashes below are those rosidl generated for vision_msgs 4.x
(``rosidl_generator_c`` ``*__description.c`` of a Humble/Jazzy build). The
hash covers every field name, type and order, so a typo in one of the shipped
.msg files, or a field from another vision_msgs version, fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rosbags")

from emem_ros.core.errors import InvalidInputError
from emem_ros.replay.typestore import VISION_MSGS_DIR, load_typestore, own_msg_dir

UPSTREAM_RIHS01 = {
    "Detection2D": "0d12b69df5c593b3455b7346fac8205437a7d4bcb09b9e0e0b2dde787ded38ea",
    "Detection2DArray": "214274120007f4a683866481336b70310268cfa107aebe9d594a6acf75bda968",
    "Detection3D": "ddd703be132ab0b69d33121f1bb034132bfbb3b0ac5f9fb1516005ba1c8a265b",
    "Detection3DArray": "793f5eab9595ac1c0da07873cc859db42eae51f0ee76056db8562515d830e018",
    "BoundingBox2D": "008eacbb0cf8f26e83795547bed013eec3675485ef386ec056d80eaaf1c1ce2f",
    "BoundingBox3D": "bbb73a65c163d7f9bb29009c7bde9f7faa576bd2d23299c4511d19230dab4698",
    "ObjectHypothesis": "51da43cec11c01957a64d1e05a24acd18aae7745ec30b74348ad5f6d634f7f90",
    "ObjectHypothesisWithPose": "41c12344c0396c48b81df12467c192d99b2a0eb1463c5c37194e4223251c80bc",
    "Point2D": "eab0e83f44ab4de92ceaf76dd7d0e7638f2bdd1d16ffbe16c7a136c48e407247",
    "Pose2D": "b0b5d1d7b4c20dd4fcde3ed1d4b289a919290572007d67a97043814db25d3648",
    "LabelInfo": "3d37df4015cdf660cc851c51897f2acd957e1ca6205ba0a99aebffb9406b0783",
    "VisionClass": "1e4a11f0fed50b5623cb8ff26ca0e37952a48a9c074d16f804b44e9164c2037a",
}
OWN = ("BodyReading", "Entity", "Episode", "Gist", "MemoryHit")


@pytest.mark.parametrize("distro", ["humble", "jazzy"])
def test_vision_msgs_hash_like_upstream(distro):
    store = load_typestore(distro)
    for name, digest in UPSTREAM_RIHS01.items():
        assert store.hash_rihs01(f"vision_msgs/msg/{name}") == f"RIHS01_{digest}", name


def test_every_shipped_vision_msg_is_registered():
    store = load_typestore("humble", own_msgs=False)
    shipped = sorted(p.stem for p in VISION_MSGS_DIR.glob("*.msg"))
    assert len(shipped) >= 14
    assert all(f"vision_msgs/msg/{name}" in store.types for name in shipped)


def test_our_own_messages_are_registered_from_the_checkout():
    assert own_msg_dir() is not None
    store = load_typestore("humble")
    assert all(f"emem_ros/msg/{name}" in store.types for name in OWN)
    assert not any(t.startswith("emem_ros/") for t in load_typestore("humble", own_msgs=False).types)


def test_missing_own_messages_are_not_fatal_but_an_empty_given_folder_is(tmp_path):
    assert own_msg_dir([tmp_path / "nowhere", tmp_path]) is None
    with pytest.raises(InvalidInputError, match="no .msg files"):
        load_typestore("humble", own_msgs=tmp_path)


def test_unknown_distro_is_refused_in_words():
    with pytest.raises(InvalidInputError, match="humble, jazzy"):
        load_typestore("noetic")


def test_each_call_gives_a_fresh_store():
    a, b = load_typestore(), load_typestore()
    assert a is not b and a.types is not b.types


def test_a_3d_detection_round_trips_through_cdr():
    store = load_typestore("jazzy")
    T = store.types
    point = T["geometry_msgs/msg/Point"](x=1.0, y=4.6, z=0.9)
    quat = T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0)
    pose = T["geometry_msgs/msg/Pose"](position=point, orientation=quat)
    hyp = T["vision_msgs/msg/ObjectHypothesisWithPose"](
        hypothesis=T["vision_msgs/msg/ObjectHypothesis"](class_id="red mug", score=0.9),
        pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)))
    det = T["vision_msgs/msg/Detection3D"](
        header=T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=5, nanosec=0), frame_id="odom"),
        results=[hyp], bbox=T["vision_msgs/msg/BoundingBox3D"](center=pose, size=T["geometry_msgs/msg/Vector3"](
            x=0.1, y=0.1, z=0.1)), id="trk-1")
    msg = T["vision_msgs/msg/Detection3DArray"](header=det.header, detections=[det])
    raw = store.serialize_cdr(msg, "vision_msgs/msg/Detection3DArray")
    back = store.deserialize_cdr(raw, "vision_msgs/msg/Detection3DArray")
    got = back.detections[0]
    assert (got.id, got.results[0].hypothesis.class_id) == ("trk-1", "red mug")
    assert got.results[0].pose.pose.position.y == pytest.approx(4.6)
