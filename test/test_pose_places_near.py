"""``pose_places._near``: a long track against many places gives the same places as comparing every pair.

At 1M observations, ``locate("something to sit on")`` compared every place with every pose of the track at
once (19 ms of 21.5); past ``_DENSE`` pairs a k-d tree answers (3.6 ms, the same answers byte for byte).
"""

from __future__ import annotations

import numpy as np

from emem_ros.tools import pose_places
from emem_ros.tools.placement import LINK


def dense(xy: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    return ((xy[:, None, :] - cluster[None, :, :]) ** 2).sum(axis=2).min(axis=1) <= LINK * LINK


def test_a_large_track_gives_the_places_every_pair_gives():
    rng = np.random.default_rng(5)
    cluster = rng.uniform(0.0, 20.0, size=(400, 2))
    xy = rng.uniform(-5.0, 25.0, size=(600, 2))
    xy[:5] = cluster[:5] + [LINK, 0.0]  # exactly at the link distance: near
    xy[5:10] = cluster[5:10] + [LINK * 1.001, 0.0]  # just beyond, unless another pose is closer
    assert len(xy) * len(cluster) > pose_places._DENSE
    near = pose_places._near(xy, cluster)
    assert near.dtype == bool and near.tolist() == dense(xy, cluster).tolist()
    assert near[:5].all() and 0 < near.sum() < len(xy)


def test_a_small_track_is_compared_pair_by_pair():
    rng = np.random.default_rng(6)
    cluster = rng.uniform(0.0, 5.0, size=(20, 2))
    xy = rng.uniform(-2.0, 7.0, size=(50, 2))
    assert len(xy) * len(cluster) <= pose_places._DENSE
    assert pose_places._near(xy, cluster).tolist() == dense(xy, cluster).tolist()
