"""TFMessage from its CDR bytes (what the node's raw /tf subscription and a bag give) equals the decoded message."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("rosbags.typesys")

from emem_ros.frames.buffer import TransformBuffer
from emem_ros.frames.cdr import parse_tf_message
from test.support import ros_messages as msgs
from test.support.ros_messages import InterfaceFactory

MAKE = InterfaceFactory()
T0 = 1_741_000_000.25


def message():
    return msgs.tf_message(MAKE, msgs.transform_stamped(MAKE, T0, "map", "odom", 1.5, -2.0, 0.1, yaw=0.3),
                           msgs.transform_stamped(MAKE, T0 + 0.05, "odom", "base_link_with_a_long_name", 3.0, 4.0,
                                                  rotation=(0.1, 0.2, 0.3, 0.9)),
                           msgs.transform_stamped(MAKE, T0, "odom", "x", math.nan, 0.0))


@pytest.mark.parametrize("little_endian", [True, False])
def test_the_cdr_bytes_give_the_transforms_of_the_message(little_endian):
    data = MAKE.store.serialize_cdr(message(), "tf2_msgs/msg/TFMessage", little_endian=little_endian)
    items = parse_tf_message(data)
    assert [(i.parent, i.child) for i in items] == [("map", "odom"), ("odom", "base_link_with_a_long_name"),
                                                   ("odom", "x")]
    assert items[0].stamp == pytest.approx(T0, abs=1e-9) and items[1].stamp == pytest.approx(T0 + 0.05, abs=1e-9)
    assert items[0].transform.translation == pytest.approx((1.5, -2.0, 0.1))
    assert items[0].transform.yaw == pytest.approx(0.3)
    norm = math.sqrt(0.01 + 0.04 + 0.09 + 0.81)
    assert items[1].transform.rotation == pytest.approx(tuple(v / norm for v in (0.1, 0.2, 0.3, 0.9)))
    assert items[2].transform is None  # NaN


def test_raw_and_decoded_messages_fill_the_buffer_alike():
    data = MAKE.store.serialize_cdr(message(), "tf2_msgs/msg/TFMessage")
    raw, decoded = TransformBuffer(), TransformBuffer()
    assert raw.add_tf_message(data, static=False) == decoded.add_tf_message(message(), static=False)
    for source in ("odom", "base_link_with_a_long_name"):
        assert raw.lookup("map", source, T0 + 0.05, clamp=True) == decoded.lookup("map", source, T0 + 0.05, clamp=True)


@pytest.mark.parametrize("mangle", [
    lambda b: b[:3],  # too short
    lambda b: b"\x07\x07" + b[2:],  # unknown encapsulation
    lambda b: b[:40],  # cut in the middle
    lambda b: b[:4] + b"\xff\xff\xff\x7f" + b[8:],  # a corrupt count
])
def test_corrupt_bytes_are_refused_and_counted(mangle):
    data = bytes(MAKE.store.serialize_cdr(message(), "tf2_msgs/msg/TFMessage"))
    with pytest.raises(ValueError):
        parse_tf_message(mangle(data))
    buffer = TransformBuffer()
    accepted, refused = buffer.add_tf_message(mangle(data), static=False)
    assert accepted == 0 and refused[0].startswith("not a TFMessage")
    assert buffer.stats().rejected["not a TFMessage"] == 1
