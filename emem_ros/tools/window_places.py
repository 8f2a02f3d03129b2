"""Places as a time window saw them: the places table's aggregates cut to [after, before].

A place row sums every sighting of a text in a cell over all time. With a
time window, a place seen before and after the window would count with all
its sightings (and its position) even when the thing was elsewhere during
the window. Rows whose whole span lies inside the window are exact as they
are; for the texts with a row that straddles an edge, the place aggregates
are rebuilt from the observations inside the window (index ``obs_text_stamp``:
text, then stamp), grouped per (text, layer, cell) the way the store builds
places, and bounded: at most ``WINDOW_ROWS`` observations in all, the newest
of each text first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from emem_ros.core.types import SourceType
from emem_ros.storage.place_cache import PlaceArrays
from emem_ros.storage.store import MemoryStore

WINDOW_ROWS = 20_000
"""Observations read at most per call (~10 ms); a text over its share keeps its newest sightings."""
MIN_ROWS_PER_TEXT = 512
_BODY = SourceType.INTEROCEPTION.value


@dataclass
class WindowPlaces:
    places: PlaceArrays
    capped: list[int]
    """Texts with more sightings in the window than were read (only their newest count)."""


def places_in_window(store: MemoryStore, places: PlaceArrays, after: Optional[float], before: Optional[float],
                     layer: Optional[str] = None) -> WindowPlaces:
    """``places`` (rows overlapping the window) with the straddling texts' rows rebuilt from observations."""
    if not len(places) or (after is None and before is None):
        return WindowPlaces(places, [])
    lo = after if after is not None else -math.inf
    hi = before if before is not None else math.inf
    inside = (places.first >= lo) & (places.last <= hi)
    straddling = sorted(set(places.text_id[~inside].tolist()))
    if not straddling:
        return WindowPlaces(places, [])
    keep = ~np.isin(places.text_id, straddling)
    per_text = max(MIN_ROWS_PER_TEXT, WINDOW_ROWS // len(straddling))
    rebuilt, capped = _aggregate(store, places, straddling, lo, hi, layer, per_text)
    return WindowPlaces(PlaceArrays.concat([places.take(np.nonzero(keep)[0]), rebuilt]), capped)


def _aggregate(store: MemoryStore, places: PlaceArrays, text_ids: list[int], lo: float, hi: float,
               layer: Optional[str], per_text: int) -> tuple[PlaceArrays, list[int]]:
    parts, params = [], []
    extra = " AND layer = ?" if layer else ""
    for wanted in text_ids:
        mine = places.text_id == wanted
        start = max(lo, float(places.first[mine].min()))  # nothing of this text before its first place
        end = min(hi, float(places.last[mine].max()))
        parts.append(
            "SELECT * FROM (SELECT text_id, layer, x, y, COALESCE(z, 0.0), stamp, id FROM observations"
            " WHERE text_id = ? AND stamp BETWEEN ? AND ? AND x IS NOT NULL AND y IS NOT NULL"
            f" AND source_type != ?{extra} ORDER BY stamp DESC LIMIT ?)")
        params += [wanted, start, end, _BODY, *([layer] if layer else []), per_text]
    rows: list[tuple[int, str, float, float, float, float, int]] = []  # text_id, layer, x, y, z, stamp, id
    conn = store.reader()
    for start in range(0, len(parts), 50):
        per = len(params) // len(parts)
        rows += conn.execute(" UNION ALL ".join(parts[start:start + 50]),
                             params[start * per:(start + len(parts[start:start + 50])) * per]).fetchall()
    if not rows:
        return PlaceArrays.empty(), []
    cols = list(zip(*rows))
    text_id = np.asarray(cols[0], np.int64)
    layers = list(cols[1])
    xyz = np.column_stack([np.asarray(cols[i], np.float64) for i in (2, 3, 4)])
    stamp = np.asarray(cols[5], np.float64)
    obs_id = np.asarray(cols[6], np.int64)
    read = np.bincount(np.searchsorted(text_ids, text_id), minlength=len(text_ids))
    capped = [t for t, n in zip(text_ids, read.tolist()) if n >= per_text]

    names = sorted(set(layers))
    code = {name: i for i, name in enumerate(names)}
    cells = np.floor(xyz / store.cell_size).astype(np.int64)
    keys = np.column_stack([text_id, np.asarray([code[n] for n in layers], np.int64), cells])
    unique, group = np.unique(keys, axis=0, return_inverse=True)
    group = group.reshape(-1)
    n = len(unique)
    count = np.bincount(group, minlength=n).astype(np.float64)
    sums = [np.bincount(group, weights=xyz[:, i], minlength=n) for i in range(3)]
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, group, stamp)
    np.maximum.at(last, group, stamp)
    order = np.lexsort((obs_id, stamp))  # the newest observation of a cell (the later id on equal stamps)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    best = np.full(n, -1, np.int64)
    np.maximum.at(best, group, rank)
    last_obs = obs_id[order[best]]
    layer_names = np.asarray([names[c] for c in unique[:, 1].tolist()], dtype=object)
    return PlaceArrays(np.full(n, -1, np.int64), unique[:, 0].copy(), layer_names, count, sums[0], sums[1], sums[2],
                       first, last, last_obs, unique[:, 2].copy(), unique[:, 3].copy(),
                       unique[:, 4].copy()), capped
