"""Bearings for entities: a visit's rays split into objects, and each entity's rays triangulated.

A camera layer stores each 2-D detection's ray (``geometry.rays``). In one
visit, the rays of a label are triangulated (``find_instances``): each object
they meet at becomes a sighting of its own (two chairs in one room are two),
and the rays no object explains stay one vague sighting of the robot's pose.
Across visits an entity keeps a bounded set of compact rays (``BearingTrack``:
rays from one viewpoint in one direction are merged) and is placed where they
meet (``position_source: bearings``) once they come from two poses: rays seen
from the doorway on Monday and from the table on Tuesday triangulate
together, though neither visit alone could.

Matching a sighting with rays to an entity uses them instead of distances
where it can (``verdict``): a triangulated sighting is the entity when the two
positions are within their radii of each other; single-pose rays are the
entity when they point at its position (within their noise and the view
range), or, for an entity placed only by rays from one pose, when its rays
and the sighting's meet at one spot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from emem_ros.consolidation.rows import ObsRow
from emem_ros.geometry.rays import RAY_KEY, Ray, RaySet, view_range_of, wrap_array
from emem_ros.geometry.triangulation import (
    DIRECTION_BIN,
    OUTLIER_Z,
    RANGE_SLACK,
    VIEW_CELL,
    Fix,
    find_instances,
)
from emem_ros.geometry.uncertainty import COVERAGE

MAX_TRACK_RAYS = 64
"""Compact rays an entity keeps (newest first): enough poses to triangulate, bounded metadata."""
AGREE = 0.8
"""Share of rays that must point at an entity (or meet with its rays) for a sighting to be that entity."""
SIZE_SLACK = 0.5
"""Metres: rays may pass this far from an entity's position and still point at it (the object's size)."""
MIN_DISSENT = 3
"""Rays that must point elsewhere before a sighting counts as another object: one or two stray boxes
(a detector's mistakes) are no evidence of a second object."""


@dataclass
class Partition:
    """Rows of one sighting that go together: an object the rays meet at, or what no object explains."""

    rows: list[int]
    rays: RaySet
    fix: Optional[Fix] = None


def rays_of_rows(rows: Sequence[ObsRow]) -> RaySet:
    """The rays of consolidation rows (``ObsRow``); ``key`` is the row's index in ``rows``."""
    values = []
    for i, row in enumerate(rows):
        meta_json = row.metadata_json
        if not meta_json or f'"{RAY_KEY}"' not in meta_json:
            continue
        metadata = row.metadata
        ray = Ray.from_metadata(metadata.get(RAY_KEY))
        if ray is None:
            continue
        values.append((ray.x, ray.y, ray.z, ray.azimuth, ray.elevation, ray.sigma, view_range_of(metadata),
                       row.stamp, 1.0, i))
    return RaySet.from_rows(values)


def partition(rows: Sequence[ObsRow]) -> list[Partition]:
    """A visit's rows of one label, by the objects their rays meet at (rows without a ray stay with the rest)."""
    rays = rays_of_rows(rows)
    if len(rays) < 2:
        return [Partition(list(range(len(rows))), rays)]
    fixes, unexplained = find_instances(rays)
    if not fixes:
        return [Partition(list(range(len(rows))), rays)]
    parts = []
    taken: set[int] = set()
    for found in fixes:
        members = [int(k) for k in rays.key[found.inliers] if int(k) not in taken]
        taken.update(members)
        parts.append(Partition(members, rays.take(found.inliers), found))
    rest = [i for i in range(len(rows)) if i not in taken]
    if rest:
        parts.append(Partition(rest, rays.take(unexplained)))
    return parts


@dataclass
class BearingTrack:
    """An entity's compact rays (bounded) and where they meet."""

    rays: RaySet = field(default_factory=RaySet.empty)
    """``weight`` holds how many detections a compact ray stands for."""
    _fix: Optional[Fix] = field(default=None, repr=False)
    _fitted: bool = field(default=False, repr=False)

    def __len__(self) -> int:
        return len(self.rays)

    def add(self, rays: RaySet) -> None:
        if not len(rays):
            return
        self.rays = compact(RaySet.concat([self.rays, rays]))
        self._fitted = False

    def copy(self) -> "BearingTrack":
        """A copy that keeps the fit (``add`` replaces ``rays``, never changes them in place)."""
        return BearingTrack(self.rays, self._fix, self._fitted)

    def fix(self) -> Optional[Fix]:
        """Where the rays meet (the best-supported object), None before two poses agree."""
        if not self._fitted:
            self._fix = None
            if len(self.rays) >= 2:
                fixes, _ = find_instances(self.rays, max_instances=1)
                self._fix = fixes[0] if fixes else None
            self._fitted = True
        return self._fix

    def meets(self, rays: RaySet) -> Optional[Fix]:
        """A fix of these rays together with ours when most of both agree on one spot, else None."""
        if not len(self.rays) or not len(rays):
            return None
        both = RaySet.concat([self.rays, rays])
        fixes, _ = find_instances(both, max_instances=1)
        if not fixes:
            return None
        found = fixes[0]
        ours, theirs = found.inliers[:len(self.rays)], found.inliers[len(self.rays):]
        if ours.mean() < AGREE or theirs.mean() < AGREE:
            return None
        return found

    def to_json(self) -> list[list[float]]:
        r = self.rays
        return [[round(float(r.x[i]), 3), round(float(r.y[i]), 3), round(float(r.z[i]), 3),
                 round(float(r.azimuth[i]), 5), round(float(r.elevation[i]), 5), round(float(r.sigma[i]), 5),
                 round(float(r.view_range[i]), 2), round(float(r.stamp[i]), 3), float(r.weight[i])]
                for i in range(len(r))]

    @classmethod
    def from_json(cls, value: Any) -> "BearingTrack":
        rows = []
        if isinstance(value, list):
            for item in value:
                if isinstance(item, list) and len(item) == 9 and all(
                        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in item):
                    if item[5] > 0 and item[6] > 0 and item[8] > 0:
                        rows.append((*item, 0))
        return cls(RaySet.from_rows(rows))


def compact(rays: RaySet) -> RaySet:
    """Rays from one viewpoint cell in one direction bin merged (counts in ``weight``), newest kept."""
    if len(rays) <= 1:
        return rays
    cell = (np.floor(rays.x / VIEW_CELL).astype(np.int64) * 1_000_003
            + np.floor(rays.y / VIEW_CELL).astype(np.int64))
    bins = np.floor((rays.azimuth + math.pi) / DIRECTION_BIN).astype(np.int64)
    _, index = np.unique(cell * 4096 + bins, return_inverse=True)
    index = index.reshape(-1)
    k = int(index.max()) + 1
    w = rays.weight

    def mean(values: np.ndarray) -> np.ndarray:
        return np.bincount(index, weights=values * w, minlength=k) / np.bincount(index, weights=w, minlength=k)

    azimuth = np.arctan2(np.bincount(index, weights=np.sin(rays.azimuth) * w, minlength=k),
                         np.bincount(index, weights=np.cos(rays.azimuth) * w, minlength=k))
    last = np.full(k, -np.inf)
    np.maximum.at(last, index, rays.stamp)
    merged = RaySet(mean(rays.x), mean(rays.y), mean(rays.z), azimuth, mean(rays.elevation), mean(rays.sigma),
                    mean(rays.view_range), last, np.bincount(index, weights=w, minlength=k),
                    np.zeros(k, dtype=np.int64))
    if k > MAX_TRACK_RAYS:
        merged = merged.take(np.argsort(-merged.stamp, kind="stable")[:MAX_TRACK_RAYS])
    return merged


def points_at(rays: RaySet, position: Sequence[float] | np.ndarray, radius: float = 0.0) -> Optional[bool]:
    """Whether most of the rays pass the position (within their noise, its size and ``radius``) in range;
    None when they do not but are too few to say it is something else (``MIN_DISSENT``)."""
    if not len(rays):
        return None
    dx, dy = position[0] - rays.x, position[1] - rays.y
    distance = np.hypot(dx, dy)
    off = np.abs(wrap_array(np.arctan2(dy, dx) - rays.azimuth))
    slack = np.arctan2(SIZE_SLACK + radius, np.maximum(distance, 1e-6))
    agree = (off <= OUTLIER_Z * rays.sigma + slack) & (distance <= rays.view_range * RANGE_SLACK)
    if float(agree.mean()) >= AGREE:
        return True
    return False if int((~agree).sum()) >= MIN_DISSENT else None


def fix_radius(found: Optional[Fix]) -> float:
    return found.radius(COVERAGE) if found is not None else math.inf
