"""How often, when and where one text was seen under a filter.

Every perception tool collapses repeated texts into one hit. The numbers for
that hit come from the cheapest exact source: the catalog (layer / episode
slices), the places R-tree (an area), or, for a time window that cuts a
slice, one SQL range scan on the (text_id, stamp) index, tightened to the
slice's own time span and capped (a count past the cap reads "1000+").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from emem_ros.core.types import NodeKind, Position, SourceType, make_id
from emem_ros.storage.place_cache import PlaceArrays, rows_within
from emem_ros.storage.sqlutil import chunked, marks
from emem_ros.storage.store import MemoryStore, Place
from emem_ros.tools.catalog import TextCatalog
from emem_ros.tools.filters import Filters

COUNT_CAP = 1000
EAGER_PLACES = 400
"""An area holding more places than this is asked per text instead of listed."""
_BODY = SourceType.INTEROCEPTION.value


@dataclass(frozen=True)
class TextAgg:
    text_id: int
    count: int
    exact: bool
    first: Optional[float]
    last: float


@dataclass(frozen=True)
class Representative:
    """The newest matching observation of a text: its id, layer, place and episode."""

    obs_id: int
    stamp: float
    layer: str
    position: Optional[Position]
    episode: Optional[int]

    @property
    def node_id(self) -> str:
        return make_id(NodeKind.OBSERVATION, self.obs_id)

    @property
    def episode_id(self) -> Optional[str]:
        return make_id(NodeKind.EPISODE, self.episode) if self.episode is not None else None


def area_box(center: Position, radius: float, cell: float,
             three_d: bool = False) -> tuple[float, float, float, float, float, float]:
    cx, cy, cz = center
    if three_d:
        return (cx - radius, cy - radius, cz - radius - cell, cx + radius, cy + radius, cz + radius + cell)
    return (cx - radius, cy - radius, -1e9, cx + radius, cy + radius, 1e9)


def within(places: Sequence[Place], center: Position, radius: float, three_d: bool = False) -> list[Place]:
    cx, cy, cz = center
    r2 = radius * radius
    out = []
    for p in places:
        d2 = (p.centroid[0] - cx) ** 2 + (p.centroid[1] - cy) ** 2
        if three_d:
            d2 += (p.centroid[2] - cz) ** 2
        if d2 <= r2:
            out.append(p)
    return out


_PLACE_COLUMNS = "id, text_id, layer, count, sx, sy, sz, first_stamp, last_stamp, last_obs_id"


def _place(row: Sequence[Any]) -> Place:
    pid, tid, layer, count, sx, sy, sz, first, last, last_obs = row
    return Place(pid, tid, "", layer, count, (sx / count, sy / count, sz / count), first, last, last_obs)


def places_by_id(store: MemoryStore, ids: Sequence[int], layer: Optional[str] = None) -> list[Place]:
    """Places without their text (the tools fetch texts once, for the hits they keep)."""
    out: list[Place] = []
    ids = list(ids)
    for chunk in chunked(ids):
        sql = f"SELECT {_PLACE_COLUMNS} FROM places WHERE id IN ({marks(len(chunk))})"
        params: list[Any] = list(chunk)
        if layer:
            sql += " AND layer = ?"
            params.append(layer)
        out.extend(_place(r) for r in store.reader().execute(sql, params))
    return out


def place_rows_by_id(store: MemoryStore, ids: Sequence[int]) -> PlaceArrays:
    """``places_by_id`` as columns (same rows, same order: ascending id)."""
    return store.place_cache.by_id(ids)


def places_of_texts_near(store: MemoryStore, text_ids: Sequence[int], center: Position, radius: float,
                         layers: Sequence[str], three_d: bool = False) -> list[Place]:
    """The places of some texts inside a circle (or sphere).

    Seeks the (text_id, layer, cx, cy, cz) unique index on a range of cells,
    so a text seen at a thousand places costs only the ones nearby.
    """
    return [_place(r) for r in _place_rows_near(store, text_ids, center, radius, layers, three_d)]


def _place_rows_near(store: MemoryStore, text_ids: Sequence[int], center: Position, radius: float,
                     layers: Sequence[str], three_d: bool = False) -> list[tuple[Any, ...]]:
    if not text_ids or not layers:
        return []
    return store.place_cache.near(text_ids, center, radius, layers, three_d).rows()


def _place_rows_near_sql(store: MemoryStore, text_ids: Sequence[int], center: Position, radius: float,
                         layers: Sequence[str], three_d: bool = False) -> list[tuple[Any, ...]]:
    """``_place_rows_near`` straight from SQLite (the cache's reference; kept for tests and checks)."""
    if not text_ids or not layers:
        return []
    cell = store.cell_size
    cx, cy, cz = center
    x0, x1 = math.floor((cx - radius) / cell), math.floor((cx + radius) / cell)
    y0, y1 = math.floor((cy - radius) / cell), math.floor((cy + radius) / cell)
    layer_marks = marks(len(layers))
    where = f"layer IN ({layer_marks}) AND cx BETWEEN ? AND ? AND cy BETWEEN ? AND ?"
    bounds: list[Any] = [*layers, x0, x1, y0, y1]
    if three_d:
        where += " AND cz BETWEEN ? AND ?"
        bounds += [math.floor((cz - radius) / cell), math.floor((cz + radius) / cell)]
    rows: list[tuple[Any, ...]] = []
    ids = list(text_ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        sql = f"SELECT {_PLACE_COLUMNS} FROM places WHERE text_id IN ({marks(len(chunk))}) AND {where}"
        rows.extend(store.reader().execute(sql, [*chunk, *bounds]))
    return rows_within(rows, center, radius, three_d)


def place_arrays_near(store: MemoryStore, text_ids: Sequence[int], center: Position, radius: float,
                      layers: Sequence[str], three_d: bool = False) -> PlaceArrays:
    """``places_of_texts_near`` as numpy columns, same rows in the same order.

    For callers that handle hundreds of places with numpy: a Place object
    per row costs more than finding it.
    """
    if not text_ids or not layers:
        return PlaceArrays.empty()
    return store.place_cache.near(text_ids, center, radius, layers, three_d)


def place_of_row(row: Sequence[Any]) -> Place:
    """A raw place row as a Place (its text left empty: the tools fetch texts once, for the hits kept)."""
    return _place(row)


class AreaIndex:
    """The places of each text inside a circle.

    A small area is listed once from the R-tree (and gives the exact set of
    texts seen there); a dense one (thousands of places) is asked per text
    through the places_text index instead, so its cost follows the texts a
    query checks, not the size of the area.
    """

    def __init__(self, store: MemoryStore, center: Position, radius: float, layers: Sequence[str],
                 three_d: bool, listed: Optional[dict[int, list[Place]]]) -> None:
        self._store = store
        self.center, self.radius, self.layers, self.three_d = center, radius, list(layers), three_d
        self.listed = listed
        self._asked: dict[int, list[Place]] = {}

    @classmethod
    def build(cls, store: MemoryStore, catalog: TextCatalog, center: Position, radius: float,
              layer: Optional[str] = None, three_d: bool = False, limit: int = EAGER_PLACES) -> "AreaIndex":
        box = area_box(center, radius, store.cell_size, three_d)
        layers = [layer] if layer else catalog.layers
        if store.count_places_in(box) > limit:
            return cls(store, center, radius, layers, three_d, None)
        listed: dict[int, list[Place]] = {}
        ids = store.places.intersection(box)
        for place in within(places_by_id(store, ids.tolist(), layer), center, radius, three_d):
            listed.setdefault(place.text_id, []).append(place)
        return cls(store, center, radius, layers, three_d, listed)

    def prefetch(self, text_ids: Sequence[int]) -> None:
        """Ask for many texts in one query (the rankers check candidates in batches)."""
        if self.listed is not None:
            return
        wanted = [t for t in text_ids if t not in self._asked]
        if not wanted:
            return
        for t in wanted:
            self._asked[t] = []
        for place in places_of_texts_near(self._store, wanted, self.center, self.radius, self.layers,
                                          self.three_d):
            self._asked[place.text_id].append(place)

    def places_of(self, text_id: int) -> list[Place]:
        if self.listed is not None:
            return self.listed.get(text_id, [])
        found = self._asked.get(text_id)
        if found is None:
            found = places_of_texts_near(self._store, [text_id], self.center, self.radius, self.layers,
                                         self.three_d)
            self._asked[text_id] = found
        return found


class Aggregator:
    """Per-text sightings under one call's filters (built per call, after the catalog is synced)."""

    def __init__(self, store: MemoryStore, catalog: TextCatalog, filters: Filters,
                 area: Optional[AreaIndex] = None) -> None:
        self._store = store
        self._catalog = catalog
        self.filters = filters
        self.area = area
        self._slice = catalog.slice_ref(filters.layer, filters.episode)
        self._lo, self._hi = filters.lo, filters.hi
        self._plain = not filters.spatial and not filters.timed
        self._area = area if (filters.spatial and area is not None) else None
        self._area_only = self._area is not None and not filters.timed and filters.episode is None
        self._where, self._params = filters.sql("o", time=False)

    def prefetch(self, text_ids: Sequence[int]) -> None:
        if self._area is not None:
            self._area.prefetch([t for t in text_ids if t in self._slice])

    def get(self, text_id: int, count: bool = True) -> Optional[TextAgg]:
        """Sightings of the text that pass the filters (None: none do).

        With ``count=False`` only existence and the newest stamp are needed:
        a window holding the slice's first or last sighting proves existence
        without touching SQLite.
        """
        planned = self._plan(text_id, count)
        if isinstance(planned, tuple):
            return self._scan(text_id, planned[0], planned[1], count)
        return planned

    def get_many(self, text_ids: Sequence[int], count: bool = True) -> dict[int, Optional[TextAgg]]:
        """``get`` for several texts; the ones that need SQLite are counted in one statement."""
        out: dict[int, Optional[TextAgg]] = {}
        scans: list[tuple[int, float, float]] = []
        for text_id in dict.fromkeys(text_ids):
            planned = self._plan(text_id, count)
            if isinstance(planned, tuple):
                scans.append((text_id, planned[0], planned[1]))
            else:
                out[text_id] = planned
        if len(scans) == 1:
            text_id, lo, hi = scans[0]
            out[text_id] = self._scan(text_id, lo, hi, count)
        elif scans:
            out.update(self._scan_many(scans, count))
        return out

    def _plan(self, text_id: int, count: bool) -> "Optional[TextAgg] | tuple[float, float]":
        """The answer when the catalog or the area decides it, else the (lo, hi) stamps to scan."""
        stats = self._slice.get(text_id)
        if stats is None:
            return None
        if self._plain:
            return TextAgg(text_id, stats.count, True, stats.first, stats.last)
        first, last = stats.first, stats.last
        lo, hi = max(self._lo, first), min(self._hi, last)
        if lo > hi:
            return None
        if self._area is not None:
            places = self._area.places_of(text_id)
            if not places:
                return None
            p_first = min(p.first_stamp for p in places)
            p_last = max(p.last_stamp for p in places)
            if self._area_only:
                return TextAgg(text_id, sum(p.count for p in places), True, p_first, p_last)
            lo, hi = max(lo, p_first), min(hi, p_last)
            if lo > hi:
                return None
        elif not self.filters.spatial:
            if lo == first and hi == last:
                return TextAgg(text_id, stats.count, True, first, last)
            if not count and hi == last:
                return TextAgg(text_id, 1, False, None, last)
        return (lo, hi)

    def _scan_sql(self, text_id: int) -> tuple[str, list[Any]]:
        where, params = self._where, list(self._params)
        if self._catalog.has_body_rows(text_id):
            where += " AND o.source_type != ?"
            params.append(_BODY)
        return where, params

    def _scan(self, text_id: int, lo: float, hi: float, count: bool) -> Optional[TextAgg]:
        where, params = self._scan_sql(text_id)
        cap = COUNT_CAP + 1 if count else 1
        row = self._store.reader().execute(
            "SELECT COUNT(*), MIN(stamp), MAX(stamp) FROM (SELECT o.stamp AS stamp FROM observations o"
            f" WHERE o.text_id = ? AND o.stamp BETWEEN ? AND ? AND {where} ORDER BY o.stamp DESC LIMIT ?)",
            (text_id, lo, hi, *params, cap)).fetchone()
        return self._agg_of(text_id, row, count)

    def _scan_many(self, scans: Sequence[tuple[int, float, float]], count: bool) -> dict[int, Optional[TextAgg]]:
        """``_scan`` for many texts: one UNION ALL of the same per-text statements."""
        cap = COUNT_CAP + 1 if count else 1
        out: dict[int, Optional[TextAgg]] = {}
        conn = self._store.reader()
        for start in range(0, len(scans), 60):
            parts: list[str] = []
            params: list[Any] = []
            for text_id, lo, hi in scans[start:start + 60]:
                where, extra = self._scan_sql(text_id)
                parts.append(
                    "SELECT * FROM (SELECT ?, COUNT(*), MIN(stamp), MAX(stamp) FROM (SELECT o.stamp AS stamp"
                    f" FROM observations o WHERE o.text_id = ? AND o.stamp BETWEEN ? AND ? AND {where}"
                    " ORDER BY o.stamp DESC LIMIT ?))")
                params += [text_id, text_id, lo, hi, *extra, cap]
            for text_id, *row in conn.execute(" UNION ALL ".join(parts), params):
                out[text_id] = self._agg_of(text_id, row, count)
        return out

    @staticmethod
    def _agg_of(text_id: int, row: Sequence[Any], count: bool) -> Optional[TextAgg]:
        n, first, last = row
        if not n:
            return None
        if not count:
            return TextAgg(text_id, 1, False, None, last)
        if n > COUNT_CAP:
            return TextAgg(text_id, COUNT_CAP, False, None, last)
        return TextAgg(text_id, n, True, first, last)

    def representatives(self, aggs: Sequence[TextAgg]) -> dict[int, Representative]:
        """The newest observation behind each aggregate (archived and body rows skipped), in one query."""
        if not aggs:
            return {}
        parts, params = [], []
        for agg in aggs:
            lo = self._lo if agg.first is None else max(self._lo, agg.first)
            parts.append(
                "SELECT * FROM (SELECT o.text_id, o.id, o.stamp, o.layer, o.x, o.y, o.z, o.episode_id"
                f" FROM observations o WHERE o.text_id = ? AND o.stamp BETWEEN ? AND ? AND {self._where}"
                " AND o.source_type != ? AND o.tier != 'archived' ORDER BY o.stamp DESC LIMIT 1)")
            params += [agg.text_id, lo if math.isfinite(lo) else -1e300, agg.last, *self._params, _BODY]
        out: dict[int, Representative] = {}
        for start in range(0, len(parts), 60):
            sql = " UNION ALL ".join(parts[start : start + 60])
            per = len(params) // len(parts)
            chunk = params[start * per : (start + len(parts[start : start + 60])) * per]
            for text_id, obs_id, stamp, layer, x, y, z, episode in self._store.reader().execute(sql, chunk):
                out[text_id] = Representative(obs_id, stamp, layer, (x, y, z) if x is not None else None, episode)
        return out


def texts_of(store: MemoryStore, text_ids: Iterable[int]) -> dict[int, str]:
    """id -> text of the ids that exist (``MemoryStore.text_names``: each name is read from SQLite once)."""
    return store.text_names.get(text_ids)
