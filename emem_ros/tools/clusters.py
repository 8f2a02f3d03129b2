"""Spatial grouping of places: one thing per spot, and linked components for locate.

Places are already aggregated per 0.5 m cell, so the lists here are short
(tens to a few thousand) and plain single-linkage is fast enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from emem_ros.core.types import Position
from emem_ros.storage.store import Place

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
        return tuple(sum(p.centroid[i] * p.count for p in self.places) / total for i in range(3))  # type: ignore

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
    groups: list[Group] = []
    for (text_id, layer), members in by_key.items():
        for cluster in link_clusters(members, link):
            groups.append(Group(text_id, layer, cluster))
    return groups


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


def components(xy: np.ndarray, link: float) -> np.ndarray:
    """Single-linkage cluster labels of points (n, 2): points closer than ``link`` share a label.

    Label propagation over the adjacency matrix: O(n^2) per step, few steps;
    callers keep n to a few thousand.
    """
    n = len(xy)
    if n == 0:
        return np.empty(0, dtype=np.int64)
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
