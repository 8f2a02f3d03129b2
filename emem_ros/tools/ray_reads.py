"""The rays of a few texts, read from the observations' metadata (bounded).

A camera layer stores each detection's ray in the observation's metadata
(``geometry.rays``). ``locate`` reads them for the texts that match the
question, in one of two ways:

- ``read_rays``: every ray of the texts inside the call's time window, the
  newest ``MAX_RAYS_PER_TEXT`` per text (index ``obs_text_stamp``): for a
  thing seen a few hundred times;
- ``read_place_rays``: the ray of each place's newest sighting (places are
  per text, layer and 0.5 m cell of where the robot stood, so one ray per
  viewpoint): for a thing seen thousands of times, where the triangulation
  counts a viewpoint's rays as a few at most anyway and reading them all
  would cost milliseconds per thousand.

Either way SQLite's JSON functions extract the ray and view range, decoded in
one ``json.loads`` for all rows.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from typing import Optional, Sequence, TypeVar

import numpy as np

from emem_ros.geometry.rays import DEFAULT_VIEW_RANGE, MAX_SIGMA, RaySet
from emem_ros.storage.sqlutil import chunked, marks

T = TypeVar("T")
MAX_RAYS_PER_TEXT = 1500
"""Newest rays read per text (about 25 minutes of a 1 Hz detection stream)."""


@dataclass
class TextRays:
    rays: RaySet
    """``key`` = observation id."""
    text_id: np.ndarray
    layer: np.ndarray
    capped: list[int]
    """Texts with more rays in the window than were read."""


_COLUMNS = "id, stamp, layer, text_id, json_extract(metadata, '$.ray'), json_extract(metadata, '$.view_range')"
RayRow = tuple[int, float, str, int, object, object]
"""One row of ``_COLUMNS``; the ray and the view range are whatever the metadata held (JSON text for an array)."""


def read_rays(conn: sqlite3.Connection, text_ids: Sequence[int], layers: Sequence[str], after: Optional[float],
              before: Optional[float], per_text: int = MAX_RAYS_PER_TEXT) -> TextRays:
    """Rays of ``text_ids`` in ``layers`` and [after, before]; rows without a valid ray are left out."""
    lo = after if after is not None else -math.inf
    hi = before if before is not None else math.inf
    slots = marks(len(layers))
    sql = (f"SELECT {_COLUMNS} FROM observations WHERE text_id = ? AND stamp >= ? AND stamp <= ?"
           f" AND layer IN ({slots}) AND metadata IS NOT NULL ORDER BY stamp DESC LIMIT ?")
    rows: list[RayRow] = []
    capped = []
    for text_id in text_ids:
        found = conn.execute(sql, (text_id, lo, hi, *layers, per_text + 1)).fetchall()
        if len(found) > per_text:
            capped.append(int(text_id))
            found = found[:per_text]
        rows += found
    return _decode(rows, capped)


def read_place_rays(conn: sqlite3.Connection, observation_ids: Sequence[int]) -> TextRays:
    """The rays of these observations (places' newest sightings), by id."""
    rows: list[RayRow] = []
    ids = list(observation_ids)
    for chunk in chunked(ids):
        rows += conn.execute(f"SELECT {_COLUMNS} FROM observations WHERE id IN ({marks(len(chunk))})",
                             chunk).fetchall()
    return _decode(rows, [])


def _decode(found: list[RayRow], capped: list[int]) -> TextRays:
    ids: list[int] = []
    stamps: list[float] = []
    layer_of: list[str] = []
    texts: list[int] = []
    rays: list[str] = []
    ranges: list[object] = []
    for obs_id, stamp, layer, text_id, ray, view_range in found:
        if not isinstance(ray, str):  # no ray, or a bare number: nothing to decode
            continue
        ids.append(obs_id)
        stamps.append(stamp)
        layer_of.append(layer)
        texts.append(text_id)
        rays.append(ray)
        ranges.append(view_range)
    if not rays:
        return TextRays(RaySet.empty(), np.empty(0, np.int64), np.empty(0, object), capped)
    try:
        values = json.loads("[" + ",".join(rays) + "]")
        array = np.asarray(values, dtype=np.float64)
    except (ValueError, TypeError):  # one malformed ray: decode them one by one
        array, keep = _one_by_one(rays)
        ids, stamps, layer_of, texts, ranges = (_kept(ids, keep), _kept(stamps, keep), _kept(layer_of, keep),
                                                _kept(texts, keep), _kept(ranges, keep))
    if array.ndim != 2 or array.shape[1] != 6:
        array, keep = _one_by_one(rays)
        ids, stamps, layer_of, texts, ranges = (_kept(ids, keep), _kept(stamps, keep), _kept(layer_of, keep),
                                                _kept(texts, keep), _kept(ranges, keep))
    view = np.asarray([r if isinstance(r, (int, float)) and r > 0 else DEFAULT_VIEW_RANGE for r in ranges],
                      dtype=np.float64)
    ok = np.isfinite(array).all(axis=1) & (array[:, 5] > 0) & (array[:, 5] <= MAX_SIGMA) & np.isfinite(view)
    n = len(array)
    ray_set = RaySet(array[:, 0], array[:, 1], array[:, 2], array[:, 3], array[:, 4], array[:, 5], view,
                     np.asarray(stamps, np.float64), np.ones(n), np.asarray(ids, np.int64)).take(ok)
    return TextRays(ray_set, np.asarray(texts, np.int64)[ok], np.asarray(layer_of, object)[ok], capped)


def _kept(column: list[T], keep: list[bool]) -> list[T]:
    return [v for v, k in zip(column, keep) if k]


def _one_by_one(rays: list[str]) -> tuple[np.ndarray, list[bool]]:
    rows, keep = [], []
    for text in rays:
        try:
            value = json.loads(text)
            row = [float(v) for v in value]
            good = len(row) == 6
        except (ValueError, TypeError):
            good = False
        keep.append(good)
        if good:
            rows.append(row)
    return np.asarray(rows, dtype=np.float64).reshape(-1, 6), keep
