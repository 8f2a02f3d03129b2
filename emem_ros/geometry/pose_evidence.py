"""Where a thing is, from where the robot stood when it perceived it and where it did not.

A layer stored at the robot's pose says, per place the robot perceived from,
how often it named the thing (``seen``) out of how often it perceived at all
(``perceived``: its observations there). A detector names a thing within its
range, nearer ones more reliably, and names nothing beyond; so

    P(named | distance d) = a g(d / R) + EPSILON,  g = 1 up to R/2, falling linearly to 0 at R,

and the thing's position p has the likelihood

    sum over places i of  w_i [ seen_i log P(d_ip) + (perceived_i - seen_i) log(1 - P(d_ip)) ],

with repeats at one place tempered (``w_i = (1 + ln n_i) / n_i``: a robot
parked for a minute saw it from one place, not sixty). Places it passed
within range without naming it push the estimate away from them, and a
thing always seen from one side ends up on that side. The detector's range
``R`` (at most the layer's view range) and reliability ``a`` are not known:
the posterior averages over a grid of both, each weighed by how well it
explains the sightings (Bayesian model averaging). The answer is the point
of least expected distance under the posterior, and its radius the
smallest circle around it holding ``COVERAGE`` of the posterior mass.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from emem_ros.geometry.uncertainty import COVERAGE, Region

EPSILON = 0.01
"""Chance the layer names a thing it cannot see from there (a wrong label, a pose error)."""
RELIABILITY = (0.2, 0.4, 0.6, 0.8, 0.95)
"""Values of ``a`` (how often the thing is named when it is well in range) averaged over."""
RANGES = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
"""Metres: detector ranges averaged over (those up to the layer's view range, and the view range itself)."""
EFFECTIVE = 25.0
"""Sightings the likelihood counts at most (a power posterior): the detector model is a round figure,
walls and furniture are not in it, and hundreds of sightings from one patrol must not make a round
figure sharp."""
COARSE = 0.5
FINE = 0.2
"""Metres: the posterior's grid, first over everything in reach, then over where the mass is."""
MIN_RADIUS = 0.5
"""Metres: no robot-pose answer is sharper than this (the places are 0.5 m cells; poses drift)."""


BIN = 0.1
"""Metres: distances are binned this finely before the models are weighed (a table per model, not a log
per point and place)."""


def _posterior(points: np.ndarray, xy: np.ndarray, seen: np.ndarray, unseen: np.ndarray, weight: np.ndarray,
               view_range: float) -> np.ndarray:
    """Posterior mass per point (sums to 1), averaged over the models (range, reliability) by their evidence."""
    d = np.sqrt(((points[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2))  # (points, places)
    bins = int(math.ceil(view_range / BIN)) + 1  # the last bin holds everything out of any model's range
    index = np.minimum((d / BIN).astype(np.int64), bins - 1) + (np.arange(len(points)) * bins)[:, None]
    size = len(points) * bins
    s = np.bincount(index.ravel(), weights=np.broadcast_to(weight * seen, d.shape).ravel(), minlength=size)
    u = np.bincount(index.ravel(), weights=np.broadcast_to(weight * unseen, d.shape).ravel(), minlength=size)
    s, u = s.reshape(len(points), bins), u.reshape(len(points), bins)
    centres = (np.arange(bins) + 0.5) * BIN
    models = []
    for reach in sorted({r for r in RANGES if r < view_range} | {view_range}):
        g = np.clip(2.0 - 2.0 * centres / reach, 0.0, 1.0)
        g[-1] = 0.0
        for a in RELIABILITY:
            p = a * g + EPSILON
            models.append(s @ np.log(p) + u @ np.log1p(-p))
    loglik = np.asarray(models) * min(1.0, EFFECTIVE / max(float((weight * (seen + unseen)).sum()), 1e-9))
    like = np.exp(loglik - loglik.max())  # (models, points)
    mass: np.ndarray = like.sum(axis=0) / like.sum()
    return mass


def _grid(lo: np.ndarray, hi: np.ndarray, step: float) -> np.ndarray:
    xs = np.arange(lo[0], hi[0] + step / 2, step)
    ys = np.arange(lo[1], hi[1] + step / 2, step)
    gx, gy = np.meshgrid(xs, ys)
    return np.column_stack([gx.ravel(), gy.ravel()])


def locate_from_poses(xy: np.ndarray, seen: np.ndarray, perceived: np.ndarray, view_range: float,
                      coverage: float = COVERAGE) -> Optional[Region]:
    """The thing's position and the radius holding it with ``coverage``, from places the robot perceived from.

    ``xy`` (n, 2): places; ``seen``: times the thing was named there;
    ``perceived``: times the layer perceived there (>= seen). None without
    any sighting.
    """
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    seen = np.asarray(seen, dtype=np.float64)
    perceived = np.maximum(np.asarray(perceived, dtype=np.float64), seen)
    if not len(xy) or seen.sum() <= 0:
        return None
    weight = (1.0 + np.log(np.maximum(perceived, 1.0))) / np.maximum(perceived, 1.0)
    unseen = perceived - seen
    positive = xy[seen > 0]
    lo, hi = positive.min(axis=0) - view_range, positive.max(axis=0) + view_range
    near = ((xy >= lo - view_range) & (xy <= hi + view_range)).all(axis=1)
    xy, seen, unseen, weight = xy[near], seen[near], unseen[near], weight[near]
    coarse = _grid(lo, hi, COARSE)
    mass = _posterior(coarse, xy, seen, unseen, weight, view_range)
    order = np.argsort(-mass)
    keep = order[: int(np.searchsorted(np.cumsum(mass[order]), 0.999)) + 1]
    flo, fhi = coarse[keep].min(axis=0) - COARSE, coarse[keep].max(axis=0) + COARSE
    fine = _grid(flo, fhi, FINE)
    mass = _posterior(fine, xy, seen, unseen, weight, view_range)
    centre = _least_expected_distance(fine, mass)
    radius = _holding(fine, mass, centre, coverage) + FINE * math.sqrt(0.5)
    return Region((float(centre[0]), float(centre[1])), max(radius, MIN_RADIUS))


def _least_expected_distance(points: np.ndarray, mass: np.ndarray, candidates: int = 100) -> np.ndarray:
    """The point (among the heaviest ``candidates``) whose expected distance to the thing is least (over the
    points holding 99.9 % of the mass)."""
    order = np.argsort(-mass)
    held = order[: int(np.searchsorted(np.cumsum(mass[order]), 0.999)) + 1]
    top = order[:candidates]
    d = np.sqrt(((points[top][:, None, :] - points[held][None, :, :]) ** 2).sum(axis=2))
    best: np.ndarray = points[top[int(np.argmin(d @ mass[held]))]]
    return best


def _holding(points: np.ndarray, mass: np.ndarray, centre: np.ndarray, coverage: float) -> float:
    d = np.hypot(points[:, 0] - centre[0], points[:, 1] - centre[1])
    order = np.argsort(d)
    at = int(np.searchsorted(np.cumsum(mass[order]), coverage))
    return float(d[order[min(at, len(order) - 1)]])
