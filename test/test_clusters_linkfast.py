"""Linking afresh (issue 15, item 4, without the label memo): ``_linked_labels``' pair propagation
(``_roots``) must give exactly the labels of a plain reference, whatever the shape of the point set."""

from __future__ import annotations

import numpy as np
import pytest

from emem_ros.tools import clusters
from emem_ros.tools.clusters import KEY_GAP, _linked_labels, _roots, components, tree_labels


def reference(points: np.ndarray, link: float) -> np.ndarray:
    """Union-find over every pair (squared distances summed axis by axis), numbered by first point."""
    n = len(points)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    rows = points.tolist()
    for i in range(n):
        for j in range(i + 1, n):
            d2 = sum((rows[i][k] - rows[j][k]) ** 2 for k in range(points.shape[1]))
            if d2 <= link * link:
                ri, rj = root(i), root(j)
                parent[max(ri, rj)] = min(ri, rj)
    number: dict[int, int] = {}
    return np.array([number.setdefault(root(i), len(number)) for i in range(n)], dtype=np.int64)


def point_sets(seed: int) -> list[tuple[np.ndarray, float]]:
    rng = np.random.default_rng(seed)
    sets: list[tuple[np.ndarray, float]] = []
    for n in (1, 2, 3, 5):  # tiny sets
        sets.append((rng.uniform(0, 2, (n, 2)), 1.0))
    for _ in range(6):  # ties: integer grids, many pairs at exactly the link distance
        n = int(rng.integers(10, 200))
        sets.append((rng.integers(0, 12, (n, 2)).astype(np.float64), float(rng.choice([1.0, 2.0]))))
    for _ in range(6):  # places on a half-metre grid, like the cells they aggregate
        n = int(rng.integers(20, 300))
        sets.append((rng.integers(0, 40, (n, 2)) * 0.5, float(rng.choice([1.0, 2.5]))))
    for _ in range(6):  # random centroids
        n = int(rng.integers(2, 400))
        sets.append((rng.uniform(0, 15, (n, 2)).round(int(rng.integers(1, 4))), 1.0))
    for _ in range(4):  # keys kept apart on a third axis, as ``_rank_many`` links them
        n = int(rng.integers(30, 300))
        key = rng.integers(0, 8, n)
        xy = rng.integers(0, 20, (n, 2)) * 0.5
        sets.append((np.column_stack([xy, key * KEY_GAP]), 1.0))
    return sets


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_linked_labels_equal_the_reference_on_random_sets_with_ties_and_tiny_sets(seed):
    for points, link in point_sets(seed):
        expected = reference(points, link)
        assert np.array_equal(_linked_labels(points, link), expected), (len(points), link)
        assert np.array_equal(tree_labels(points, link), expected), (len(points), link)  # without the C kernel
        if points.shape[1] == 2:
            assert np.array_equal(components(points, link), expected)


def test_when_propagation_gives_up_connected_components_gives_the_same_labels(monkeypatch):
    # Points one link apart along a line, listed from the far end, plus a gap: with no rounds of hooking
    # allowed the pair propagation gives up and scipy's connected_components answers, numbered alike.
    n = 300
    chain = np.column_stack([np.arange(n, 0, -1, dtype=np.float64), np.zeros(n)])
    chain[n // 2:, 0] -= 0.5
    pairs = np.array([[0, 1], [1, 2]])
    assert _roots(pairs, 3) is not None
    monkeypatch.setattr(clusters, "PROPAGATION_ROUNDS", 0)
    assert _roots(pairs, 3) is None
    assert np.array_equal(tree_labels(chain, 1.0), reference(chain, 1.0))
    for points, link in point_sets(5):
        assert np.array_equal(tree_labels(points, link), reference(points, link))


def test_roots_point_every_point_at_the_lowest_of_its_component():
    pairs = np.array([[3, 4], [0, 4], [5, 6], [1, 2]])
    assert _roots(pairs, 8).tolist() == [0, 1, 1, 0, 0, 5, 5, 7]
    assert _roots(np.empty((0, 2), dtype=np.int64), 3).tolist() == [0, 1, 2]
