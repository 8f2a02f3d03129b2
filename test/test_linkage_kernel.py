"""The optional C linkage kernel (issue 15, item 4): exactly the k-d tree path's labels, so the tools
answer byte for byte the same with it and without it (a machine installed without a C compiler)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emem_ros.tools import clusters
from emem_ros.tools.clusters import KEY_GAP, _linked_labels, components, kernel_labels, small_components, tree_labels

pytestmark = pytest.mark.skipif(clusters.KERNEL is None,
                                reason="the C kernel is not built here (no compiler at install): "
                                       "the k-d tree path is the only one")

LINKS = st.sampled_from([0.25, 0.5, 1.0, 2.5]) | st.floats(0.01, 5.0, allow_nan=False)


@st.composite
def point_sets(draw) -> tuple[np.ndarray, float]:
    """Random sets with the shapes that break linkers: duplicates, ties on a grid, collinear runs, keys."""
    link = draw(LINKS)
    n = draw(st.integers(0, 220))
    shape = draw(st.sampled_from(["uniform", "grid", "duplicates", "line", "keyed", "far"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if shape == "uniform":
        xy = rng.uniform(-draw(st.floats(0.1, 40.0)), 40.0, (n, 2))
    elif shape == "grid":  # many pairs at exactly the link distance or at half-metre steps
        xy = rng.integers(-10, 10, (n, 2)) * draw(st.sampled_from([0.5, link, 1.0]))
    elif shape == "duplicates":  # a few points repeated many times
        pool = rng.uniform(0, 6, (max(1, n // 10), 2)).round(1)
        xy = pool[rng.integers(0, len(pool), n)] if n else np.empty((0, 2))
    elif shape == "line":  # collinear, steps around the link
        steps = rng.uniform(0.5, 1.5, n) * link
        angle = rng.uniform(0, np.pi)
        t = np.cumsum(steps)
        xy = np.column_stack([t * np.cos(angle), t * np.sin(angle)]) + rng.uniform(-100, 100, 2)
    elif shape == "far":  # far from the origin, within the stated +-1,000 km
        xy = rng.uniform(0, 30, (n, 2)) + rng.uniform(-1e6, 1e6, 2)
    else:  # keys kept apart on a third axis, as _rank_many links them
        xy = rng.integers(0, 30, (n, 2)) * 0.5 + rng.uniform(-0.2, 0.2, (n, 2)).round(2)
        return np.column_stack([xy, rng.integers(0, 12, n) * KEY_GAP]), link
    return np.ascontiguousarray(xy, dtype=np.float64), link


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(point_sets())
def test_kernel_labels_equal_the_tree_path(case):
    points, link = case
    expected = tree_labels(points, link)
    got = kernel_labels(points, link)
    assert got is not None  # finite points, positive link, at most three axes: the kernel takes them
    assert got.dtype == np.int64
    assert np.array_equal(got, expected), (len(points), link)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(point_sets())
def test_small_sets_get_the_dense_paths_labels(case):
    # Up to SMALL points ``components`` asks the kernel instead of its n x n label propagation.
    points, link = case
    points = np.ascontiguousarray(points[: clusters.SMALL, :2])
    if not len(points):
        assert len(components(points, link)) == 0
        return
    assert np.array_equal(components(points, link), small_components(points, link))
    assert np.array_equal(small_components(points, link), tree_labels(points, link))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(-50, 50), st.floats(-50, 50), st.floats(-50, 50)), max_size=80), LINKS)
def test_kernel_labels_equal_the_tree_path_in_three_dimensions(rows, link):
    points = np.array(rows, dtype=np.float64).reshape(-1, 3)
    assert np.array_equal(kernel_labels(points, link), tree_labels(points, link))


@pytest.mark.parametrize("points, link", [
    (np.array([[0.0, 0.0], [np.nan, 1.0]]), 1.0),           # not a number
    (np.array([[0.0, 0.0], [np.inf, 1.0]]), 1.0),           # infinite
    (np.array([[0.0, 0.0], [0.5, 0.0]]), 0.0),              # no link distance
    (np.zeros((3, 4)), 1.0),                                 # four axes
    (np.array([[0.0, 0.0, 0.0], [0.5, 0.0, 1.5], [9.0, 0.0, 1e12]]), 1.0),  # a wide axis not separating
])
def test_the_kernel_declines_what_it_cannot_take_and_the_tree_path_answers(points, link):
    assert kernel_labels(points, link) is None
    if np.isfinite(points).all() and link > 0:
        assert np.array_equal(_linked_labels(points, link), tree_labels(points, link))


def test_a_wide_separating_axis_is_taken_and_keys_never_link():
    # The third axis spans 1e12 (too wide to grid) but its values are KEY_GAP apart: taken, keys kept apart.
    xy = np.array([[0.0, 0.0], [0.5, 0.0], [0.5, 0.0], [3.0, 0.0]])
    points = np.column_stack([xy, np.array([0, 0, 1000, 1000]) * KEY_GAP])
    got = kernel_labels(points, 1.0)
    assert got is not None and got.tolist() == [0, 0, 1, 2]


def _room(memory, clock) -> None:
    """Hundreds of places around the origin (so every tool links on arrays): things seen at a few spots
    each, a chair at a hundred scattered spots (locate's linking, at both distances), robot poses."""
    rng = np.random.default_rng(3)
    for i in range(160):
        x, y = rng.uniform(-6, 6, 2)
        for _ in range(int(rng.integers(1, 4))):
            dx, dy = rng.normal(0, 0.6, 2)
            memory.add(f"thing {i % 40}", x=float(x + dx), y=float(y + dy), layer_name="detections",
                       timestamp=clock.now - float(rng.uniform(10, 3000)))
    for _ in range(110):
        memory.add("chair", x=float(rng.uniform(-8, 8)), y=float(rng.uniform(-8, 8)), layer_name="detections",
                   timestamp=clock.now - float(rng.uniform(10, 3000)))
    for k in range(90):
        memory.add("robot pose", x=0.1 * k - 4.0, y=float(np.sin(k / 9)), layer_name="odometry",
                   timestamp=clock.now - 900 + 10 * k)
    memory.flush()


QUESTIONS = [
    ("spatial_query", {"x": 0.0, "y": 0.0, "radius": 6.0}),
    ("spatial_query", {"x": 1.0, "y": -1.0, "radius": 3.0, "time_after": "-30m"}),
    ("locate", {"concept": "chair"}),
    ("locate", {"concept": "thing 7"}),
    ("recall", {"query": "where is the chair"}),
    ("get_current_context", {"radius": 6.0, "include_recent_minutes": 60}),
    ("semantic_search", {"query": "thing 3", "near_x": 0.0, "near_y": 0.0, "spatial_radius": 5.0}),
]


def test_tools_answer_byte_identically_with_the_kernel_and_with_the_tree_path(monkeypatch, make_memory, clock):
    memory = make_memory(query_cache_enabled=False)
    _room(memory, clock)
    monkeypatch.setattr(clusters, "LABELS", clusters.LabelMemo(entries=0))  # every call links afresh
    ran: list[int] = []
    kernel = clusters.KERNEL

    class Counted:
        @staticmethod
        def link(points, link, out):
            ran.append(len(points))
            return kernel.link(points, link, out)

    monkeypatch.setattr(clusters, "KERNEL", Counted)
    with_kernel = [getattr(memory, tool)(**kwargs) for tool, kwargs in QUESTIONS]
    assert ran and max(ran) > clusters.SMALL  # the kernel did the linking
    monkeypatch.setattr(clusters, "KERNEL", None)
    without = [getattr(memory, tool)(**kwargs) for tool, kwargs in QUESTIONS]
    assert [str(a).encode() for a in with_kernel] == [str(a).encode() for a in without]
    assert any("chair" in str(a) for a in without)
