"""A bag recorded on ROS 2 Jazzy replays in the ROS-free core exactly like the Humble-era bag it came from.

``rosbags/patrol_jazzy_mcap`` is the first 60 s of ``rosbags/patrol_mcap`` played on Jazzy with
``ros2 bag play --clock`` and recorded there by ``ros2 bag record --use-sim-time --storage mcap
--storage-preset-profile zstd_small`` (rosbags/README.md): what Jazzy's rosbag2 0.26 writes —
metadata version 9, ``ros_distro: jazzy``, a RIHS01 type hash per topic, QoS profiles as a YAML list,
zstd-compressed mcap chunks. The same messages, cut from the bundled bag by these tests, are the
reference: decoding and the replay's intake must not see a difference.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml

pytest.importorskip("rosbags")

from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import Writer
from rosbags.rosbag2.enums import StoragePlugin

from emem_ros.cli.common import open_memory
from emem_ros.replay import ReplayOptions, replay_bag
from emem_ros.replay.typestore import load_typestore
from emem_ros.ros import distro
from emem_ros.ros.params import load_params_yaml
from test.support.bags import BAGS, REPO

JAZZY_BAG = BAGS / "patrol_jazzy_mcap"
PATROL = BAGS / "patrol_mcap"
PARAMS = REPO / "config" / "memory.yaml"


def hashing_params():
    return dataclasses.replace(load_params_yaml(PARAMS), embedding_backend="hashing", embedding_model="")


def messages(path):
    """topic -> [(header stamp or None, the message)] in bag order, decoded by rosbags."""
    out: dict[str, list] = {}
    with AnyReader([path]) as reader:
        for connection, _, raw in reader.messages():
            msg = reader.deserialize(raw, connection.msgtype)
            header = getattr(msg, "header", None)
            stamp = header.stamp.sec + header.stamp.nanosec * 1e-9 if header is not None else None
            out.setdefault(connection.topic, []).append((stamp, msg))
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The bundled patrol bag cut to what the Jazzy bag holds (its first N messages per topic), version 8."""
    counts = {topic: len(msgs) for topic, msgs in messages(JAZZY_BAG).items()}
    path = tmp_path_factory.mktemp("reference") / "patrol_first_minute"
    store = load_typestore("humble")
    with AnyReader([PATROL]) as reader, Writer(path, version=8, storage_plugin=StoragePlugin.MCAP) as writer:
        out = {c.id: writer.add_connection(c.topic, c.msgtype, typestore=store)
               for c in reader.connections if c.topic in counts}
        taken = dict.fromkeys(counts, 0)
        for connection, stamp, raw in reader.messages():
            if connection.id in out and taken[connection.topic] < counts[connection.topic]:
                writer.write(out[connection.id], stamp, raw)
                taken[connection.topic] += 1
    assert taken == counts
    return path


def test_the_fixture_is_what_jazzy_writes():
    metadata = yaml.safe_load((JAZZY_BAG / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    facts = distro.BAGS["jazzy"]
    assert metadata["version"] == facts.metadata_version == 9
    assert metadata["ros_distro"] == "jazzy" and metadata["storage_identifier"] == facts.default_storage
    topics = [t["topic_metadata"] for t in metadata["topics_with_message_count"]]
    assert all(t["type_description_hash"].startswith("RIHS01_") for t in topics)
    assert all(isinstance(t["offered_qos_profiles"], list) for t in topics)  # a string up to version 8


def test_every_recorded_type_hash_is_the_jazzy_typestores():
    store = load_typestore(distro.typestore_distro("jazzy"))
    with AnyReader([JAZZY_BAG]) as reader:
        for connection in reader.connections:
            assert store.hash_rihs01(connection.msgtype) == connection.digest, connection.msgtype


def test_the_jazzy_bag_holds_the_patrols_first_minute_message_for_message(reference):
    jazzy, humble = messages(JAZZY_BAG), messages(reference)
    assert jazzy.keys() == humble.keys() and len(jazzy["/odom"]) == 600
    for topic in jazzy:
        assert [s for s, _ in jazzy[topic]] == [s for s, _ in humble[topic]], topic
    assert [m.data for _, m in jazzy["/scene"]] == [m.data for _, m in humble["/scene"]]
    first = [m for _, m in jazzy["/detections"] if m.detections][0]
    twin = [m for _, m in humble["/detections"] if m.detections][0]
    assert first.detections[0].results[0].hypothesis.class_id == twin.detections[0].results[0].hypothesis.class_id
    assert first.detections[0].bbox.center.position.x == twin.detections[0].bbox.center.position.x


def test_emem_replay_of_the_jazzy_bag_equals_the_reference(reference, tmp_path):
    jazzy = replay_bag(JAZZY_BAG, hashing_params(), ReplayOptions(db_path=str(tmp_path / "jazzy.db"), progress=False))
    humble = replay_bag(reference, hashing_params(), ReplayOptions(db_path=str(tmp_path / "ref.db"), progress=False))
    assert jazzy.distro == "jazzy" and humble.distro == "humble"
    assert not [n for n in jazzy.notes if "definition recorded in the bag" in n], jazzy.notes
    assert jazzy.odometry.accepted == humble.odometry.accepted == 600
    for report in humble.layers:
        twin = jazzy.layer(report.name)
        got = (twin.messages, twin.observations, twin.dropped_by_intake, twin.skipped)
        want = (report.messages, report.observations, report.dropped_by_intake, report.skipped)
        if report.name == "scene":
            # Captions have no header: stamped with bag time, which the Jazzy recorder took from /clock
            # (40 Hz) on arrival. Same messages; one may fall on the other side of min_period.
            assert got[0] == want[0] and abs(got[1] - want[1]) <= 1, (got, want)
        else:
            assert got == want, report.name
        # Bag time is arrival time: the first battery reading arrived 8 ms before the first odometry on
        # Jazzy (90 ms of latency against 98), so it had no pose yet; in the cut it came after it.
        assert abs(twin.without_position - report.without_position) <= 1, report.name
    assert jazzy.layer("detections_3d").observations > 0 and jazzy.layer("scene").without_position == 0

    memory = open_memory(tmp_path / "jazzy.db")
    try:
        answer = memory.tools.call("locate", concept="red mug")
    finally:
        memory.close()
    assert answer.found
    mug = (1.0, 4.6)  # rosbags/ground_truth.json
    assert math.dist(answer.position[:2], mug) <= 0.3
