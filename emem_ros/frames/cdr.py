"""tf2_msgs/TFMessage straight from its CDR bytes: what the live node subscribes raw and replay reads from a bag.

A robot's /tf is its busiest topic; building rclpy message objects for every
transform costs more than the memory's whole use of them. Both the live node
(a raw subscription) and ``emem replay`` (the bag's serialized message) hand
the same bytes to ``parse_tf_message``, so they read transforms identically.

Layout (XCDR1, as every ROS 2 RMW sends it): a 4-byte encapsulation header
(``00 01`` little endian, ``00 00`` big endian), then ``sequence<TransformStamped>``:
a uint32 count, and per element the header (int32 sec, uint32 nanosec,
string frame_id), string child_frame_id and seven float64 (translation x y z,
rotation x y z w). Strings are a uint32 length counting the terminating NUL,
then the bytes. Primitives are aligned to their size from the start of the
payload (after the encapsulation header).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional, Union

from emem_ros.frames.transform import Transform, from_message

MAX_TRANSFORMS = 10_000
"""More transforms in one message than this is not a TFMessage (a corrupt count)."""


@dataclass(frozen=True)
class StampedTransform:
    parent: str
    child: str
    stamp: Optional[float]
    """Seconds; None when zero (an unstamped transform)."""
    transform: Optional[Transform]
    """None when not finite or not a rotation."""


class _Vector:
    __slots__ = ("x", "y", "z", "w")

    def __init__(self, x: float, y: float, z: float, w: float = 0.0) -> None:
        self.x, self.y, self.z, self.w = x, y, z, w


class _Pose:
    __slots__ = ("translation", "rotation")

    def __init__(self, translation: _Vector, rotation: _Vector) -> None:
        self.translation, self.rotation = translation, rotation


def parse_tf_message(data: Union[bytes, bytearray, memoryview]) -> list[StampedTransform]:
    """The transforms of a serialized tf2_msgs/TFMessage; ValueError when the bytes are not one."""
    view = memoryview(data)
    if len(view) < 8:
        raise ValueError(f"{len(view)} bytes are too short for a TFMessage")
    if view[0] != 0 or view[1] not in (0, 1):
        raise ValueError(f"unknown CDR encapsulation {bytes(view[:2]).hex()}")
    order = "<" if view[1] == 1 else ">"
    payload = view[4:]
    u32, i32, f64x7 = struct.Struct(order + "I"), struct.Struct(order + "i"), struct.Struct(order + "7d")
    end = len(payload)

    def need(offset: int, size: int) -> None:
        if offset + size > end:
            raise ValueError("the TFMessage ends in the middle of a transform")

    def string(offset: int) -> tuple[str, int]:
        offset = (offset + 3) & ~3
        need(offset, 4)
        (length,) = u32.unpack_from(payload, offset)
        offset += 4
        need(offset, length)
        if length == 0:
            return "", offset
        raw = bytes(payload[offset:offset + length - 1])
        return raw.decode("utf-8", errors="replace"), offset + length

    need(0, 4)
    (count,) = u32.unpack_from(payload, 0)
    if count > MAX_TRANSFORMS:
        raise ValueError(f"a TFMessage of {count} transforms (corrupt)")
    offset = 4
    out: list[StampedTransform] = []
    for _ in range(count):
        offset = (offset + 3) & ~3
        need(offset, 8)
        (sec,) = i32.unpack_from(payload, offset)
        (nanosec,) = u32.unpack_from(payload, offset + 4)
        parent, offset = string(offset + 8)
        child, offset = string(offset)
        offset = (offset + 7) & ~7
        need(offset, 56)
        tx, ty, tz, qx, qy, qz, qw = f64x7.unpack_from(payload, offset)
        offset += 56
        stamp = sec + nanosec * 1e-9
        transform = from_message(_Pose(_Vector(tx, ty, tz), _Vector(qx, qy, qz, qw)))
        out.append(StampedTransform(parent, child, stamp if stamp > 0.0 else None, transform))
    return out
