"""Where the evidence puts a thing, by the kind of evidence, each with a radius that means what it says.

Kinds, most precise first:
- ``measured``: object positions (3-D detections, positions a caller gave).
  The centre of a cluster of places; its covariance is the spread of the
  places over their effective number, plus a quarter of that spread (a big
  object's measured centre moves with the viewpoint) and a floor of
  ``MEASURED_FLOOR`` (depth and calibration error no spread shows).
- ``bearings``: rays of a camera layer from at least two poses, triangulated
  (``geometry.triangulation``): the fit's covariance.
- ``ray``: rays from one pose only: a direction and a range interval
  (``geometry.uncertainty.Segment``), never a point.
- ``robot pose``: sightings stored where the robot stood, without a ray: the
  object was within the layer's view range of every pose of the cluster
  (``geometry.uncertainty.pose_region``).

Every radius holds the object with probability ``COVERAGE`` under its kind's
model. Where a less precise placement overlaps a more precise one it is the
same thing seen less well: it is absorbed (its weight added), so that two
real objects of one class stay two answers and one object never shows up
twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from emem_ros.core.types import Position
from emem_ros.geometry.rays import MIN_RANGE, RaySet, wrap_array
from emem_ros.geometry.triangulation import OUTLIER_Z, SAME_POSE, find_instances
from emem_ros.geometry.uncertainty import (
    COVERAGE,
    MEASURED_FLOOR,
    Region,
    Segment,
    circle_radii,
    normal_quantile,
    pose_region,
)
from emem_ros.tools.clusters import Linker

MEASURED = "measured"
BEARINGS = "bearings"
RAY = "ray"
ROBOT = "robot pose"
PRECEDENCE = {MEASURED: 0, BEARINGS: 1, RAY: 2, ROBOT: 3}

LINK = 1.0
"""Metres: evidence places closer than this belong to one spot."""
ROOM_LINK = 2.5
"""Metres: the wider linking used when no single spot holds most of the evidence."""
MIN_SEGMENT_RAYS = 3
"""Rays no object explains form a direction of their own only with this many from one pose (or when
nothing was triangulated at all): fewer are a detector's stray boxes."""


@dataclass
class Placement:
    """One candidate spot for the thing: position, radius at ``COVERAGE``, and how much evidence."""

    kind: str
    position: Position
    radius: float
    weight: float
    count: int
    first: float
    last: float
    label: int
    """Text id of the best-weighted text there."""
    poses: int = 0
    """Bearings: distinct poses the rays came from."""
    segment: Optional[Segment] = None
    view_range: Optional[float] = None
    members: Any = None
    """What placed it: a mask over the places (measured, robot pose) or over the rays (bearings, ray)."""
    seen_from: Optional[np.ndarray] = None
    """Robot pose: where the robot stood (n, 2), and how much each place weighs (``seen_weight``)."""
    seen_weight: Optional[np.ndarray] = None
    source: Any = None
    """The evidence ``members`` is a mask over (set by the caller)."""
    absorbed: list[str] = field(default_factory=list)
    """Kinds of less precise placements found to be this same thing."""


# ---------------------------------------------------------------------- places (measured, robot pose)
class PlaceLike(Protocol):
    """What ``measured_placements`` and ``robot_placements`` read (``tools.locate._Evidence``)."""

    text_id: np.ndarray
    layer: np.ndarray
    xyz: np.ndarray
    count: np.ndarray
    first: np.ndarray
    last: np.ndarray
    weight: np.ndarray


def link_places(xy: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Cluster labels: places within ``LINK``; at room scale (``ROOM_LINK``) when no spot holds most weight
    (a room-sized concept seen from several spots, "kitchen") and that gathers more."""
    linker = Linker(xy)
    labels = linker.components(LINK)
    total = np.bincount(labels, weights=weight)
    if total.max() < 0.5 * total.sum():
        wide = linker.components(ROOM_LINK)
        wide_total = np.bincount(wide, weights=weight)
        if wide_total.max() > total.max():
            return wide
    return labels


def measured_placements(evidence: PlaceLike) -> list[Placement]:
    labels = link_places(evidence.xyz[:, :2], evidence.weight)
    stats = _ClusterStats(evidence, labels)
    covariance = (stats.cov * (1.0 / stats.n_eff + 0.25)[:, None, None]
                  + np.eye(2)[None, :, :] * MEASURED_FLOOR ** 2)
    radii = circle_radii(covariance)
    return [stats.placement(MEASURED, k, stats.centre[k], radii[k]) for k in range(stats.k)]


def robot_placements(evidence: PlaceLike, view_range_of: Callable[[str], float], blur: float) -> list[Placement]:
    """Clusters of robot poses; the object lies within view of every pose of its cluster.

    The region (``pose_region``) is worked out by ``finish`` for the
    placements that are not absorbed by a more precise one: until then the
    position is the poses' weighted centroid and the radius the view range.
    """
    labels = link_places(evidence.xyz[:, :2], evidence.weight)
    stats = _ClusterStats(evidence, labels)
    reach = np.zeros(stats.k)
    np.maximum.at(reach, labels, _per_layer(evidence.layer, view_range_of))
    out = []
    for k in range(stats.k):
        placement = stats.placement(ROBOT, k, stats.centre[k], float(reach[k]) + blur)
        mask = labels == k
        placement.view_range = float(reach[k]) + blur
        placement.seen_from, placement.seen_weight = evidence.xyz[mask, :2], evidence.weight[mask]
        out.append(placement)
    return out


def explained(evidence: PlaceLike, placed: Sequence[Placement], view_range_of: Callable[[str], float]
              ) -> np.ndarray:
    """Robot poses (places) from which a placed thing was within view: their sightings are of it.

    Checked per place before any clustering: at a robot's scale of evidence
    (thousands of sightings of a class) most poses are explained by the
    measured or triangulated objects, and only the rest can hint at another.
    """
    out = np.zeros(len(evidence.weight), dtype=bool)
    if not placed or not len(out):
        return out
    spots = np.array([p.position[:2] for p in placed])
    radius = np.array([p.radius for p in placed])
    reach = _per_layer(evidence.layer, view_range_of)
    d2 = (evidence.xyz[:, None, 0] - spots[None, :, 0]) ** 2 + (evidence.xyz[:, None, 1] - spots[None, :, 1]) ** 2
    hinted: np.ndarray = (d2 <= (reach[:, None] + radius[None, :]) ** 2).any(axis=1)
    return hinted


def _per_layer(layer: np.ndarray, value_of: Callable[[str], float]) -> np.ndarray:
    """``value_of(layer)`` for every row, one call per distinct layer (a few) rather than per row."""
    names = set(layer.tolist())  # np.unique would sort the object array in Python comparisons (~10x slower)
    if len(names) == 1:
        return np.full(len(layer), value_of(next(iter(names))))
    out = np.empty(len(layer))
    for name in names:
        out[layer == name] = value_of(name)
    return out


def points_at(rays: RaySet, placed: Placement) -> np.ndarray:
    """Rays that point at a placed thing, within their noise, its radius and their range."""
    dx, dy = placed.position[0] - rays.x, placed.position[1] - rays.y
    distance = np.hypot(dx, dy)
    off = np.abs(wrap_array(np.arctan2(dy, dx) - rays.azimuth))
    slack = np.arctan2(placed.radius, np.maximum(distance, 1e-6))
    pointing: np.ndarray = (off <= OUTLIER_Z * rays.sigma + slack) & (distance <= rays.view_range * 1.1 + placed.radius)
    return pointing


def finish(placements: Sequence[Placement], track: Optional[Callable[[Placement], Optional[Region]]] = None) -> None:
    """The region of each robot-pose placement (after ``absorb``, which needs only the poses): from the
    layer's track where ``track`` can read it (``tools.pose_places``), else every spot within view of
    all its poses (``pose_region``)."""
    for p in placements:
        if p.kind == ROBOT and p.seen_from is not None and p.view_range is not None:
            region = track(p) if track is not None else None
            if region is None:
                region = pose_region(p.seen_from, p.view_range)
            p.position = (round(region.centre[0], 3), round(region.centre[1], 3), p.position[2])
            p.radius = round(region.radius, 2)


class _ClusterStats:
    """Per-cluster weight, counts, times, weighted centre and covariance of places, in a few array passes."""

    def __init__(self, evidence: PlaceLike, labels: np.ndarray) -> None:
        self.labels = labels
        k = self.k = int(labels.max()) + 1 if len(labels) else 0
        w = evidence.weight
        self.weight = np.bincount(labels, weights=w, minlength=k)
        self.n_eff = self.weight ** 2 / np.bincount(labels, weights=w * w, minlength=k)
        xyz = evidence.xyz
        self.centre = np.column_stack([np.bincount(labels, weights=w * xyz[:, i], minlength=k) / self.weight
                                       for i in range(3)])
        dx, dy = xyz[:, 0] - self.centre[labels, 0], xyz[:, 1] - self.centre[labels, 1]
        sxx, sxy, syy = (np.bincount(labels, weights=w * v, minlength=k) / self.weight
                         for v in (dx * dx, dx * dy, dy * dy))
        self.cov = np.stack([np.stack([sxx, sxy], axis=1), np.stack([sxy, syy], axis=1)], axis=1)
        self.count = np.bincount(labels, weights=evidence.count, minlength=k)
        order = np.lexsort((-w, labels))  # by cluster, the heaviest place first
        starts = np.searchsorted(labels[order], np.arange(k))
        self.first = np.minimum.reduceat(evidence.first[order], starts)
        self.last = np.maximum.reduceat(evidence.last[order], starts)
        self.label = evidence.text_id[order[starts]]

    def placement(self, kind: str, k: int, centre: np.ndarray, radius: float) -> Placement:
        return Placement(kind=kind, position=_rounded(centre), radius=round(float(radius), 2),
                         weight=float(self.weight[k]), count=int(self.count[k]), first=float(self.first[k]),
                         last=float(self.last[k]), label=int(self.label[k]), members=self.labels == k)


# ---------------------------------------------------------------------- rays (bearings, ray)
def ray_placements(rays: RaySet, text_id: np.ndarray, placed: Sequence[Placement] = (),
                   explained_elsewhere: bool = False) -> list[Placement]:
    """Triangulated objects (``bearings``), then the strongest unexplained direction (``ray``).

    ``rays.weight`` is each ray's relevance times recency; a placement weighs
    the sum over its poses of their mean weight times (1 + log of their rays),
    like places do. Rays pointing at a thing already ``placed`` (measured)
    are its sightings: they add their weight to it and are not triangulated;
    then (``explained_elsewhere``) a few rays left over are stray boxes, not a
    direction of their own.
    """
    if not len(rays):
        return []
    owner = np.full(len(rays), -1)
    for k, p in enumerate(placed):  # each ray is a sighting of the first placed thing it points at
        owner[(owner < 0) & points_at(rays, p)] = k
    for k, p in enumerate(placed):
        mine = owner == k
        if mine.any():
            p.weight += pose_weight(rays.take(mine), text_id[mine])
            p.absorbed.append(BEARINGS)
    if (owner >= 0).any():
        keep = np.nonzero(owner < 0)[0]
        return [_reindex(q, keep, len(rays))
                for q in ray_placements(rays.take(keep), text_id[keep], explained_elsewhere=True)]
    fixes, unexplained = find_instances(rays)
    out = []
    for fix in fixes:
        mask = fix.inliers
        position = (float(fix.position[0]), float(fix.position[1]), fix.z)
        out.append(_from_rays(BEARINGS, rays, text_id, mask, position, fix.radius(), fix.poses))
    segment = _strongest_direction(rays, unexplained, any_fix=bool(fixes) or explained_elsewhere)
    if segment is not None:
        mask, seg = segment
        region = seg.circle()
        z = float(rays.z[mask].mean())
        placement = _from_rays(RAY, rays, text_id, mask, (region.centre[0], region.centre[1], z), region.radius, 1)
        placement.segment = seg
        placement.view_range = seg.far
        out.append(placement)
    return out


def _reindex(placement: Placement, keep: np.ndarray, n: int) -> Placement:
    """A placement made from a subset of the rays, its mask put back over all of them."""
    mask = np.zeros(n, dtype=bool)
    mask[keep[placement.members]] = True
    placement.members = mask
    return placement


def _from_rays(kind: str, rays: RaySet, text_id: np.ndarray, mask: np.ndarray, position: Sequence[float],
               radius: float, poses: int) -> Placement:
    weight = pose_weight(rays.take(mask), text_id[mask])
    return Placement(kind=kind, position=_rounded(np.asarray(position)), radius=round(float(radius), 2),
                     weight=weight, count=int(mask.sum()), first=float(rays.stamp[mask].min()),
                     last=float(rays.stamp[mask].max()), label=_heaviest(text_id[mask], rays.weight[mask]),
                     poses=poses, members=mask)


def pose_weight(rays: RaySet, text_id: np.ndarray) -> float:
    """Sum over (text, pose) of mean ray weight x (1 + ln rays): a pose's repeats count like a place's."""
    if not len(rays):
        return 0.0
    cell = (np.floor(rays.x / SAME_POSE).astype(np.int64) * 1_000_003
            + np.floor(rays.y / SAME_POSE).astype(np.int64)) * 65_537 + text_id
    _, index, n = np.unique(cell, return_inverse=True, return_counts=True)
    total = np.bincount(index.reshape(-1), weights=rays.weight)
    return float((total / n * (1.0 + np.log(n))).sum())


def _strongest_direction(rays: RaySet, unexplained: np.ndarray, any_fix: bool
                         ) -> Optional[tuple[np.ndarray, Segment]]:
    """The heaviest pose among unexplained rays, and the direction most of its rays agree on."""
    if not unexplained.any():
        return None
    idx = np.nonzero(unexplained)[0]
    cell = np.floor(rays.x[idx] / SAME_POSE).astype(np.int64) * 1_000_003 + np.floor(
        rays.y[idx] / SAME_POSE).astype(np.int64)
    cells, index = np.unique(cell, return_inverse=True)
    heaviest = int(np.argmax(np.bincount(index.reshape(-1), weights=rays.weight[idx])))
    members = idx[index.reshape(-1) == heaviest]
    if any_fix and len(members) < MIN_SEGMENT_RAYS:
        return None
    az, sigma = rays.azimuth[members], rays.sigma[members]
    keep = np.ones(len(members), dtype=bool)
    mean = math.atan2(np.sin(az).sum(), np.cos(az).sum())
    for _ in range(5):  # the direction most rays agree on (a pose may also see a second object)
        residual = wrap_array(az - mean)
        spread = math.sqrt(float((residual[keep] ** 2).mean()) + float((sigma[keep] ** 2).mean()))
        now = np.abs(residual) <= OUTLIER_Z * max(spread, float(sigma.min()))
        if not now.any():
            break
        keep = now
        mean = math.atan2(np.sin(az[keep]).sum(), np.cos(az[keep]).sum())
    if any_fix and keep.sum() < MIN_SEGMENT_RAYS:
        return None
    chosen = members[keep]
    residual = wrap_array(rays.azimuth[chosen] - mean)
    spread = math.sqrt(float((residual ** 2).mean()) + float((rays.sigma[chosen] ** 2).mean()))
    mask = np.zeros(len(rays), dtype=bool)
    mask[chosen] = True
    origin = (float(rays.x[chosen].mean()), float(rays.y[chosen].mean()))
    far = float(np.median(rays.view_range[chosen]))
    return mask, Segment(origin, mean, spread, MIN_RANGE, far)


# ---------------------------------------------------------------------- together
def absorb(placements: list[Placement]) -> list[Placement]:
    """Less precise placements that are the same thing as a more precise one add their weight to it.

    Same thing: a triangulated or measured spot within the other's radius
    (plus its own), a ray's wedge through a spot, a spot within view of where
    the robot stood for most of a robot-pose placement's weight (the poses
    could have seen it: a robot-pose sighting is weak evidence, and a view
    range is a round figure). Placements of one kind never absorb each other
    (two chairs).
    """
    ordered = sorted(placements, key=lambda p: (PRECEDENCE[p.kind], -p.weight))
    kept: list[Placement] = []
    for p in ordered:
        host = None
        for q in kept:
            if PRECEDENCE[q.kind] < PRECEDENCE[p.kind] and _same_thing(q, p):
                if host is None or math.dist(q.position[:2], p.position[:2]) < math.dist(host.position[:2],
                                                                                          p.position[:2]):
                    host = q
        if host is None:
            kept.append(p)
        else:
            host.weight += p.weight
            host.absorbed.append(p.kind)
    kept.sort(key=lambda p: -p.weight)
    return kept


def _same_thing(precise: Placement, vague: Placement) -> bool:
    """Whether ``vague`` is consistent with the thing ``precise`` places."""
    if vague.seen_from is not None and vague.seen_weight is not None and vague.view_range is not None:
        d = np.hypot(vague.seen_from[:, 0] - precise.position[0], vague.seen_from[:, 1] - precise.position[1])
        within = vague.seen_weight[d <= vague.view_range + precise.radius].sum()
        return bool(within >= 0.5 * vague.seen_weight.sum())
    if vague.segment is not None:
        seg = vague.segment
        dx, dy = precise.position[0] - seg.origin[0], precise.position[1] - seg.origin[1]
        distance = math.hypot(dx, dy)
        if distance > seg.far * 1.1 + precise.radius:
            return False
        off = abs(float(wrap_array(np.array([math.atan2(dy, dx) - seg.azimuth]))[0]))
        slack = math.atan2(precise.radius, max(distance, 1e-6))
        return off <= normal_quantile(COVERAGE) * seg.spread + slack
    return math.dist(precise.position[:2], vague.position[:2]) <= precise.radius + vague.radius


def _rounded(point: np.ndarray) -> Position:
    return (round(float(point[0]), 3), round(float(point[1]), 3), round(float(point[2]), 3))


def _heaviest(text_id: np.ndarray, weight: np.ndarray) -> int:
    texts, index = np.unique(text_id, return_inverse=True)
    return int(texts[int(np.argmax(np.bincount(index.reshape(-1), weights=weight)))])
