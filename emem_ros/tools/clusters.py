"""Spatial grouping of places: one thing per spot, and linked components for locate.

Places are already aggregated per 0.5 m cell, so the lists here are short
(tens to a few thousand). Single-linkage of more than ``SMALL`` points runs
in the optional C kernel (``_linkage.c``, built by pip and colcon where a C
compiler is found) or, without it, on scipy's k-d tree: the same labels.
"""

from __future__ import annotations

import importlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Optional

import numpy as np

from emem_ros.core.types import Position
from emem_ros.storage.store import Place


def _load_kernel() -> Any:
    """The C extension built from ``_linkage.c``, or None (installed without a C compiler)."""
    try:
        return importlib.import_module("emem_ros.tools._linkage")
    except ImportError:
        return None


KERNEL: Any = _load_kernel()
"""``link(points, link, out) -> bool`` in C, or None: then the k-d tree path (tests switch it off)."""

SAME_OBJECT = 1.0
"""Metres: places of one text closer than this are reported as one thing."""


@dataclass
class Group:
    text_id: int
    layer: str
    places: list[Place]

    @cached_property
    def count(self) -> int:
        return sum(p.count for p in self.places)

    @cached_property
    def centroid(self) -> Position:
        total = self.count
        x, y, z = (sum(p.centroid[i] * p.count for p in self.places) / total for i in range(3))
        return (x, y, z)

    @cached_property
    def first(self) -> float:
        return min(p.first_stamp for p in self.places)

    @cached_property
    def last(self) -> float:
        return max(p.last_stamp for p in self.places)

    @cached_property
    def newest(self) -> Place:
        return max(self.places, key=lambda p: p.last_stamp)


def group_places(places: list[Place], link: float = SAME_OBJECT) -> list[Group]:
    """Places of the same text and layer within ``link`` metres of each other become one thing."""
    by_key: dict[tuple[int, str], list[Place]] = {}
    for p in places:
        by_key.setdefault((p.text_id, p.layer), []).append(p)
    if len(places) > SMALL:
        return _group_many(places, by_key, link)
    groups: list[Group] = []
    for (text_id, layer), members in by_key.items():
        for cluster in link_clusters(members, link):
            groups.append(Group(text_id, layer, cluster))
    return groups


def _group_many(places: list[Place], by_key: dict[tuple[int, str], list[Place]], link: float) -> list[Group]:
    """``group_places`` for hundreds of places: one k-d tree for all keys, same groups in the same order.

    Keys are kept apart by an offset on a third axis far larger than any
    link, so only places of one key can pair up.
    """
    rank = {key: i for i, key in enumerate(by_key)}
    xyk = np.array([(p.centroid[0], p.centroid[1], rank[(p.text_id, p.layer)] * KEY_GAP) for p in places])
    labels = linked_labels(xyk, link)
    clusters: dict[int, list[Place]] = {}
    for label, p in zip(labels.tolist(), places):
        clusters.setdefault(label, []).append(p)
    # link_clusters' order: keys by first appearance, then each key's clusters by their first member.
    first = {label: i for i, label in reversed(list(enumerate(labels.tolist())))}
    ordered = sorted(clusters, key=lambda label: (rank[(clusters[label][0].text_id, clusters[label][0].layer)],
                                                  first[label]))
    return [Group(clusters[label][0].text_id, clusters[label][0].layer, clusters[label]) for label in ordered]


SMALL = 64
"""Up to this many points the pure-Python / dense numpy paths are the cheapest."""
KEY_GAP = 1e9
"""Offset between keys on the third axis: far beyond any link, so keys never pair up."""


class LabelMemo:
    """Linkage labels of the point sets linked lately, keyed by the points' bytes and the link distance.

    Labels are a function of the points alone, so an entry is never stale:
    a write that adds, moves, merges or removes a place changes the points
    (another key). What is kept is bounded by entries and by bytes.
    """

    def __init__(self, entries: int = 128, max_bytes: int = 8 << 20) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[float, tuple[int, ...], bytes], np.ndarray] = OrderedDict()
        self._bytes = 0
        self.entries, self.max_bytes = entries, max_bytes

    @staticmethod
    def key(points: np.ndarray, link: float) -> tuple[float, tuple[int, ...], bytes]:
        points = np.ascontiguousarray(points, dtype=np.float64)
        return (float(link), points.shape, points.tobytes())

    def get(self, key: tuple[float, tuple[int, ...], bytes]) -> Optional[np.ndarray]:
        with self._lock:
            labels = self._kept.get(key)
            if labels is not None:
                self._kept.move_to_end(key)
            return labels

    def put(self, key: tuple[float, tuple[int, ...], bytes], labels: np.ndarray) -> None:
        labels.setflags(write=False)  # shared by every caller that links the same points
        size = len(key[2]) + labels.nbytes
        if size > self.max_bytes // 4:
            return
        with self._lock:
            if key in self._kept:
                return
            self._kept[key] = labels
            self._bytes += size
            while len(self._kept) > self.entries or self._bytes > self.max_bytes:
                old_key, old = self._kept.popitem(last=False)
                self._bytes -= len(old_key[2]) + old.nbytes

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._bytes = 0


LABELS = LabelMemo()


def linked_labels(points: np.ndarray, link: float, tree: Any = None) -> np.ndarray:
    """Single-linkage labels (distance <= link), numbered by each component's first point (read-only).

    Remembered by the points' bytes (``LABELS``): "near here" links the
    same few hundred places call after call until one of them changes.
    """
    key = LABELS.key(points, link)
    labels = LABELS.get(key)
    if labels is None:
        labels = _linked_labels(points, link, tree)
        LABELS.put(key, labels)
    return labels


def _linked_labels(points: np.ndarray, link: float, tree: Any = None) -> np.ndarray:
    """Single-linkage labels (distance <= link), numbered by each component's first point.

    The C kernel when it is built and takes the input, else the k-d tree.
    """
    labels = kernel_labels(points, link)
    return labels if labels is not None else tree_labels(points, link, tree)


def kernel_labels(points: np.ndarray, link: float) -> Optional[np.ndarray]:
    """``tree_labels``' labels from the C kernel (grid hashing + union-find); None where it is not
    built or does not take the input (more than three axes, non-finite numbers, link <= 0)."""
    kernel = KERNEL
    if kernel is None:
        return None
    points = np.ascontiguousarray(points, dtype=np.float64)
    if points.ndim != 2:
        return None
    out = np.empty(len(points), dtype=np.int64)
    return out if kernel.link(points, float(link), out) else None


def tree_labels(points: np.ndarray, link: float, tree: Any = None) -> np.ndarray:
    """Single-linkage labels (distance <= link), numbered by each component's first point, from a k-d tree.

    Pairs come from a k-d tree; components from a few rounds of hooking
    (each pair whose labels differ points the larger label's root at the
    smaller) followed by full pointer jumping, which joins a few hundred
    points in two or three rounds (cheaper than building a sparse graph);
    scipy's connected_components takes over if a graph needs more rounds.
    A root only ever points at a smaller one, so each component ends on
    its lowest point, and the labels are numbered like the dense labels
    of ``components``.
    """
    n = len(points)
    if tree is None:
        tree = kd_tree(points)
    pairs = tree.query_pairs(link, output_type="ndarray")
    labels = _roots(pairs, n)
    if labels is None:
        return _connected(pairs, n)
    # The roots (points labelled with themselves) numbered in order: np.unique's inverse, without a sort.
    number = np.cumsum(labels == np.arange(n)) - 1
    numbered: np.ndarray = number[labels].astype(np.int64)
    return numbered


def kd_tree(points: np.ndarray) -> Any:
    """A k-d tree over the points for ``linked_labels`` (one tree can answer several link distances)."""
    from scipy.spatial import cKDTree

    # An unbalanced, uncompacted tree builds faster and finds the same pairs (a few hundred points).
    return cKDTree(points, balanced_tree=False, compact_nodes=False)


def _roots(pairs: np.ndarray, n: int) -> Optional[np.ndarray]:
    """Per point, the lowest point of its component under ``pairs`` (None: more rounds than allowed).

    The first round needs no look-up (every point is its own root), and
    pointer jumping stops on an element-wise test rather than
    ``np.array_equal``'s checks: a few hundred points take a dozen array
    calls, so each one saved counts.
    """
    labels = np.arange(n)
    if not len(pairs):
        return labels
    a, b = pairs[:, 0], pairs[:, 1]
    np.minimum.at(labels, np.maximum(a, b), np.minimum(a, b))
    for _ in range(PROPAGATION_ROUNDS):
        while True:  # every label to its root
            jumped = labels[labels]
            if (jumped == labels).all():
                break
            labels = jumped
        at_a, at_b = labels[a], labels[b]
        apart = at_a != at_b
        if not apart.any():
            return labels
        at_a, at_b = at_a[apart], at_b[apart]
        np.minimum.at(labels, np.maximum(at_a, at_b), np.minimum(at_a, at_b))
    return None


PROPAGATION_ROUNDS = 10


def _connected(pairs: np.ndarray, n: int) -> np.ndarray:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    found: np.ndarray = labels.astype(np.int64)
    return found


def link_clusters(places: list[Place], link: float) -> list[list[Place]]:
    """Single-linkage clusters (a text is rarely in more than a few cells of one area)."""
    if len(places) == 1:
        return [places]
    parent = list(range(len(places)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    order = sorted(range(len(places)), key=lambda i: places[i].centroid[0])
    l2 = link * link
    for a_pos, a in enumerate(order):
        ax, ay, _ = places[a].centroid
        for b in order[a_pos + 1:]:
            bx, by, _ = places[b].centroid
            if bx - ax > link:
                break
            if (bx - ax) ** 2 + (by - ay) ** 2 <= l2:
                parent[root(a)] = root(b)
    clusters: dict[int, list[Place]] = {}
    for i, p in enumerate(places):
        clusters.setdefault(root(i), []).append(p)
    return list(clusters.values())


class Linker:
    """``components`` of one set of points at several link distances, the k-d tree built once."""

    def __init__(self, xy: np.ndarray) -> None:
        self.xy = xy
        self._tree: Any = None

    def components(self, link: float) -> np.ndarray:
        if len(self.xy) <= SMALL:
            return components(self.xy, link)
        points = np.ascontiguousarray(np.asarray(self.xy, dtype=np.float64)[:, :2])
        key = LABELS.key(points, link)
        labels = LABELS.get(key)
        if labels is None:
            labels = kernel_labels(points, link)
            if labels is None:
                if self._tree is None:
                    self._tree = kd_tree(points)
                labels = tree_labels(points, link, self._tree)
            LABELS.put(key, labels)
        return labels


def components(xy: np.ndarray, link: float) -> np.ndarray:
    """Single-linkage cluster labels of points (n, 2): points closer than ``link`` share a label.

    Label propagation over the adjacency matrix: O(n^2) per step, few steps;
    callers keep n to a few thousand.
    """
    n = len(xy)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if n > SMALL:
        return linked_labels(np.asarray(xy, dtype=np.float64)[:, :2], link)
    if np.asarray(xy).dtype == np.float64:
        labels = kernel_labels(xy, link)  # the same labels as small_components', without n x n matrices
        if labels is not None:
            return labels
    return small_components(xy, link)


def small_components(xy: np.ndarray, link: float) -> np.ndarray:
    """``components`` of a few dozen points without the C kernel: dense adjacency, label propagation."""
    n = len(xy)
    d2 = ((xy[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2)
    adjacent = d2 <= link * link
    labels = np.arange(n)
    while True:
        spread = np.where(adjacent, labels[None, :], n).min(axis=1)
        spread = np.minimum(spread, labels)
        if np.array_equal(spread, labels):
            break
        labels = spread[spread]
    _, dense = np.unique(labels, return_inverse=True)
    return dense
