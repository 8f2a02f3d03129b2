"""Radii that mean what they say: the object lies inside with the stated probability.

Every answer about where a thing is carries a radius at ``COVERAGE``: the
probability, under the model of that kind of evidence, that the object lies
within the radius of the stated position.

- A position with a covariance (measured 3-D positions, triangulated
  bearings): the circle that holds ``COVERAGE`` of the 2-D normal
  distribution (``circle_radius``; exact for any ellipse, not the worst axis).
- Robot poses only: a detector sees an object only within its view range, so
  the object lies within ``view_range`` of every pose it was seen from: in
  the intersection of those discs (``pose_region``), whose enclosing circle
  is the answer. Seen from one spot, that is the whole view range.
- Rays from one pose only: a direction and a range interval (``ray_segment``),
  whose enclosing circle is the answer's circle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

COVERAGE = 0.95
"""Probability the stated radius is meant to hold (under the evidence kind's model)."""
MEASURED_FLOOR = 0.1
"""Metres (1 sigma per axis) of error in measured positions that no spread shows (depth, calibration)."""

_Z = np.linspace(-6.0, 6.0, 241)
_PDF = np.exp(-0.5 * _Z * _Z) / math.sqrt(2.0 * math.pi)
_DZ = _Z[1] - _Z[0]


def normal_quantile(p: float) -> float:
    """z with P(|N(0,1)| <= z) = p."""
    from scipy.special import erfinv

    return float(math.sqrt(2.0) * erfinv(p))


def circle_radius(covariance: np.ndarray, coverage: float = COVERAGE, dof: float = math.inf) -> float:
    """Radius of the circle around the mean that holds ``coverage`` of N(mean, covariance) (2-D).

    With eigenvalues a >= b the radius is sqrt(a) times a factor of b / a
    alone (``_circle_factor``: P(a z1^2 + b z2^2 <= r^2) solved for r, tabled
    once per coverage). Isotropic: sqrt(-2 ln(1 - p)) sigma; a line: the 1-D
    interval. ``dof``: the covariance's scale was estimated with this many
    degrees of freedom; the radius grows by the ratio of the 2-D Student (F)
    quantile to the normal one (x1.39 at 5 degrees of freedom, x1.03 at 50).
    """
    a, b = _eigen(covariance)
    if a <= 0.0:
        return 0.0
    scale = _f_ratio(coverage, round(max(dof, 1.0), 1)) if math.isfinite(dof) else 1.0
    ratios, factors = _circle_factors(coverage)
    return float(math.sqrt(a * scale) * np.interp(b / a, ratios, factors))


def circle_radii(covariances: np.ndarray, coverage: float = COVERAGE) -> np.ndarray:
    """``circle_radius`` of many 2x2 covariances (n, 2, 2) at once (known scale)."""
    c = np.asarray(covariances, dtype=np.float64).reshape(-1, 2, 2)
    half_trace = 0.5 * (c[:, 0, 0] + c[:, 1, 1])
    det = c[:, 0, 0] * c[:, 1, 1] - c[:, 0, 1] * c[:, 1, 0]
    root = np.sqrt(np.maximum(half_trace * half_trace - det, 0.0))
    a, b = np.maximum(half_trace + root, 0.0), np.maximum(half_trace - root, 0.0)
    ratios, factors = _circle_factors(coverage)
    ratio = np.divide(b, a, out=np.zeros_like(a), where=a > 0)
    spread: np.ndarray = np.sqrt(a) * np.interp(ratio, ratios, factors)
    return spread


@lru_cache(maxsize=16)
def _circle_factors(coverage: float) -> tuple[np.ndarray, np.ndarray]:
    """r / sqrt(a) for eigenvalue ratios b / a in [0, 1] (201 points; the curve is smooth and monotone)."""
    ratios = np.linspace(0.0, 1.0, 201)
    return ratios, np.array([_solve_factor(coverage, float(rho)) for rho in ratios])


def _solve_factor(coverage: float, rho: float) -> float:
    from scipy.special import erf

    if rho <= 1e-9:
        return normal_quantile(coverage)
    lo, hi = 0.0, math.sqrt(-2.0 * math.log(1.0 - coverage)) * 1.01
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        room = np.maximum(mid * mid - _Z * _Z, 0.0)
        mass = float((_PDF * erf(np.sqrt(room / (2.0 * rho)))).sum() * _DZ)
        if mass < coverage:
            lo = mid
        else:
            hi = mid
    return hi


@lru_cache(maxsize=4096)
def _f_ratio(coverage: float, dof: float) -> float:
    """2 F(2, dof) quantile over the chi-square(2) one: how much wider an estimated-scale ellipse is.

    F(2, n) has a closed form: its p quantile is n ((1 - p)^(-2/n) - 1) / 2.
    """
    return float(dof * ((1.0 - coverage) ** (-2.0 / dof) - 1.0) / (-2.0 * math.log(1.0 - coverage)))


def _eigen(covariance: np.ndarray) -> tuple[float, float]:
    c = np.asarray(covariance, dtype=np.float64)[:2, :2]
    half_trace = 0.5 * (c[0, 0] + c[1, 1])
    det = c[0, 0] * c[1, 1] - c[0, 1] * c[1, 0]
    root = math.sqrt(max(half_trace * half_trace - det, 0.0))
    return max(half_trace + root, 0.0), max(half_trace - root, 0.0)


@dataclass(frozen=True)
class Region:
    """Where the evidence allows the object to be: a centre and the radius that encloses it."""

    centre: tuple[float, float]
    radius: float
    consistent: bool = True
    """False when the poses allow no common spot (an area, not an object; or two objects): the
    region is then every spot within view of any pose."""


DIRECTIONS = 16
GRID = 24


def pose_region(points: np.ndarray, view_range: float, blur: float = 0.0) -> Region:
    """The circle enclosing every spot within ``view_range`` (+ ``blur``) of all the poses ``points``.

    Only the poses extreme in one of ``DIRECTIONS`` directions are checked (a
    spot within reach of those is within reach of nearly all the rest: the far
    side of the hull binds), so the region is never smaller than the exact
    one. The region is sampled on a grid of ``GRID`` x ``GRID`` cells over the
    first pose's disc. When no spot is within reach of every pose, the answer
    falls back to the circle that holds every pose's disc.
    """
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    reach = float(view_range) + float(blur)
    if len(pts) == 0:
        raise ValueError("pose_region needs at least one pose")
    angles = np.linspace(0.0, 2.0 * np.pi, DIRECTIONS, endpoint=False)
    axes = np.column_stack([np.cos(angles), np.sin(angles)])
    extreme = pts[np.unique(np.argmax(pts @ axes.T, axis=0))]
    anchor = extreme[0]
    step = 2.0 * reach / GRID
    offsets = (np.arange(GRID) + 0.5) * step - reach
    gx, gy = np.meshgrid(anchor[0] + offsets, anchor[1] + offsets)
    grid = np.column_stack([gx.ravel(), gy.ravel()])
    d2 = ((grid[:, None, :] - extreme[None, :, :]) ** 2).sum(axis=2)
    inside = grid[(d2 <= reach * reach).all(axis=1)]
    if len(inside) == 0:
        centre = pts.mean(axis=0)
        radius = float(np.sqrt(((pts - centre) ** 2).sum(axis=1)).max()) + reach
        return Region((float(centre[0]), float(centre[1])), radius, consistent=False)
    lo, hi = inside.min(axis=0), inside.max(axis=0)
    centre = 0.5 * (lo + hi)
    radius = float(np.sqrt(((inside - centre) ** 2).sum(axis=1)).max()) + step * math.sqrt(0.5)
    return Region((float(centre[0]), float(centre[1])), min(radius, reach))


@dataclass(frozen=True)
class Segment:
    """A direction and a range interval from one spot: what rays from a single pose say."""

    origin: tuple[float, float]
    azimuth: float
    spread: float
    """Radians: the angular standard deviation of the direction."""
    near: float
    far: float

    def circle(self, coverage: float = COVERAGE) -> Region:
        """The circle around the interval's midpoint that encloses the wedge from ``near`` to ``far``
        within ±z(coverage) spread of the direction."""
        half_angle = min(normal_quantile(coverage) * self.spread, math.pi / 2)
        mid = 0.5 * (self.near + self.far)
        cx = self.origin[0] + mid * math.cos(self.azimuth)
        cy = self.origin[1] + mid * math.sin(self.azimuth)
        cos_h, sin_h = math.cos(half_angle), math.sin(half_angle)
        corners = [(r * cos_h - mid, r * sin_h) for r in (self.near, self.far)] + [(self.far - mid, 0.0)]
        return Region((cx, cy), max(math.hypot(a, b) for a, b in corners))


def compass(azimuth: float) -> str:
    """'north-west' for 135°: map x is east, y north (REP 103)."""
    names = ("east", "north-east", "north", "north-west", "west", "south-west", "south", "south-east")
    return names[int(round((azimuth % (2 * math.pi)) / (math.pi / 4))) % 8]


def degrees(azimuth: float) -> int:
    return int(round(math.degrees(azimuth))) % 360
