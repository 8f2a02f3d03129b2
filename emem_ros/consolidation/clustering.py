"""Place-and-time clustering of a robot's stream: one cluster per visit to a place.

Why not DBSCAN on positions (what ``emem`` does): a robot's path is continuous,
so every point has neighbours and density-based clustering chains a whole
floor into one cluster (and costs O(n * neighbours)). Adding scaled time as a
third axis does not help: consecutive samples are close in space *and* time.

What separates two room visits is that the robot *stays* within one place for
a while and then leaves it. So this is a linear-time sweep in time order
(stay-point segmentation, as in trajectory mining):

1. the stream is cut into segments wherever nothing arrived for
   ``time_gap`` seconds;
2. within a segment, a running cluster keeps the centroid of its points. A
   point within ``eps`` of the centroid belongs to it. Points farther away
   are held as an *excursion*; if the robot comes back they are absorbed (a
   glance through a door, a far detection), but once the excursion has lasted
   ``min_dwell`` seconds and ``min_samples`` points, the robot has left: the
   cluster closes and the excursion starts the next one. A corridor walk is
   therefore cut into pieces about ``2 * eps`` long, and a place is a region
   of radius about ``eps`` (a room up to ~6 m across with the default 3 m);
3. a cluster also closes when it would grow beyond ``max_extent`` metres
   (bounding-box diagonal) or ``max_size`` points;
4. observations without a position belong to the place the robot was at when
   they arrived (the cluster whose time span covers them); a segment with no
   positions at all is grouped by time only (closing at ``max_size`` points or
   ``max_duration`` seconds);
5. clusters with fewer than ``min_samples`` points are noise.

With a ``horizon`` (the newest time the caller has read up to), the last
cluster of a segment that may still continue past it is returned as *open*:
the caller leaves it for the next run instead of cutting a visit in two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np


@dataclass(frozen=True)
class ClusterParams:
    eps: float = 3.0
    min_samples: int = 3
    time_gap: float = 120.0
    max_extent: float = 15.0
    max_size: int = 5_000
    min_dwell: float = 5.0
    max_duration: float = 1800.0
    """Time-only clusters (no positions) never span more than this."""
    max_open: Optional[float] = None
    """A cluster still open at the horizon is closed anyway once it began this long before it (a robot
    docked all night at the place its patrols start from never leaves: deferring its visit kept a
    night's observations short-term for days, issue 26). None: deferred however long it lasts."""

    def __post_init__(self) -> None:
        for name in ("eps", "time_gap", "max_extent", "max_duration"):
            if not getattr(self, name) > 0:
                raise ValueError(f"cluster parameter {name} must be positive, got {getattr(self, name)!r}")
        if self.min_samples < 1 or self.max_size < 1:
            raise ValueError("cluster parameters min_samples and max_size must be at least 1")
        if self.min_dwell < 0:
            raise ValueError(f"cluster parameter min_dwell must not be negative, got {self.min_dwell!r}")


@dataclass
class StreamClusters:
    """Indices into the caller's arrays."""

    clusters: list[list[int]] = field(default_factory=list)
    noise: list[int] = field(default_factory=list)
    deferred: list[int] = field(default_factory=list)
    deferred_from: Optional[float] = None
    """Earliest stamp of the open (deferred) part, if any."""


def _sweep(px: np.ndarray, py: np.ndarray, pt: np.ndarray, p: ClusterParams) -> tuple[list[int], int]:
    """Stay segmentation of one time segment's placed points (arrays in time order).

    Returns (bounds, run_start): cluster k is ``[bounds[k], bounds[k + 1])``
    (the sweep only ever cuts the sequence, so every cluster is a contiguous
    run of points) and ``[run_start, len(px))`` is the trailing excursion.

    Written as one flat loop over local variables: it visits every point of a
    run, so it is the part of consolidation whose cost grows with the stream.
    (Testing blocks of points at once with numpy does not pay: a 3-D detection
    of an object across the room starts an excursion every dozen points.)
    """
    eps2 = p.eps * p.eps
    max_extent2 = p.max_extent * p.max_extent
    max_size, min_samples, min_dwell = p.max_size, p.min_samples, p.min_dwell
    x, y, t = px.tolist(), py.tolist(), pt.tolist()
    count = len(x)
    bounds = [0]
    n = 1
    sx, sy = x[0], y[0]
    minx = maxx = x[0]
    miny = maxy = y[0]
    box_ok = True  # the box is within max_extent
    run = -1  # start of the excursion in progress, -1 when none
    for i in range(1, count):
        xi = x[i]
        yi = y[i]
        dx = xi - sx / n
        dy = yi - sy / n
        if dx * dx + dy * dy <= eps2:
            if run < 0:  # still in this place
                if box_ok and n < max_size and minx <= xi <= maxx and miny <= yi <= maxy:
                    n += 1  # the most common case: inside the box, so its extent is unchanged
                    sx += xi
                    sy += yi
                    continue
                lo_x = xi if xi < minx else minx
                hi_x = xi if xi > maxx else maxx
                lo_y = yi if yi < miny else miny
                hi_y = yi if yi > maxy else maxy
                if n < max_size and (hi_x - lo_x) ** 2 + (hi_y - lo_y) ** 2 <= max_extent2:
                    n += 1
                    sx += xi
                    sy += yi
                    minx, maxx, miny, maxy = lo_x, hi_x, lo_y, hi_y
                    box_ok = True
                    continue
                start = i
            else:  # back after an excursion: it was only a glance
                start, run = run, -1
                xs = x[start:i + 1]
                ys = y[start:i + 1]
                lo_x, hi_x = min(minx, *xs), max(maxx, *xs)
                lo_y, hi_y = min(miny, *ys), max(maxy, *ys)
                if n + len(xs) <= max_size and (hi_x - lo_x) ** 2 + (hi_y - lo_y) ** 2 <= max_extent2:
                    for j in range(start, i + 1):
                        sx += x[j]
                        sy += y[j]
                    n += len(xs)
                    minx, maxx, miny, maxy = lo_x, hi_x, lo_y, hi_y
                    box_ok = True
                    continue
            # too big or too wide: close it, the joiners start the next
        else:
            if run < 0:
                run = i
            if i + 1 - run < min_samples or t[i] - t[run] < min_dwell:
                continue
            start, run = run, -1  # the robot has left this place
        bounds.append(start)
        xs = x[start:i + 1]
        ys = y[start:i + 1]
        n = len(xs)
        sx, sy = sum(xs), sum(ys)
        minx, maxx, miny, maxy = min(xs), max(xs), min(ys), max(ys)
        box_ok = (maxx - minx) ** 2 + (maxy - miny) ** 2 <= max_extent2  # joiners may span more
    run_start = count if run < 0 else run
    bounds.append(run_start)
    _refine_boundaries(bounds, px, py, max_size, p.max_extent)
    return bounds, run_start


def _refine_boundaries(bounds: list[int], px: np.ndarray, py: np.ndarray, max_size: int,
                       max_extent: float) -> None:
    """Move each boundary between consecutive places to its least-squares best position.

    A split is only noticed once the robot is ``eps`` from the old centroid,
    and a short visit near a shared wall can run on into the next room. For
    each pair of neighbours, the split of their joint (time-ordered) points
    that minimises the summed squared distance to the two centroids is the
    best change point; it is found in one pass with prefix sums.
    """
    for k in range(1, len(bounds) - 1):
        lo, hi = bounds[k - 1], bounds[k + 1]
        m = hi - lo
        if m < 4:
            continue
        jx = px[lo:hi]
        jy = py[lo:hi]
        cx, cy = np.cumsum(jx), np.cumsum(jy)
        cq = np.cumsum(jx * jx + jy * jy)
        left = np.arange(1, m, dtype=np.float64)  # sizes of the first part, split after index j-1
        right = m - left
        sse_left = cq[:-1] - (cx[:-1] ** 2 + cy[:-1] ** 2) / left
        sse_right = (cq[-1] - cq[:-1]) - ((cx[-1] - cx[:-1]) ** 2 + (cy[-1] - cy[:-1]) ** 2) / right
        sizes_ok = (left <= max_size) & (right <= max_size)
        cost = np.where(sizes_ok, sse_left + sse_right, np.inf)
        best = int(np.argmin(cost)) + 1
        current = bounds[k] - lo
        now = cost[current - 1]
        if best == current or not np.isfinite(now) or not cost[best - 1] < now - 1e-9 * (1.0 + now):
            continue  # no real improvement (ties, or a current split past the size limit: keep the sweep's)
        if _extent(jx[:best], jy[:best]) > max_extent or _extent(jx[best:], jy[best:]) > max_extent:
            continue
        bounds[k] = lo + best


def _extent(px: np.ndarray, py: np.ndarray) -> float:
    return float(math.hypot(px.max() - px.min(), py.max() - py.min()))


def _time_only(order: Sequence[int], t: Sequence[float], p: ClusterParams) -> list[list[int]]:
    clusters: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) >= p.max_size or t[i] - t[current[0]] > p.max_duration):
            clusters.append(current)
            current = []
        current.append(i)
    if current:
        clusters.append(current)
    return clusters


def _overdue(first: float, horizon: Optional[float], params: ClusterParams) -> bool:
    """The open cluster began ``max_open`` or more before the horizon: close it rather than defer it."""
    return params.max_open is not None and horizon is not None and horizon - first >= params.max_open


def cluster_stream(stamps: Sequence[float], xs: Sequence[Optional[float]], ys: Sequence[Optional[float]],
                   params: ClusterParams, horizon: Optional[float] = None) -> StreamClusters:
    """Cluster one stream (one layer, or all layers together) by place and time.

    ``xs``/``ys`` hold None (or NaN) where a point has no position. With a
    ``horizon``, the last cluster of a segment ending less than ``time_gap``
    before it is returned in ``deferred`` rather than closed.
    """
    n = len(stamps)
    out = StreamClusters()
    if n == 0:
        return out
    t = np.asarray(stamps, dtype=np.float64)
    x = np.asarray(xs, dtype=np.float64)  # None -> NaN
    y = np.asarray(ys, dtype=np.float64)
    order = np.argsort(t, kind="stable")
    ts = t[order]
    cuts = np.flatnonzero(np.diff(ts) > params.time_gap) + 1
    bounds = [0, *cuts.tolist(), n]
    has_position = ~(np.isnan(x) | np.isnan(y))
    tl = t.tolist()
    for s in range(len(bounds) - 1):
        seg = order[bounds[s]:bounds[s + 1]]
        open_segment = horizon is not None and horizon - tl[int(seg[-1])] < params.time_gap
        placed = seg[has_position[seg]]
        if placed.size:
            cut, run_start = _sweep(x[placed], y[placed], t[placed], params)
            members = placed.tolist()
            clusters = [members[a:b] for a, b in zip(cut, cut[1:])]
            run = members[run_start:]
            unplaced = seg[~has_position[seg]].tolist()
            mixed = bool(unplaced)  # the sweep's clusters are in time order already; these are not
            if unplaced:
                starts = [tl[c[0]] for c in clusters]
                k = 0
                for i in unplaced:  # seg is in time order, so unplaced is too
                    while k + 1 < len(starts) and starts[k + 1] <= tl[i]:
                        k += 1
                    clusters[k].append(i)
            first = (min(tl[i] for i in clusters[-1]) if clusters and clusters[-1] else tl[run[0]] if run
                     else math.inf)
            if open_segment and not _overdue(first, horizon, params):
                tail = clusters.pop()
                out.deferred.extend(tail)
                out.deferred.extend(run)
                out.deferred_from = first if out.deferred_from is None else min(out.deferred_from, first)
            elif run:
                clusters.append(run)  # left at the very end: a place of its own, or noise below
        else:
            mixed = False
            clusters = _time_only(seg.tolist(), tl, params)
            if open_segment and not _overdue(tl[clusters[-1][0]], horizon, params):
                tail = clusters.pop()
                out.deferred.extend(tail)
                first = tl[tail[0]]
                out.deferred_from = first if out.deferred_from is None else min(out.deferred_from, first)
        for c in clusters:
            if len(c) >= params.min_samples:
                if mixed:
                    c.sort(key=tl.__getitem__)
                out.clusters.append(c)
            else:
                out.noise.extend(c)
    return out
