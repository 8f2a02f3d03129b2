"""Where rays from several poses meet: least squares with outlier rejection and a covariance.

A ray i (origin o_i, unit direction d_i, angular noise sigma_i) seen from
range r_i misses the object by a perpendicular distance of about
r_i * sigma_i. The estimate minimises the weighted sum of squared
perpendicular distances, sum w_i (n_i . (x - o_i))^2 with n_i the ray's
normal and w_i = 1 / (r_i sigma_i)^2: a 2x2 linear system, re-solved with the
ranges of the new estimate until it settles. Its inverse matrix is the
covariance of the estimate.

Honesty about what the rays are worth:
- Rays from one viewpoint (a robot turning on the spot, or standing still
  while its detector repeats itself) share their errors: the heading, the
  mounting, the same view of the object. A viewpoint (origins within
  ``VIEW_CELL``) counts as at most ``MAX_PER_VIEW`` independent rays.
- The stated noise may be too small (a box jitters more than the parameter
  says, a big object's box centre moves with the viewpoint): the covariance
  is scaled up by the residuals' chi-square per degree of freedom (never
  down), mixed with ``PRIOR_DOF`` degrees of freedom at the stated noise.
  A scale estimated from few rays is itself uncertain: the radius then uses
  the heavier-tailed F distribution of those degrees of freedom instead of
  the normal one (``circle_radius``).
- A floor (``POSITION_FLOOR``) for what no residual shows: odometry drift,
  the camera's mounting.
- Outliers (a box on the wrong object, a false detection) are rays that miss
  the estimate by more than ``OUTLIER_Z`` of their (scaled) noise, or whose
  object would lie behind the camera or beyond its view range; the fit is
  repeated without them.

Several objects of one class (two mugs in two rooms) are found one after
the other (``find_instances``): pairs of rays from different viewpoints vote
for where they cross, the best-supported spot seeds a fit, its inliers are
set aside, and the next spot is tried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from emem_ros.geometry.rays import MIN_RANGE, RaySet, wrap_array
from emem_ros.geometry.uncertainty import COVERAGE, circle_radius

VIEW_CELL = 0.25
"""Metres: rays whose origins share a cell this size were taken from one viewpoint."""
SAME_POSE = 0.5
"""Metres: the grid cell of a pose in "bearings from N poses" (origins in one cell are one pose)."""
MAX_PER_VIEW = 3.0
"""A viewpoint's rays count as at most this many independent ones."""
OUTLIER_Z = 3.0
MAX_SCALE = 3.0
"""The residual scale used for the outlier gate at most (an outlier-ridden fit must not accept everything)."""
PRIOR_DOF = 3.0
POSITION_FLOOR = 0.05
"""Metres (1 sigma per axis) added to every triangulated position: odometry and mounting error."""
RANGE_SLACK = 1.1
"""An object may lie up to this factor beyond a ray's view range (the range is a round figure)."""
MIN_CROSSING = math.radians(4.0)
"""Rays crossing at a smaller angle do not vote for a spot (their crossing is mostly noise)."""
MIN_RAYS = 3
SEED_SLACK = (1.0, 0.5, 0.25, 0.1)
"""Metres the start may be off: the first iterations also accept rays passing this close to the estimate,
then the gate narrows to the rays' own noise."""
VOTE_CELL = 0.5
MAX_GROUPS = 120
"""Direction groups that vote (largest first): bounds the pairs at ~7k whatever the number of rays."""
MAX_SEEDS = 12
ITERATIONS = 10


@dataclass
class Fix:
    """A triangulated position with its covariance and the rays that support it."""

    position: np.ndarray
    covariance: np.ndarray
    z: float
    inliers: np.ndarray
    """Bool per input ray: the rays this fix explains."""
    poses: int
    """Distinct viewpoints (``SAME_POSE`` apart) among the inliers."""
    rays: int
    scale: float
    """The residual scale applied to the covariance (1 = the rays were as precise as stated)."""
    dof: float = math.inf
    """Degrees of freedom behind the scale (prior included): few rays make the tails heavier."""

    def radius(self, coverage: float = COVERAGE) -> float:
        return circle_radius(self.covariance, coverage, self.dof)

    @property
    def sigma(self) -> float:
        """RMS error of the position (metres): sqrt of the covariance's trace."""
        return math.sqrt(max(float(np.trace(self.covariance)), 0.0))


def view_keys(rays: RaySet) -> np.ndarray:
    """One integer per ray: the ``VIEW_CELL`` cell of its origin."""
    cx = np.floor(rays.x / VIEW_CELL).astype(np.int64)
    cy = np.floor(rays.y / VIEW_CELL).astype(np.int64)
    return cx * 1_000_003 + cy


def count_poses(x: np.ndarray, y: np.ndarray) -> int:
    """Viewpoints: distinct ``SAME_POSE`` grid cells among the origins."""
    if len(x) == 0:
        return 0
    cells = np.floor(x / SAME_POSE).astype(np.int64) * 1_000_003 + np.floor(y / SAME_POSE).astype(np.int64)
    return int(len(np.unique(cells)))


def fit(rays: RaySet, start: np.ndarray, candidates: Optional[np.ndarray] = None) -> Optional[Fix]:
    """The least-squares meeting point of the rays near ``start`` (see the module docstring).

    ``candidates``: bool mask of the rays that may take part (default: all).
    None when fewer than ``MIN_RAYS`` rays from two poses agree on a spot.
    """
    n = len(rays)
    allowed = np.ones(n, dtype=bool) if candidates is None else np.asarray(candidates, dtype=bool)
    if allowed.sum() < 2:
        return None
    ox, oy, az, sigma = rays.x, rays.y, rays.azimuth, rays.sigma
    nx, ny = -np.sin(az), np.cos(az)
    reach = rays.view_range * RANGE_SLACK
    keys = view_keys(rays)
    x = np.asarray(start, dtype=np.float64)[:2].copy()
    scale = 1.0
    inliers = np.zeros(n, dtype=bool)
    a_matrix = np.zeros((2, 2))
    for step in range(ITERATIONS + len(SEED_SLACK)):
        slack = SEED_SLACK[step] if step < len(SEED_SLACK) else 0.0
        dx, dy = x[0] - ox, x[1] - oy
        rng = np.hypot(dx, dy)
        residual = wrap_array(np.arctan2(dy, dx) - az)
        gate = OUTLIER_Z * sigma * min(scale, MAX_SCALE) + np.arctan2(slack, np.maximum(rng, MIN_RANGE))
        now_in = allowed & (np.abs(residual) <= gate) & (rng >= 0.5 * MIN_RANGE) & (rng <= reach)
        if now_in.sum() < 2:
            return None
        _, group, sizes = np.unique(keys[now_in], return_inverse=True, return_counts=True)
        share = np.minimum(sizes, MAX_PER_VIEW) / sizes
        c = share[group.reshape(-1)]
        r = np.maximum(rng[now_in], MIN_RANGE)
        s = sigma[now_in]
        w = c / (s * s * r * r)
        ni_x, ni_y = nx[now_in], ny[now_in]
        a11, a12, a22 = (w * ni_x * ni_x).sum(), (w * ni_x * ni_y).sum(), (w * ni_y * ni_y).sum()
        proj = ni_x * ox[now_in] + ni_y * oy[now_in]
        b = np.array([(w * ni_x * proj).sum(), (w * ni_y * proj).sum()])
        a_matrix = np.array([[a11, a12], [a12, a22]])
        det = a11 * a22 - a12 * a12
        if det <= 1e-12 * max(a11 * a22, 1e-300):
            return None  # all rays parallel: no crossing
        new_x = np.linalg.solve(a_matrix, b)
        chi2 = float((c * (residual[now_in] / s) ** 2).sum())
        dof = float(c.sum()) - 2.0
        scale = math.sqrt(max(1.0, (PRIOR_DOF + chi2) / (PRIOR_DOF + max(dof, 0.0))))
        settled = slack == 0.0 and np.array_equal(now_in, inliers) and float(np.hypot(*(new_x - x))) < 1e-3
        x, inliers = new_x, now_in
        if settled:
            break
    count = int(inliers.sum())
    poses = count_poses(ox[inliers], oy[inliers])
    if count < MIN_RAYS or poses < 2:
        return None
    covariance = np.linalg.inv(a_matrix) * scale * scale + np.eye(2) * POSITION_FLOOR ** 2
    rng = np.hypot(x[0] - ox[inliers], x[1] - oy[inliers])
    heights = rays.z[inliers] + rng * np.tan(rays.elevation[inliers])
    return Fix(position=x, covariance=covariance, z=float(np.median(heights)), inliers=inliers, poses=poses,
               rays=count, scale=scale, dof=PRIOR_DOF + max(dof, 0.0))


def find_instances(rays: RaySet, max_instances: int = 4) -> tuple[list[Fix], np.ndarray]:
    """Every object the rays triangulate, best supported first, and the rays none of them explains."""
    n = len(rays)
    explained = np.zeros(n, dtype=bool)
    fixes: list[Fix] = []
    if n < MIN_RAYS:
        return fixes, ~explained
    groups = _direction_groups(rays)
    if len(groups.count) < 2:
        return fixes, ~explained
    pairs = _crossings(groups)
    if pairs is None:
        return fixes, ~explained
    tried: set[tuple[int, int]] = set()
    for _ in range(max_instances + MAX_SEEDS):
        if len(fixes) >= max_instances:
            break
        alive = ~groups.spent[pairs.a] & ~groups.spent[pairs.b]
        seed = _best_seed(pairs, alive, tried)
        if seed is None:
            break
        cell, start = seed
        tried.add(cell)
        found = fit(rays, start, ~explained)
        if found is None:
            continue
        if any(float(np.hypot(*(found.position - f.position))) < max(1.0, f.radius()) for f in fixes):
            continue  # the fit fell back onto an object already found
        fixes.append(found)
        explained |= found.inliers
        groups.spend(explained)
    fixes.sort(key=lambda f: -f.rays)
    return fixes, ~explained


@dataclass
class _Groups:
    """Rays binned by viewpoint cell and direction: the voters."""

    x: np.ndarray
    y: np.ndarray
    azimuth: np.ndarray
    count: np.ndarray
    view: np.ndarray
    reach: np.ndarray
    index: np.ndarray
    """Group of each input ray; ``len(count)`` for rays whose group does not vote."""
    spent: np.ndarray
    """Per group: most of its rays are explained by an object found already."""

    def spend(self, explained: np.ndarray) -> None:
        k = len(self.count)
        members = np.bincount(self.index, weights=explained.astype(np.float64), minlength=k + 1)[:k]
        self.spent |= members >= 0.5 * self.count


DIRECTION_BIN = math.radians(3.0)


def _direction_groups(rays: RaySet) -> _Groups:
    views = view_keys(rays)
    bins = np.floor((rays.azimuth + math.pi) / DIRECTION_BIN).astype(np.int64)
    keys = views * 4096 + bins
    unique, index, count = np.unique(keys, return_inverse=True, return_counts=True)
    index = index.reshape(-1)
    k = len(unique)
    sx = np.bincount(index, weights=rays.x, minlength=k) / count
    sy = np.bincount(index, weights=rays.y, minlength=k) / count
    cos = np.bincount(index, weights=np.cos(rays.azimuth), minlength=k)
    sin = np.bincount(index, weights=np.sin(rays.azimuth), minlength=k)
    reach = np.bincount(index, weights=rays.view_range, minlength=k) / count
    view = unique // 4096
    if k > MAX_GROUPS:  # the largest groups vote; the fit still uses every ray
        keep = np.argsort(-count, kind="stable")[:MAX_GROUPS]
        remap = np.full(k, MAX_GROUPS, dtype=np.int64)
        remap[keep] = np.arange(len(keep))
        index = remap[index]
        sx, sy, cos, sin, reach = sx[keep], sy[keep], cos[keep], sin[keep], reach[keep]
        view, count = view[keep], count[keep]
    return _Groups(sx, sy, np.arctan2(sin, cos), count.astype(np.float64), view, reach * RANGE_SLACK, index,
                   np.zeros(len(count), dtype=bool))


@dataclass
class _Pairs:
    a: np.ndarray
    b: np.ndarray
    point: np.ndarray
    weight: np.ndarray
    cell: np.ndarray


def _crossings(groups: _Groups) -> Optional[_Pairs]:
    k = len(groups.count)
    a, b = np.triu_indices(k, 1)
    far_apart = groups.view[a] != groups.view[b]
    a, b = a[far_apart], b[far_apart]
    if len(a) == 0:
        return None
    da = np.column_stack([np.cos(groups.azimuth[a]), np.sin(groups.azimuth[a])])
    db = np.column_stack([np.cos(groups.azimuth[b]), np.sin(groups.azimuth[b])])
    oa = np.column_stack([groups.x[a], groups.y[a]])
    ob = np.column_stack([groups.x[b], groups.y[b]])
    cross = da[:, 0] * db[:, 1] - da[:, 1] * db[:, 0]
    ok = np.abs(cross) >= math.sin(MIN_CROSSING)
    cross = np.where(ok, cross, 1.0)
    diff = ob - oa
    ta = (diff[:, 0] * db[:, 1] - diff[:, 1] * db[:, 0]) / cross
    tb = (diff[:, 0] * da[:, 1] - diff[:, 1] * da[:, 0]) / cross
    ok &= (ta >= MIN_RANGE) & (tb >= MIN_RANGE) & (ta <= groups.reach[a]) & (tb <= groups.reach[b])
    if not ok.any():
        return None
    a, b, ta = a[ok], b[ok], ta[ok]
    point = oa[ok] + da[ok] * ta[:, None]
    weight = np.minimum(groups.count[a], MAX_PER_VIEW) * np.minimum(groups.count[b], MAX_PER_VIEW)
    cell = np.floor(point / VOTE_CELL).astype(np.int64)
    return _Pairs(a, b, point, weight, cell)


def _best_seed(pairs: _Pairs, alive: np.ndarray, tried: set[tuple[int, int]]
               ) -> Optional[tuple[tuple[int, int], np.ndarray]]:
    """The vote cell (3x3 neighbourhood summed) with the most weight not yet tried, and its mean crossing."""
    if not alive.any():
        return None
    cells, weight, points = pairs.cell[alive], pairs.weight[alive], pairs.point[alive]
    keys = cells[:, 0] * _KEY_SPAN + cells[:, 1]
    unique, index = np.unique(keys, return_inverse=True)
    raw = np.bincount(index.reshape(-1), weights=weight, minlength=len(unique))
    smoothed = raw.copy()
    for offset in _NEIGHBOURS:
        at = np.searchsorted(unique, unique + offset)
        at = np.minimum(at, len(unique) - 1)
        hit = unique[at] == unique + offset
        smoothed[hit] += raw[at[hit]]
    for i in np.argsort(-smoothed, kind="stable"):
        key = (int(unique[i] // _KEY_SPAN), int(unique[i] % _KEY_SPAN))
        key = (key[0] + (1 if key[1] > _KEY_SPAN // 2 else 0), key[1] - (_KEY_SPAN if key[1] > _KEY_SPAN // 2 else 0))
        if key in tried:
            continue
        near = (np.abs(cells[:, 0] - key[0]) <= 1) & (np.abs(cells[:, 1] - key[1]) <= 1)
        w = weight[near]
        return key, (points[near] * w[:, None]).sum(axis=0) / w.sum()
    return None


_KEY_SPAN = 1 << 24
"""Vote cells are keyed cx * span + cy; cell coordinates stay far below half the span (4,000 km)."""
_NEIGHBOURS = tuple(dx * _KEY_SPAN + dy for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx or dy)
