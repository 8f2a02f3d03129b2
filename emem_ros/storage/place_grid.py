"""The R-tree's k-nearest-places answer, from a dict of grid cells held next to the place cache.

"What is around here" reads the places of the cells nearest to a point. The
R-tree answers that in about 0.15 ms of libspatialindex and Python glue; the
places are on a grid (one row per text per cell, the cell is the R-tree
box), so walking the cells outwards from the point's own cell finds the
same entries in a few dict lookups.

Same answer, not an approximation: libspatialindex reports every entry
whose box distance is at most the k-th smallest (ties at the k-th included,
so sometimes more than k), with the distance computed as
``sqrt(sum over axes of gap**2)``, the gap being 0 where the point lies
within the box's range on that axis. The same float arithmetic runs here
on the same boxes (``cell * s`` to ``(cell + 1) * s``), so ties fall the
same way. Cells are walked ring by ring (Chebyshev distance from the
point's cell) until k entries are found and no cell further out can be as
near as the k-th; a point far from everything gives up (``None``) and the
caller asks the R-tree.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

MAX_RING = 12
"""Rings walked at most (a 25 x 25 cell square) before leaving the question to the R-tree."""
SLACK = 1e-9
"""Metres: a cell further out must be this much farther than the k-th, so float rounding never decides."""


class CellGrid:
    """Positions (row numbers of the place cache) per (cx, cy) cell, ascending within a cell."""

    def __init__(self, cx: np.ndarray, cy: np.ndarray) -> None:
        self._cells: dict[tuple[int, int], np.ndarray] = {}
        self.size = 0
        self.add(np.arange(len(cx), dtype=np.int64), cx, cy)

    def add(self, positions: np.ndarray, cx: np.ndarray, cy: np.ndarray) -> None:
        """Rows appended to the cache (positions larger than every one held)."""
        if not len(positions):
            return
        order = np.lexsort((positions, cy, cx))
        positions, cx, cy = positions[order], cx[order], cy[order]
        starts = np.flatnonzero(np.r_[True, (cx[1:] != cx[:-1]) | (cy[1:] != cy[:-1])])
        ends = np.r_[starts[1:], len(positions)]
        cells = self._cells
        for start, end, x, y in zip(starts.tolist(), ends.tolist(), cx[starts].tolist(), cy[starts].tolist()):
            held = cells.get((x, y))
            part = positions[start:end]
            cells[(x, y)] = part if held is None else np.concatenate([held, part])
        self.size += len(positions)

    def nearest(self, x: float, y: float, k: int, cell: float) -> Optional[np.ndarray]:
        """Positions (ascending) of the entries whose cell is within the k-th smallest distance of (x, y).

        None when the k-th lies further than ``MAX_RING`` cells: ask the R-tree.
        """
        if self.size <= k:
            return None  # every entry: cheaper to let the caller take them all from the R-tree's answer
        ix, iy = math.floor(x / cell), math.floor(y / cell)
        cells = self._cells
        seen: list[tuple[float, np.ndarray]] = []
        total = 0
        for ring in range(MAX_RING + 1):
            for key in _ring(ix, iy, ring):
                members = cells.get(key)
                if members is not None:
                    seen.append((_box_distance(x, y, key[0], key[1], cell), members))
                    total += len(members)
            if total < k:
                continue
            seen.sort(key=lambda item: item[0])
            running = 0
            kth = 0.0
            for distance, members in seen:
                running += len(members)
                if running >= k:
                    kth = distance
                    break
            # Every cell not walked yet is beyond ring `ring`: at least this far on one axis.
            beyond = min((ix + ring + 1) * cell - x, x - (ix - ring) * cell,
                         (iy + ring + 1) * cell - y, y - (iy - ring) * cell)
            if kth + SLACK < beyond:
                chosen = [members for distance, members in seen if distance <= kth]
                return np.sort(np.concatenate(chosen))
        return None


def _ring(ix: int, iy: int, ring: int) -> list[tuple[int, int]]:
    if ring == 0:
        return [(ix, iy)]
    out = [(ix + dx, iy - ring) for dx in range(-ring, ring + 1)]
    out += [(ix + dx, iy + ring) for dx in range(-ring, ring + 1)]
    out += [(ix - ring, iy + dy) for dy in range(-ring + 1, ring)]
    out += [(ix + ring, iy + dy) for dy in range(-ring + 1, ring)]
    return out


def _box_distance(x: float, y: float, cx: int, cy: int, cell: float) -> float:
    """libspatialindex's Region::getMinimumDistance from the point to the cell's box, bit for bit.

    That sums ``gap * gap`` over the axes onto 0.0; 0.0 + a is a, so the two squares added directly
    give the same float (written out: this runs for every cell a nearest-places question walks).
    """
    high = (cx + 1) * cell
    gx = abs(high - x) if high < x else (abs(cx * cell - x) if x < cx * cell else 0.0)
    high = (cy + 1) * cell
    gy = abs(high - y) if high < y else (abs(cy * cell - y) if y < cy * cell else 0.0)
    return math.sqrt(gx * gx + gy * gy)
