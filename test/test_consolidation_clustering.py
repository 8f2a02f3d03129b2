"""Place-and-time clustering: one cluster per visit, not one per floor."""

from __future__ import annotations

import math

import pytest

from emem_ros.consolidation.clustering import ClusterParams, cluster_stream
from test.support.patrol import multi_room_patrol

P = ClusterParams(eps=3.0, min_samples=3, time_gap=120.0, max_extent=15.0, max_size=5000, min_dwell=5.0)


def _patrol_points(n: int):
    rows = []
    info = multi_room_patrol(lambda *a: rows.append(a), n)
    return rows, info


def test_continuous_path_through_rooms_gives_one_cluster_per_visit():
    rows, info = _patrol_points(12_000)
    stamps = [r[4] for r in rows]
    result = cluster_stream(stamps, [r[1] for r in rows], [r[2] for r in rows], P)
    assert len(result.clusters) == info.visits > 40
    assert len(result.noise) < 10 and not result.deferred
    # each cluster is one visit: its median time falls in exactly that visit, in order
    for cluster, (start, end) in zip(result.clusters, info.visit_spans):
        middle = sorted(stamps[i] for i in cluster)[len(cluster) // 2]
        assert start <= middle <= end
        assert len(cluster) > 50


def test_a_time_gap_splits_a_robot_that_never_moved():
    stamps = [float(i) for i in range(50)] + [1000.0 + i for i in range(50)]
    result = cluster_stream(stamps, [1.0] * 100, [1.0] * 100, P)
    assert [len(c) for c in result.clusters] == [50, 50]


def test_size_and_extent_caps_keep_one_cluster_from_swallowing_a_floor():
    stamps = [float(i) for i in range(100)]
    capped = cluster_stream(stamps, [0.0] * 100, [0.0] * 100, ClusterParams(max_size=30, min_dwell=5.0))
    assert [len(c) for c in capped.clusters] == [30, 30, 30, 10]
    # a huge place radius would chain a 40 m corridor walk; the extent cap cuts it
    xs = [i * 0.4 for i in range(100)]
    wide = cluster_stream(stamps, xs, [0.0] * 100, ClusterParams(eps=100.0, max_extent=10.0))
    assert len(wide.clusters) >= 4
    for cluster in wide.clusters:
        assert max(xs[i] for i in cluster) - min(xs[i] for i in cluster) <= 10.0


def test_a_glance_away_is_absorbed_but_leaving_is_not():
    # 60 s in room A, a 2 s glance at the door 4 m away, 60 s more in A, then 60 s in room B
    stamps, xs = [], []
    t = 0.0
    for x, seconds in [(0.0, 60), (4.0, 2), (0.0, 60), (8.0, 60)]:
        for _ in range(int(seconds * 2)):
            stamps.append(t)
            xs.append(x)
            t += 0.5
    result = cluster_stream(stamps, xs, [0.0] * len(xs), P)
    assert [len(c) for c in result.clusters] == [244, 120]


def test_observations_without_position_join_the_place_or_are_grouped_by_time():
    stamps = [float(i) for i in range(40)]
    xs = [0.0] * 20 + [10.0] * 20
    mixed_x = [None if i % 5 == 2 else x for i, x in enumerate(xs)]
    mixed = cluster_stream(stamps, mixed_x, [None if x is None else 0.0 for x in mixed_x], P)
    assert sorted(len(c) for c in mixed.clusters) == [20, 20]  # each None went where the robot was
    none = cluster_stream(stamps + [500.0 + i for i in range(10)], [None] * 50, [None] * 50, P)
    assert [len(c) for c in none.clusters] == [40, 10]  # split by the time gap only


def test_the_visit_in_progress_is_deferred_not_cut():
    stamps = [float(i) for i in range(200)]
    xs = [0.0] * 100 + [10.0] * 100
    result = cluster_stream(stamps, xs, [0.0] * 200, P, horizon=200.0)
    assert len(result.clusters) == 1 and len(result.deferred) == 100
    assert result.deferred_from == pytest.approx(100.0)
    closed = cluster_stream(stamps, xs, [0.0] * 200, P, horizon=200.0 + P.time_gap)
    assert len(closed.clusters) == 2 and not closed.deferred


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="eps"):
        ClusterParams(eps=0.0)
    with pytest.raises(ValueError, match="min_samples"):
        ClusterParams(min_samples=0)
    assert math.isfinite(ClusterParams().max_duration)
