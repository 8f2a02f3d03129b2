"""Odometry history: interpolation at message stamps, bounds, bad input, threads."""

from __future__ import annotations

import math
import random
import threading

import pytest
from rosbags.typesys import Stores, get_typestore

from emem_ros.core.errors import InvalidInputError
from emem_ros.ros.pose_history import PoseHistory, from_odometry

T0 = 1_700_000_000.0
STORE = get_typestore(Stores.ROS2_HUMBLE)
T = STORE.types


def odometry(stamp: float, x: float, y: float, z: float = 0.0, frame: str = "odom"):
    sec = int(stamp)
    header = T["std_msgs/msg/Header"](
        stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=int(round((stamp - sec) * 1e9))), frame_id=frame)
    pose = T["geometry_msgs/msg/Pose"](
        position=T["geometry_msgs/msg/Point"](x=x, y=y, z=z),
        orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))
    twist = T["geometry_msgs/msg/Twist"](linear=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0),
                                         angular=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0))
    import numpy as np

    return T["nav_msgs/msg/Odometry"](
        header=header, child_frame_id="base_link",
        pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
        twist=T["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)))


def line(history: PoseHistory, n: int = 11, step: float = 0.1) -> None:
    """The robot drives along x at 1 m/s, one pose every ``step`` seconds."""
    for i in range(n):
        assert history.add(T0 + i * step, i * step, 2.0, 0.0, "odom")


def test_midpoint_interpolation_returns_the_midpoint():
    history = PoseHistory()
    history.add(T0, 0.0, 0.0, 0.0, "odom")
    history.add(T0 + 1.0, 2.0, 4.0, 1.0, "odom")
    assert history.at(T0 + 0.5) == pytest.approx((1.0, 2.0, 0.5))
    assert history.at(T0 + 0.25) == pytest.approx((0.5, 1.0, 0.25))


def test_exact_stamp_returns_the_sample():
    history = PoseHistory()
    line(history)
    assert history.at(T0 + 0.3) == pytest.approx((0.3, 2.0, 0.0))


def test_far_beyond_the_history_is_unknown_not_the_origin():
    history = PoseHistory()
    line(history)
    assert history.at(T0 + 1.0 + 10.0) is None
    assert history.at(T0 - 10.0) is None


def test_just_outside_the_history_clamps_to_the_nearest_pose():
    history = PoseHistory(max_extrapolation=0.5)
    line(history)
    assert history.at(T0 + 1.0 + 0.3) == pytest.approx((1.0, 2.0, 0.0))
    assert history.at(T0 - 0.4) == pytest.approx((0.0, 2.0, 0.0))
    assert history.at(T0 + 1.0 + 0.6) is None


def test_empty_history_answers_none():
    history = PoseHistory()
    assert history.at(T0) is None
    assert history.stats().misses == 1


@pytest.mark.parametrize("bad", [
    (math.nan, 0.0, 0.0, 0.0), (T0, math.inf, 0.0, 0.0), (T0, 0.0, -math.inf, 0.0), (T0, 0.0, 0.0, math.nan),
    (0.0, 1.0, 1.0, 0.0), (T0, "one", 0.0, 0.0), (T0, None, 0.0, 0.0),
])
def test_non_finite_or_unstamped_poses_are_rejected_and_counted(bad):
    history = PoseHistory()
    assert history.add(*bad, "odom") is False
    assert len(history) == 0
    assert history.stats().rejected_nonfinite == 1


def test_out_of_order_samples_answer_like_in_order_ones():
    stamps = [T0 + i * 0.1 for i in range(50)]
    ordered, shuffled = PoseHistory(), PoseHistory()
    for t in stamps:
        ordered.add(t, (t - T0) * 3.0, -(t - T0), 0.0)
    order = stamps[:]
    random.Random(4).shuffle(order)
    for t in order:
        shuffled.add(t, (t - T0) * 3.0, -(t - T0), 0.0)
    for q in (T0 + 0.05, T0 + 1.234, T0 + 4.9, T0 + 2.0):
        assert shuffled.at(q) == pytest.approx(ordered.at(q))
    assert shuffled.at(T0 + 1.234) == pytest.approx((3.702, -1.234, 0.0))


def test_duplicate_stamp_replaces_the_sample():
    history = PoseHistory()
    history.add(T0, 0.0, 0.0)
    history.add(T0, 5.0, 5.0)
    assert len(history) == 1
    assert history.at(T0) == (5.0, 5.0, 0.0)


def test_old_samples_age_out():
    history = PoseHistory(max_age=2.0, max_extrapolation=0.1)
    line(history, n=51, step=0.1)  # 5 s
    assert history.at(T0 + 1.0) is None  # older than the newest pose minus max_age
    assert history.at(T0 + 4.5) == pytest.approx((4.5, 2.0, 0.0))
    assert len(history) <= 21


def test_sample_count_is_bounded():
    history = PoseHistory(max_samples=100)
    line(history, n=1000, step=0.01)
    assert len(history) == 100
    assert history.latest().x == pytest.approx(9.99)


def test_long_gaps_are_not_interpolated_across():
    history = PoseHistory(max_gap=2.0, max_extrapolation=0.5)
    history.add(T0, 0.0, 0.0)
    history.add(T0 + 10.0, 10.0, 0.0)  # odometry dropped out for 10 s
    assert history.at(T0 + 5.0) is None
    assert history.at(T0 + 0.2) == (0.0, 0.0, 0.0)  # near the last pose before the gap
    assert history.at(T0 + 9.7) == (10.0, 0.0, 0.0)


def test_frame_filter_rejects_other_frames():
    history = PoseHistory(frame_id="odom")
    assert history.add(T0, 1.0, 1.0, 0.0, "/odom")  # ROS 1 style spelling is the same frame
    assert not history.add(T0 + 0.1, 5.0, 5.0, 0.0, "map")
    assert history.stats().rejected_frame == 1
    assert history.lookup(T0).frame_id == "odom"


def test_frame_change_without_filter_is_not_interpolated():
    history = PoseHistory(max_extrapolation=0.3)
    history.add(T0, 0.0, 0.0, 0.0, "odom")
    history.add(T0 + 1.0, 100.0, 0.0, 0.0, "map")
    assert history.at(T0 + 0.2) == (0.0, 0.0, 0.0)
    assert history.at(T0 + 0.5) is None  # interpolating odom with map would be nonsense
    assert history.lookup(T0 + 0.9).frame_id == "map"


def test_clock_jump_back_starts_a_new_timeline():
    history = PoseHistory(max_age=10.0)
    line(history)
    assert history.add(T0 - 3600.0, 7.0, 7.0)
    assert history.stats().time_jumps == 1
    assert len(history) == 1
    assert history.at(T0 - 3600.0) == (7.0, 7.0, 0.0)


def test_from_odometry_reads_a_real_message():
    stamp, x, y, z, frame = from_odometry(odometry(T0 + 0.25, 1.5, -2.0, 0.1))
    assert stamp == pytest.approx(T0 + 0.25)
    assert (x, y, z, frame) == (1.5, -2.0, 0.1, "odom")


def test_from_odometry_zero_stamp_uses_receive_time():
    msg = odometry(0.0, 1.0, 1.0)
    assert from_odometry(msg, receive_time=T0)[0] == T0
    with pytest.raises(InvalidInputError, match="zero stamp"):
        from_odometry(msg)


def test_from_odometry_rejects_other_messages():
    with pytest.raises(InvalidInputError, match="not an odometry message"):
        from_odometry(T["std_msgs/msg/String"](data="hi"))


def test_add_odometry_never_raises():
    history = PoseHistory()
    assert history.add_odometry(odometry(T0, 1.0, 2.0))
    assert not history.add_odometry(T["std_msgs/msg/String"](data="hi"))
    assert not history.add_odometry(odometry(T0 + 1, math.nan, 2.0))
    stats = history.stats()
    assert (stats.samples, stats.malformed) == (1, 2)


@pytest.mark.parametrize("kwargs", [{"max_age": 0.0}, {"max_samples": 1}, {"max_extrapolation": -1.0},
                                    {"max_gap": math.nan}])
def test_bad_construction_is_refused(kwargs):
    with pytest.raises(InvalidInputError):
        PoseHistory(**kwargs)


def test_writer_and_readers_on_threads():
    # No extrapolation: a reader that sleeps while the writer prunes past its stamp gets None, not the edge pose.
    history = PoseHistory(max_age=5.0, max_extrapolation=0.0)
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        for i in range(5000):
            history.add(T0 + i * 0.01, i * 0.01, 0.0)
        done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                latest = history.latest()
                if latest is None:
                    continue
                pos = history.at(latest.stamp - 0.005)
                if pos is not None:
                    # Along the line x == t - T0: an interpolated x lies between samples.
                    assert abs(pos[0] - (latest.stamp - 0.005 - T0)) < 0.02
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert history.at(T0 + 49.985) == pytest.approx((49.985, 0.0, 0.0))


# ---------------------------------------------------------------------- heading
def turned(odom, yaw: float, qz_scale: float = 1.0):
    """``odom`` with its orientation set to a yaw (optionally a denormalised quaternion)."""
    odom.pose.pose.orientation = T["geometry_msgs/msg/Quaternion"](
        x=0.0, y=0.0, z=qz_scale * math.sin(yaw / 2), w=qz_scale * math.cos(yaw / 2))
    return odom


def test_the_heading_is_kept_and_interpolated_the_short_way_round():
    history = PoseHistory()
    assert history.add_odometry(turned(odometry(T0, 0.0, 0.0), math.radians(170)))
    assert history.add_odometry(turned(odometry(T0 + 1.0, 1.0, 0.0), math.radians(-170)))
    midway = history.lookup(T0 + 0.5)
    assert abs(abs(midway.yaw) - math.pi) < 1e-9  # through 180°, not through 0°
    quarter = history.lookup(T0 + 0.25)
    assert quarter.yaw == pytest.approx(math.radians(175))
    three_quarters = history.lookup(T0 + 0.75)
    assert three_quarters.yaw == pytest.approx(math.radians(-175))
    assert history.lookup(T0 + 1.2).yaw == pytest.approx(math.radians(-170))  # clamped to the last pose


def test_a_denormalised_quaternion_gives_its_yaw_and_an_unset_one_none():
    history = PoseHistory()
    assert history.add_odometry(turned(odometry(T0, 0.0, 0.0), 0.7, qz_scale=1.02))
    assert history.lookup(T0).yaw == pytest.approx(0.7)
    unset = odometry(T0 + 1.0, 1.0, 0.0)
    unset.pose.pose.orientation = T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=0.0)
    assert history.add_odometry(unset)  # the position is still good
    assert history.lookup(T0 + 1.0).yaw is None and history.lookup(T0 + 1.0).position == (1.0, 0.0, 0.0)
    assert history.lookup(T0 + 0.5).yaw is None  # no heading to interpolate from on one side


def test_a_nan_heading_keeps_the_position():
    history = PoseHistory()
    assert history.add(T0, 1.0, 2.0, 0.0, "odom", yaw=math.nan)
    sample = history.lookup(T0)
    assert sample.position == (1.0, 2.0, 0.0) and sample.yaw is None
    assert history.add(T0 + 1.0, 1.0, 2.0, 0.0, "odom", yaw=7.0)  # wrapped into [-pi, pi)
    assert history.lookup(T0 + 1.0).yaw == pytest.approx(7.0 - 2 * math.pi)
