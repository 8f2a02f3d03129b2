"""The transform tree (emem_ros.frames): tf2's lookups, and the refusals and guards tf2 lacks."""

from __future__ import annotations

import math
import random

import pytest

from emem_ros.frames.buffer import LookupFailure, TransformBuffer
from emem_ros.frames.transform import Transform, from_yaw, interpolate, rotate
from emem_ros.geometry.rays import OPTICAL_IN_BODY

T0 = 1_700_000_000.0


def close(a, b, tol=1e-9):
    return all(abs(x - y) <= tol for x, y in zip(a, b))


def robot_tree(buffer: TransformBuffer, *, stamps=(0.0, 1.0), odom_x=(0.0, 1.0), map_x=5.0) -> None:
    # base_link moves 1 m between two odometry poses: motion, not a jump (base_link is a moving frame)
    """map -> odom (a shift of map_x), odom -> base_link moving along x, base_link -> camera_optical (static)."""
    for dt, x in zip(stamps, odom_x):
        assert buffer.set_transform("map", "odom", T0 + dt, from_yaw(map_x, 0.0, 0.0, 0.0)) is None
        assert buffer.set_transform("odom", "base_link", T0 + dt, from_yaw(x, 0.0, 0.0, 0.0)) is None
    camera = from_yaw(0.2, 0.0, 0.9, 0.0).compose(OPTICAL_IN_BODY)
    assert buffer.set_transform("base_link", "camera_optical_frame", 0.0, camera, static=True) is None


# ---------------------------------------------------------------------- maths
def test_compose_and_inverse_undo_each_other():
    rng = random.Random(3)
    for _ in range(50):
        q = [rng.uniform(-1, 1) for _ in range(4)]
        n = math.sqrt(sum(v * v for v in q))
        t = Transform((rng.uniform(-5, 5), rng.uniform(-5, 5), rng.uniform(-5, 5)), tuple(v / n for v in q))
        p = (rng.uniform(-3, 3), rng.uniform(-3, 3), rng.uniform(-3, 3))
        assert close(t.inverse().apply(t.apply(p)), p, 1e-9)
        assert close(t.compose(t.inverse()).apply(p), p, 1e-9)


def test_interpolation_is_lerp_and_slerp_the_shorter_way_round():
    a, b = from_yaw(0.0, 0.0, 0.0, 3.0), from_yaw(2.0, 4.0, 0.0, -3.0)
    mid = interpolate(a, b, 0.5)
    assert close(mid.translation, (1.0, 2.0, 0.0))
    assert abs(abs(mid.yaw) - math.pi) < 1e-9  # through pi, not through 0


def test_the_optical_frame_looks_along_the_body_x_axis():
    assert close(rotate(OPTICAL_IN_BODY.rotation, (0.0, 0.0, 1.0)), (1.0, 0.0, 0.0))  # z forward
    assert close(rotate(OPTICAL_IN_BODY.rotation, (1.0, 0.0, 0.0)), (0.0, -1.0, 0.0))  # x right
    assert close(rotate(OPTICAL_IN_BODY.rotation, (0.0, 1.0, 0.0)), (0.0, 0.0, -1.0))  # y down


# ---------------------------------------------------------------------- lookups
def test_a_chain_is_composed_and_interpolated_at_the_stamp():
    buffer = TransformBuffer(moving_frames=frozenset({'base_link'}))
    robot_tree(buffer)
    robot = buffer.lookup("map", "base_link", T0 + 0.25)
    assert isinstance(robot, Transform) and close(robot.translation, (5.25, 0.0, 0.0))
    # a point 2 m in front of the camera (optical z) is 2.2 m ahead of the base, 0.9 m up
    camera = buffer.lookup("map", "/camera_optical_frame", T0 + 0.5)
    assert isinstance(camera, Transform)
    assert close(camera.apply((0.0, 0.0, 2.0)), (5.5 + 2.2, 0.0, 0.9), 1e-9)
    # the other way round is the inverse
    back = buffer.lookup("camera_optical_frame", "map", T0 + 0.5)
    assert close(back.apply(camera.apply((1.0, 2.0, 3.0))), (1.0, 2.0, 3.0), 1e-9)


def test_a_stamp_after_the_newest_transform_waits_and_a_clamped_one_takes_the_newest():
    buffer = TransformBuffer(max_extrapolation=0.5, moving_frames=frozenset({'base_link'}))
    robot_tree(buffer)
    early = buffer.lookup("map", "base_link", T0 + 1.2)
    assert isinstance(early, LookupFailure) and early.retry and early.kind == "not yet"
    assert early.newest_age == pytest.approx(0.2)
    clamped = buffer.lookup("map", "base_link", T0 + 1.2, clamp=True)
    assert isinstance(clamped, Transform) and close(clamped.translation, (6.0, 0.0, 0.0))
    far = buffer.lookup("map", "base_link", T0 + 3.0, clamp=True)
    assert isinstance(far, LookupFailure)


def test_a_correction_holds_until_the_next_one_and_motion_is_waited_for():
    buffer = TransformBuffer(max_extrapolation=0.5, moving_frames=frozenset({"base_link"}))
    buffer.set_transform("map", "odom", T0, from_yaw(5.0, 0.0, 0.0, 0.0))
    for i in range(5):
        buffer.set_transform("odom", "base_link", T0 + 0.1 * i, from_yaw(0.1 * i, 0.0, 0.0, 0.0))
    held = buffer.lookup("map", "base_link", T0 + 0.35)  # map -> odom is 0.35 s old: held, not waited for
    assert isinstance(held, Transform) and close(held.translation, (5.35, 0.0, 0.0), 1e-6)
    ahead = buffer.lookup("map", "base_link", T0 + 0.45)  # base_link's motion is not there yet: wait
    assert isinstance(ahead, LookupFailure) and ahead.retry
    stale = buffer.lookup("map", "odom", T0 + 0.6)  # older than max_extrapolation: a correction is due
    assert isinstance(stale, LookupFailure) and stale.retry


def test_static_transforms_hold_at_any_time_and_unknown_frames_say_so():
    buffer = TransformBuffer(moving_frames=frozenset({'base_link'}))
    robot_tree(buffer)
    static = buffer.lookup("base_link", "camera_optical_frame", T0 + 1e6)
    assert isinstance(static, Transform)
    ghost = buffer.lookup("map", "ghost_frame", T0)
    assert isinstance(ghost, LookupFailure) and ghost.kind == "unknown frame" and ghost.retry
    buffer.set_transform("world", "elsewhere", T0, Transform())
    apart = buffer.lookup("map", "elsewhere", T0)
    assert isinstance(apart, LookupFailure) and apart.kind == "not connected"


def test_no_interpolation_across_a_jump_nor_a_gap():
    buffer = TransformBuffer(max_extrapolation=0.3, max_gap=5.0, max_jump=0.25)
    buffer.set_transform("map", "odom", T0, from_yaw(0.0, 0.0, 0.0, 0.0))
    buffer.set_transform("map", "odom", T0 + 1.0, from_yaw(2.0, 0.0, 0.0, 0.0))  # relocalization: 2 m
    buffer.set_transform("map", "odom", T0 + 10.0, from_yaw(2.0, 0.0, 0.0, 0.0))  # a 9 s gap
    near_before = buffer.lookup("map", "odom", T0 + 0.2)
    near_after = buffer.lookup("map", "odom", T0 + 0.8)
    assert close(near_before.translation, (0.0, 0.0, 0.0)) and close(near_after.translation, (2.0, 0.0, 0.0))
    middle = buffer.lookup("map", "odom", T0 + 0.5)
    assert isinstance(middle, LookupFailure) and middle.kind == "jump" and not middle.retry
    in_gap = buffer.lookup("map", "odom", T0 + 5.0)
    assert isinstance(in_gap, LookupFailure) and in_gap.kind == "gap"
    assert buffer.stats().jumps == 1


def test_a_moving_frame_is_interpolated_however_far_it_moves():
    buffer = TransformBuffer(max_jump=0.25, moving_frames=frozenset({"base_link"}))
    buffer.set_transform("odom", "base_link", T0, from_yaw(0.0, 0.0, 0.0, 0.0))
    buffer.set_transform("odom", "base_link", T0 + 1.0, from_yaw(1.0, 0.0, 0.0, 0.0))
    assert close(buffer.lookup("odom", "base_link", T0 + 0.5).translation, (0.5, 0.0, 0.0))


def test_a_smooth_drift_is_interpolated():
    buffer = TransformBuffer(max_jump=0.25)
    for i in range(10):
        buffer.set_transform("map", "odom", T0 + 0.2 * i, from_yaw(0.01 * i, 0.0, 0.0, 0.001 * i))
    mid = buffer.lookup("map", "odom", T0 + 0.1)
    assert close(mid.translation, (0.005, 0.0, 0.0), 1e-6) and buffer.stats().jumps == 0


# ---------------------------------------------------------------------- refused input
def test_bad_transforms_are_refused_and_counted():
    buffer = TransformBuffer(moving_frames=frozenset({'base_link'}))
    robot_tree(buffer)
    assert buffer.set_transform("map", "odom", T0 + 2, None) == "not finite (NaN) or not a rotation"
    assert buffer.set_transform("somewhere", "odom", T0 + 2, Transform()) == "second parent"
    assert buffer.set_transform("base_link", "map", T0 + 2, Transform()) == "cycle"
    assert buffer.set_transform("map", "map", T0 + 2, Transform()) == "a frame as its own parent"
    assert buffer.set_transform("", "x", T0 + 2, Transform()) == "empty frame_id"
    assert buffer.set_transform("map", "odom", T0 + 100, Transform(), now=T0 + 2) == "stamped in the future"
    assert buffer.set_transform("odom", "base_link", T0 + 2, Transform(), static=True) == "both static and dynamic"
    rejected = buffer.stats().rejected
    assert rejected["second parent"] == 1 and rejected["cycle"] == 1 and rejected["stamped in the future"] == 1
    # what was stored before is still answered, unchanged
    assert close(buffer.lookup("map", "base_link", T0 + 0.5).translation, (5.5, 0.0, 0.0))


def test_odometry_feeds_an_edge_until_tf_carries_it():
    buffer = TransformBuffer()
    assert buffer.add_pose("odom", "base_link", T0, from_yaw(1.0, 0.0, 0.0, 0.0)) is None
    buffer.set_transform("map", "odom", T0, Transform())
    buffer.set_transform("map", "odom", T0 + 3, Transform())
    assert close(buffer.lookup("map", "base_link", T0).translation, (1.0, 0.0, 0.0))
    buffer.set_transform("odom", "base_link", T0 + 1, from_yaw(3.0, 0.0, 0.0, 0.0))  # /tf takes over
    assert buffer.add_pose("odom", "base_link", T0 + 2, from_yaw(9.0, 0.0, 0.0, 0.0)) == "superseded by /tf"
    assert buffer.stats().odometry_superseded == 1
    assert close(buffer.lookup("map", "base_link", T0 + 1).translation, (3.0, 0.0, 0.0))


def test_a_clock_that_goes_back_past_the_history_starts_a_new_timeline():
    buffer = TransformBuffer(history=10.0, moving_frames=frozenset({'base_link'}))
    robot_tree(buffer)
    buffer.set_transform("map", "odom", T0 - 100.0, Transform())
    assert buffer.stats().time_jumps == 1
    assert isinstance(buffer.lookup("map", "base_link", T0 + 0.5), LookupFailure)  # the old poses are gone
    assert isinstance(buffer.lookup("base_link", "camera_optical_frame", T0), Transform)  # statics stay


def test_the_history_is_bounded():
    buffer = TransformBuffer(history=5.0)
    for i in range(1000):
        buffer.set_transform("odom", "base_link", T0 + 0.05 * i, from_yaw(0.001 * i, 0.0, 0.0, 0.0))
    assert buffer.latest_time("odom", "base_link") == pytest.approx(T0 + 49.95)
    old = buffer.lookup("odom", "base_link", T0 + 10.0)
    assert isinstance(old, LookupFailure) and old.kind == "too old" and not old.retry


def test_messages_are_read_by_attribute_access():
    from test.support import ros_messages as messages
    from test.support.ros_messages import InterfaceFactory

    make = InterfaceFactory()
    buffer = TransformBuffer()
    msg = messages.tf_message(make, messages.transform_stamped(make, T0, "map", "odom", 1.0, 2.0, yaw=0.5),
                              messages.transform_stamped(make, T0, "odom", "base_link", math.nan, 0.0),
                              messages.transform_stamped(make, T0, "odom", "lidar", 0.0, 0.0,
                                                         rotation=(0.0, 0.0, 0.0, 0.0)))
    accepted, refused = buffer.add_tf_message(msg, static=False, now=T0)
    assert accepted == 1 and len(refused) == 2
    assert all("not finite (NaN) or not a rotation" in r for r in refused)
    assert "odom -> base_link" in refused[0]
    found = buffer.lookup("map", "odom", T0)
    assert close(found.translation, (1.0, 2.0, 0.0)) and found.yaw == pytest.approx(0.5)
