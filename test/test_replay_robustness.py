"""Replay of bags with bad content: every bad message is skipped with a reason, nothing good is lost.

The bags are written into tmp_path with the real rosbags Writer (test/support/bags.py):
garbage CDR bytes, a type nobody knows, a custom type the bag defines itself,
a definition that differs from the typestore's, the wrong type on a layer's
topic, NaN odometry, damaged and missing files.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3

import pytest

pytest.importorskip("rosbags")

from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import EmemError
from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.replay import BagError, ReplayError, ReplayOptions, load_typestore, replay_bag
from emem_ros.replay.bagreader import BagReader
from emem_ros.replay.runner import resolve_distro
from emem_ros.ros.intake import IntakeConfig
from emem_ros.ros.params import LayerSpec, NodeParams
from test.support.bags import START, BagBuilder

WIDGET_MSG = "string label\nfloat64 weight\n"


def params(*layers: LayerSpec) -> NodeParams:
    memory = MemoryConfig(db_path="unused.db", flush_interval=0.0, index_save_interval=0.0)
    return NodeParams(memory=memory, layers=list(layers), embedding_backend="hashing", embedding_model="",
                      consolidation_period=0.0)


def layer(name: str, topic: str, msg_type: str) -> LayerSpec:
    return LayerSpec(name=name, topic=topic, msg_type=msg_type, intake=IntakeConfig())


SCENE = layer("scene", "/scene", "std_msgs/msg/String")


def replay(bag, tmp_path, *layers, name="memory.db", **options):
    options.setdefault("progress", False)
    return replay_bag(bag, params(*layers), ReplayOptions(db_path=str(tmp_path / name), **options))


def rows(db, sql="SELECT t.text, o.x, o.y FROM observations o JOIN texts t ON t.id = o.text_id ORDER BY o.stamp"):
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def walk(b: BagBuilder, seconds: int = 10) -> BagBuilder:
    """Odometry at 10 Hz along the x axis, 0.1 m/s."""
    b.topic("/odom", "nav_msgs/msg/Odometry")
    for i in range(seconds * 10 + 1):
        b.add("/odom", i / 10, b.odometry(i / 10, i / 100, 0.0))
    return b


# ---------------------------------------------------------------------- bad bytes and bad types
@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_garbage_and_truncated_bytes_are_skipped_with_a_reason(tmp_path, storage):
    b = walk(BagBuilder()).topic("/scene", "std_msgs/msg/String")
    good = bytes(b.store.serialize_cdr(b.string("a kitchen"), "std_msgs/msg/String"))
    b.add("/scene", 1.0, b.string("a kitchen"))
    b.add("/scene", 2.0, b"\x00\x01\x00\x00\xff\xff\xff\x7fnope")  # a 2 GB string length
    b.add("/scene", 3.0, good[:6])  # cut short
    b.add("/scene", 4.0, b"xx")  # not even a CDR header
    b.add("/scene", 5.0, b.string("a hallway"))
    summary = replay(b.write(tmp_path / "bag", storage), tmp_path, SCENE)
    scene = summary.layer("scene")
    assert (scene.messages, scene.observations) == (5, 2)
    assert sum(scene.skipped.values()) == 3
    assert all("could not deserialize a std_msgs/msg/String message" in why for why in scene.skipped)
    assert [r[0] for r in rows(tmp_path / "memory.db")] == ["a kitchen", "a hallway"]
    assert "could not deserialize" in summary.render()


def test_a_type_nobody_knows_is_counted_not_fatal(tmp_path):
    """No typestore has acme_msgs and the bag carries no definition: every message is skipped, once each."""
    writer_store = load_typestore("humble", own_msgs=False)
    from rosbags.typesys import get_types_from_msg

    writer_store.register(get_types_from_msg(WIDGET_MSG, "acme_msgs/msg/Widget"))
    b = walk(BagBuilder(writer_store)).topic("/widget", "acme_msgs/msg/Widget", msgdef="", rihs01="RIHS01_" + "0" * 64)
    b.topic("/scene", "std_msgs/msg/String")
    for i in range(4):
        b.add("/widget", 1.0 + i, writer_store.types["acme_msgs/msg/Widget"](label="bolt", weight=0.1))
    b.add("/scene", 2.5, b.string("a workshop"))
    summary = replay(b.write(tmp_path / "bag"), tmp_path, SCENE, layer("widgets", "/widget", "acme_msgs/msg/Widget"))
    widgets = summary.layer("widgets")
    assert (widgets.messages, widgets.observations) == (4, 0)
    (reason,) = widgets.skipped
    assert widgets.skipped[reason] == 4
    assert "acme_msgs/msg/Widget is unknown to the humble typestore" in reason and "no definition" in reason
    assert summary.layer("scene").observations == 1  # the rest of the bag is fine


def test_a_custom_type_is_decoded_with_the_bags_own_definition(tmp_path):
    writer_store = load_typestore("humble", own_msgs=False)
    from rosbags.typesys import get_types_from_msg

    writer_store.register(get_types_from_msg(WIDGET_MSG, "acme_msgs/msg/Widget"))
    b = walk(BagBuilder(writer_store)).topic("/widget", "acme_msgs/msg/Widget")
    b.add("/widget", 3.0, writer_store.types["acme_msgs/msg/Widget"](label="bolt", weight=0.25))
    summary = replay(b.write(tmp_path / "bag", "mcap"), tmp_path, layer("widgets", "/widget", "acme_msgs/msg/Widget"))
    assert summary.layer("widgets").observations == 1
    assert any("acme_msgs/msg/Widget is missing from the humble typestore" in n for n in summary.notes)
    ((text, x, y),) = rows(tmp_path / "memory.db")
    assert text == "label=bolt weight=0.25"  # the generic adapter's rendering
    assert (x, y) == pytest.approx((0.3, 0.0), abs=0.01)  # placed by the odometry at t = 3 s


def test_a_definition_that_differs_from_the_typestore_wins_when_the_bag_has_it(tmp_path):
    """A recorder's String with an extra field and its own type hash: decoded with the bag's definition."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    theirs = get_typestore(Stores.EMPTY)
    theirs.register(get_types_from_msg("string data\nint32 channel\n", "std_msgs/msg/String"))
    b = BagBuilder().topic("/scene", "std_msgs/msg/String", msgdef="string data\nint32 channel\n",
                           rihs01="RIHS01_" + "ab" * 32)
    raw = bytes(theirs.serialize_cdr(theirs.types["std_msgs/msg/String"](data="a garden", channel=7),
                                     "std_msgs/msg/String"))
    b.add("/scene", 1.0, raw)
    summary = replay(b.write(tmp_path / "bag"), tmp_path, SCENE)
    assert summary.layer("scene").observations == 1
    assert any("differs from the humble typestore" in n for n in summary.notes)
    assert rows(tmp_path / "memory.db")[0][0] == "a garden"


def test_the_wrong_type_on_a_layer_topic_is_skipped_with_both_types_named(tmp_path):
    b = BagBuilder().topic("/scene", "std_msgs/msg/Float64")
    b.add("/scene", 1.0, b.float64(0.5))
    summary = replay(b.write(tmp_path / "bag"), tmp_path, SCENE)
    (reason,) = summary.layer("scene").skipped
    assert "std_msgs/msg/Float64" in reason and "std_msgs/msg/String" in reason


# ---------------------------------------------------------------------- odometry
def test_nan_odometry_is_rejected_and_never_becomes_a_position(tmp_path):
    b = BagBuilder().topic("/odom", "nav_msgs/msg/Odometry").topic("/scene", "std_msgs/msg/String")
    for i in range(51):
        t = i / 10
        x = math.nan if 20 <= i < 30 else float(i)
        b.add("/odom", t, b.odometry(t, x, 2.0))
    b.add("/scene", 1.0, b.string("before"))
    b.add("/scene", 2.2, b.string("just after the last good pose"))  # 0.3 s after it: the nearest pose
    b.add("/scene", 2.7, b.string("deep in the NaN gap"))  # 0.8 s after it, and no newer pose has arrived yet
    b.add("/scene", 4.0, b.string("after"))
    summary = replay(b.write(tmp_path / "bag"), tmp_path, SCENE)
    assert summary.odometry.messages == 51 and summary.odometry.accepted == 41
    assert sum(summary.odometry.rejected.values()) == 10
    assert "not finite" in " ".join(summary.odometry.rejected)
    got = {text: (x, y) for text, x, y in rows(tmp_path / "memory.db")}
    assert got["before"] == pytest.approx((10.0, 2.0), abs=0.2)
    assert got["just after the last good pose"] == pytest.approx((19.0, 2.0), abs=1e-6)
    assert got["deep in the NaN gap"] == (None, None)  # no position rather than a NaN or a guess
    assert got["after"] == pytest.approx((40.0, 2.0), abs=0.2)
    assert summary.layer("scene").without_position == 1


def test_messages_without_odometry_are_stored_without_a_position(tmp_path):
    b = BagBuilder().topic("/scene", "std_msgs/msg/String")
    b.add("/scene", 1.0, b.string("somewhere"))
    summary = replay(b.write(tmp_path / "bag"), tmp_path, SCENE)
    assert summary.layer("scene").without_position == 1
    assert rows(tmp_path / "memory.db") == [("somewhere", None, None)]
    assert any("no odometry on /odom" in n for n in summary.notes)


# ---------------------------------------------------------------------- topics and clocks
def test_unsubscribed_topics_are_listed_and_missing_ones_named(tmp_path):
    b = walk(BagBuilder(), 2).topic("/chatter", "std_msgs/msg/String")
    b.add("/chatter", 1.0, b.string("hello"))
    summary = replay(b.write(tmp_path / "bag"), tmp_path, SCENE)
    assert summary.ignored_topics == {"/chatter": 1}
    assert summary.missing_topics == {"scene": "/scene"}
    assert summary.observations == 0
    text = summary.render()
    assert "/chatter (1)" in text and "scene (/scene)" in text


def test_the_memory_clock_is_bag_time_during_the_replay(tmp_path, make_memory):
    """Each message sees the memory's clock at its own bag time (what intake and 'last 10 minutes' rely on)."""
    memory = make_memory()
    seen: list[tuple[str, float]] = []
    original = memory.add_draft

    def spy(draft: ObservationDraft, robot=None):
        seen.append((draft.text, memory.now()))
        return original(draft, robot)

    memory.add_draft = spy  # type: ignore[method-assign]
    b = BagBuilder().topic("/scene", "std_msgs/msg/String")
    for t in (1.0, 60.0, 3600.0):
        b.add("/scene", t, b.string(f"at {t:.0f}"))
    replay_bag(b.write(tmp_path / "bag"), params(SCENE), ReplayOptions(progress=False), memory=memory)
    assert seen == [(f"at {t:.0f}", pytest.approx(START + t + 0.01, abs=1e-3)) for t in (1.0, 60.0, 3600.0)]
    assert memory.now() == pytest.approx(START + 3600.01, abs=1e-3)  # set back after the final consolidation
    assert not memory.closed  # a memory the caller passed in stays open


# ---------------------------------------------------------------------- files
@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_a_cut_off_bag_fails_before_anything_is_written(tmp_path, storage):
    b = walk(BagBuilder(), 5).topic("/scene", "std_msgs/msg/String")
    b.add("/scene", 1.0, b.string("caption"))
    bag = b.write(tmp_path / "bag", storage)
    file = next(p for p in bag.iterdir() if p.suffix in (".db3", ".mcap"))
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(BagError, match="cannot read the bag"):
        replay(bag, tmp_path, SCENE)
    assert not (tmp_path / "memory.db").exists()


def test_a_bag_damaged_in_the_middle_keeps_what_came_before_and_says_so(tmp_path):
    b = walk(BagBuilder(), 60).topic("/scene", "std_msgs/msg/String")
    for i in range(60):
        b.add("/scene", i + 0.5, b.string(f"caption {i}"))
    bag = b.write(tmp_path / "bag", "mcap")
    file = bag / "bag.mcap"
    data = bytearray(file.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 20_000] = b"\x07" * 20_000  # the chunk index at the end stays intact
    file.write_bytes(bytes(data))
    summary = replay(bag, tmp_path, SCENE)
    assert summary.stopped_early and "could not be read" in summary.stopped_early
    assert "STOPPED EARLY" in summary.render()
    stored = [r[0] for r in rows(tmp_path / "memory.db")]
    assert 0 < len(stored) < 60
    assert stored == [f"caption {i}" for i in range(len(stored))]  # a clean prefix: nothing garbled stored


@pytest.mark.parametrize("make, words", [
    (lambda p: p / "missing", "no bag at"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "without metadata.yaml"),
    (lambda p: (p / "notes.txt").write_text("hi") and p / "notes.txt", "not a bag"),
    (lambda p: (p / "bad.db3").write_bytes(b"not sqlite at all" * 10) and p / "bad.db3", "cannot"),
])
def test_paths_that_are_not_bags_get_plain_errors(tmp_path, make, words):
    path = make(tmp_path)
    with pytest.raises(EmemError) as info:
        replay(path, tmp_path, SCENE)
    assert words in str(info.value)
    assert not (tmp_path / "memory.db").exists()


def test_an_existing_memory_is_refused_unless_appending(tmp_path):
    b = walk(BagBuilder(), 2).topic("/scene", "std_msgs/msg/String")
    b.add("/scene", 1.0, b.string("first"))
    bag = b.write(tmp_path / "bag")
    replay(bag, tmp_path, SCENE)
    with pytest.raises(ReplayError, match="already exists"):
        replay(bag, tmp_path, SCENE)
    summary = replay(bag, tmp_path, SCENE, append=True)
    assert summary.observations == 1 and summary.observations_total == 2


@pytest.mark.parametrize("storage, suffix", [("sqlite3", ".db3"), ("mcap", ".mcap")])
def test_a_bare_compressed_file_replays_like_its_folder(tmp_path, storage, suffix):
    """Without metadata.yaml nothing says the .db3 holds zstd per message: the magic bytes do."""
    b = walk(BagBuilder(), 5).topic("/scene", "std_msgs/msg/String")
    for i in range(5):
        b.add("/scene", i + 0.5, b.string(f"caption {i}"))
    bag = b.write(tmp_path / "bag", storage, compress=True)
    folder = replay(bag, tmp_path, SCENE, name="folder.db")
    bare = replay(bag / f"bag{suffix}", tmp_path, SCENE, name="bare.db")
    assert bare.layer("scene").skipped == {} and bare.odometry.accepted == 51
    assert rows(tmp_path / "bare.db") == rows(tmp_path / "folder.db")
    assert len(rows(tmp_path / "bare.db")) == folder.observations == 5


def test_consolidation_runs_after_the_bag_unless_skipped(tmp_path):
    b = walk(BagBuilder(), 40).topic("/detections", "vision_msgs/msg/Detection2DArray")
    for i in range(40):
        b.add("/detections", i + 0.5, b.detections2d(i + 0.5, [("chair", 0.9)]))
    bag = b.write(tmp_path / "bag")
    spec = layer("detections", "/detections", "vision_msgs/msg/Detection2DArray")
    done = replay(bag, tmp_path, spec, name="done.db")
    skipped = replay(bag, tmp_path, spec, name="raw.db", consolidate=False)
    assert done.consolidated and done.gists_total >= 1 and done.entities_total >= 1
    assert not skipped.consolidated and (skipped.gists_total, skipped.entities_total) == (0, 0)
    assert skipped.observations == done.observations == 40
    assert "not run" in skipped.render()


def test_bag_info_and_distro_choice(tmp_path):
    b = walk(BagBuilder(), 1)
    with BagReader(b.write(tmp_path / "bag", "mcap")) as reader:
        info = reader.info()
    assert (info.storage, info.messages, info.topic("/odom").count) == ("mcap", 11, 11)
    assert info.end - info.start == pytest.approx(1.0, abs=1e-6)
    assert resolve_distro("auto", "jazzy") == "jazzy"
    assert resolve_distro("auto", "rosbags") == "humble"
    with pytest.raises(ReplayError, match="--distro"):
        resolve_distro("iron", None)


def test_a_jazzy_typestore_replays_the_same_bag(tmp_path):
    b = walk(BagBuilder(load_typestore("jazzy", own_msgs=False)), 2).topic("/detections",
                                                                           "vision_msgs/msg/Detection2DArray")
    b.add("/detections", 1.0, b.detections2d(1.0, [("red mug", 0.9), ("cup", 0.4)]))
    spec = layer("detections", "/detections", "vision_msgs/msg/Detection2DArray")
    summary = replay(b.write(tmp_path / "bag"), tmp_path, spec, distro="jazzy")
    assert summary.distro == "jazzy" and summary.layer("detections").observations == 2
    assert sorted(r[0] for r in rows(tmp_path / "memory.db")) == ["cup", "red mug"]


def test_params_may_not_be_mutated_by_a_replay(tmp_path):
    p = params(SCENE)
    before = dataclasses.replace(p.memory)
    b = BagBuilder().topic("/scene", "std_msgs/msg/String")
    b.add("/scene", 1.0, b.string("x"))
    replay_bag(b.write(tmp_path / "bag"), p, ReplayOptions(db_path=str(tmp_path / "m.db"), progress=False))
    assert p.memory == before
