"""semantic_search, spatial_query, temporal_query: what was perceived, by meaning, place, time.

None of them ever returns interoception; repeated texts collapse into one hit
with a count; archived observations are skipped (their gists stand in).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.types import NodeKind, Position, SourceType, make_id, rounded
from emem_ros.storage.place_cache import PlaceArrays
from emem_ros.storage.sqlutil import marks
from emem_ros.tools.aggregate import Aggregator, AreaIndex, place_arrays_near, place_of_row, place_rows_by_id, texts_of
from emem_ros.tools.clusters import KEY_GAP, SAME_OBJECT, SMALL, Group, group_places, linked_labels
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.filters import Filters
from emem_ros.tools.filters import area as make_area
from emem_ros.tools.obs_memo import Ref
from emem_ros.tools.ranking import fuse, gist_hit, text_hits_by_key
from emem_ros.tools.reads import ToolContext
from emem_ros.tools.results import Hit, SearchResult, quoted

_BODY = SourceType.INTEROCEPTION.value
SCAN_CHUNK = 512
FIRST_READS = {0: 64, 64: 192, 256: 256}
"""Rows read so far -> rows to read next, before full SCAN_CHUNK pages (64 + 192 + 256 = SCAN_CHUNK)."""
SCAN_LIMIT = 8192
"""Rows a temporal scan reads before it completes the answer from the catalog instead."""
NEAREST_FIRST = 64
"""Places read first around a point; more only while too few pass the filters."""
MAX_NEAREST = 4096
SEEK_TEXTS = 256
"""A filter allowing at most this many texts is answered by seeking each text's nearby places."""
_Seen = tuple[int, float, str, Optional[Position], Optional[int], float]
"""A text's sighting in a window: (observation id, stamp, layer, position, episode id, first stamp seen)."""


# ---------------------------------------------------------------------- semantic search
def semantic_search(env: ToolContext, query: Any, n_results: Any = 10, layer: Any = None, time_after: Any = None,
                    time_before: Any = None, near_x: Any = None, near_y: Any = None, spatial_radius: Any = None,
                    episode_id: Any = None) -> SearchResult:
    query = env.text(query, "query")
    n = env.count(n_results)
    now = env.prepare()
    f = env.filters(layer, time_after, time_before, near_x, near_y, spatial_radius, episode_id)
    hits = env.reads.ranked_hits(query, f, n, now)
    words = env.describe(f)
    summary = quoted(query) + (f" ({words})" if words else "")
    return SearchResult("semantic_search", summary, hits, now, [] if hits else env.empty_notes(f),
                        empty="Nothing remembered matches")


def ranked_hits(env: ToolEnv, query: str, f: Filters, n: int, now: float, gists: bool = True) -> list[Hit]:
    """Texts and gists fused by RRF (with recency), as hits, best first."""
    area = AreaIndex.build(env.store, env.catalog, f.center, f.radius, f.layer) \
        if f.center is not None and f.radius is not None else None
    agg = Aggregator(env.store, env.catalog, f, area)
    vector = env.query_vector(query)
    floor, want = env.config.similarity_floor, n + max(5, n // 2)
    text_v, text_k = env.texts.rank(query, vector, agg, want, floor, env.texts.constraints(f, area))
    gist_v, gist_k = env.gists.rank(query, vector, f, n, floor) if gists else ([], [])
    fused = fuse([text_v, gist_v], [text_k, gist_k], now, env.config.recency_weight, env.config.recency_halflife)
    chosen = fused[: n + 3]
    made = text_hits_by_key(env.store, agg, chosen)
    hits: list[Hit] = []
    for c in chosen:
        if c.kind == "gist" and c.gist is not None:
            hits.append(gist_hit(c.gist, score=round(c.score, 4), similarity=c.similarity))
        elif c.key in made:
            hits.append(made[c.key])
    return hits[:n]


# ---------------------------------------------------------------------- spatial query
def spatial_query(env: ToolContext, x: Any, y: Any, z: Any = 0.0, radius: Any = 2.0, layer: Any = None,
                  time_after: Any = None, time_before: Any = None, n_results: Any = 10) -> SearchResult:
    n = env.count(n_results)
    radius = env.positive(radius, "radius", 2.0)
    center, _ = make_area(x, y, radius, z)
    assert center is not None
    now = env.prepare()
    f = env.filters(layer, time_after, time_before)
    f = Filters(layer=f.layer, after=f.after, before=f.before, center=center, radius=radius)
    hits = env.reads.nearby_hits(f, n, three_d=abs(center[2]) > 1e-9)
    summary = f"within {radius:g} m of ({center[0]:.1f}, {center[1]:.1f})"
    words = env.describe(Filters(layer=f.layer, after=f.after, before=f.before))
    if words:
        summary += f" ({words})"
    return SearchResult("spatial_query", summary, hits, now,
                        [] if hits else env.layer_notes(f.layer), empty="Nothing remembered")


def nearby_hits(env: ToolEnv, f: Filters, n: int, three_d: bool = False, gists: bool = True) -> list[Hit]:
    """Things seen in the filter's circle, nearest first, one hit per text and spot."""
    assert f.center is not None and f.radius is not None
    near = _places_near(env, f, n, three_d)
    if f.timed:
        near = near.take(np.nonzero((near.first <= f.hi) & (near.last >= f.lo))[0])  # f.overlaps
    if len(near) > SMALL:
        ranked, spots = _rank_many(near, f.center, three_d, bounds=f.timed)
    else:
        groups = group_places([place_of_row(r) for r in near.rows()])
        ranked = sorted(((_distance(g.centroid, f.center, three_d), -g.last, i) for i, g in enumerate(groups)))
        spots = [_Spot.of_group(groups[i]) for _, _, i in ranked]
    names = texts_of(env.store, {s.text_id for s in spots[: 4 * n]})
    reps = _representatives(env, [s.newest_obs_id for s in spots[: n + 8]])
    hits: list[Hit] = []
    for (d, _, _), spot in zip(ranked, spots):
        if len(hits) >= n:
            break
        made = _group_hit(env, spot, f, names.get(spot.text_id, ""), d, reps)
        if made is not None:
            hits.append(made)
    if gists and len(hits) < n:
        hits += area_gists(env, f, n - len(hits))
    return hits


class _Spot:
    """One thing around one spot (a group of places): what a hit needs, without its Place objects."""

    __slots__ = ("text_id", "layer", "count", "centroid", "first", "last", "newest_obs_id", "bounds")

    def __init__(self, text_id: int, layer: str, count: int, centroid: Position, first: float, last: float,
                 newest_obs_id: int, bounds: Optional[tuple[float, float, float, float]]) -> None:
        self.text_id, self.layer, self.count, self.centroid = text_id, layer, count, centroid
        self.first, self.last, self.newest_obs_id, self.bounds = first, last, newest_obs_id, bounds

    @classmethod
    def of_group(cls, g: Group) -> "_Spot":
        xs = [p.centroid[0] for p in g.places]
        ys = [p.centroid[1] for p in g.places]
        return cls(g.text_id, g.layer, g.count, g.centroid, g.first, g.last, g.newest.last_obs_id,
                   (min(xs), max(xs), min(ys), max(ys)))


def _rank_many(places: PlaceArrays, center: Position, three_d: bool,
               bounds: bool = True) -> tuple[list[tuple[float, float, int]], list[_Spot]]:
    """``group_places`` + the (distance, -last, index) ranking of ``nearby_hits``, on arrays.

    Hundreds of places around a busy spot: the group statistics come from
    numpy, summed in the same order as ``Group``'s, so every number (and
    hence the ranking) is the one the Place-by-Place path gives. A spot's
    bounding box is only read under a time window (``_group_hit``); without
    one (``bounds=False``) it is left out.
    """
    n_rows = len(places)
    key_of = _first_seen_rank(places.text_id, places.layer)
    count, first, last = places.count, places.first, places.last
    centroid = np.column_stack([places.sx / count, places.sy / count, places.sz / count])  # Place.centroid
    labels = linked_labels(np.column_stack([centroid[:, :2], key_of * KEY_GAP]), SAME_OBJECT)
    groups = int(labels.max()) + 1
    row_index = np.arange(n_rows)
    totals = np.bincount(labels, weights=count, minlength=groups)
    weighted = centroid * count[:, None]  # Group.centroid: sum of p.centroid[i] * p.count, in row order
    mean = np.column_stack([np.bincount(labels, weights=weighted[:, i], minlength=groups) / totals
                            for i in range(3)])
    boxes: Optional[list[tuple[float, float, float, float]]] = None
    if (labels[1:] >= labels[:-1]).all():
        # Each group one run of rows (the usual case: a key's places are one group): per-run
        # reductions instead of scattered ones; min and max do not depend on the order they run in.
        first_row = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
        lead = key_of[first_row]
        if (lead[1:] >= lead[:-1]).all():  # rows sorted by key: runs are in key, then first member order
            position = np.arange(groups)
        else:
            position = np.empty(groups, dtype=np.int64)
            position[np.lexsort((first_row, lead))] = np.arange(groups)
        g_first = np.minimum.reduceat(first, first_row)
        g_last = np.maximum.reduceat(last, first_row)
        # Group.newest: the first place with the latest stamp
        newest = np.minimum.reduceat(np.where(last == g_last[labels], row_index, n_rows), first_row)
        if bounds:
            boxes = list(zip(*(op.reduceat(centroid[:, axis], first_row).tolist()
                               for axis in (0, 1) for op in (np.minimum, np.maximum))))
    else:
        first_row = np.full(groups, n_rows, dtype=np.int64)
        np.minimum.at(first_row, labels, row_index)
        position = np.empty(groups, dtype=np.int64)  # index in group_places' order: key, then first member
        position[np.lexsort((first_row, key_of[first_row]))] = np.arange(groups)
        g_first = np.full(groups, np.inf)
        np.minimum.at(g_first, labels, first)
        g_last = np.full(groups, -np.inf)
        np.maximum.at(g_last, labels, last)
        newest = np.full(groups, n_rows, dtype=np.int64)  # Group.newest: first place with the latest stamp
        at_last = last == g_last[labels]
        np.minimum.at(newest, labels[at_last], row_index[at_last])
        if bounds:
            sides = []
            for axis in (0, 1):
                low = np.full(groups, np.inf)
                high = np.full(groups, -np.inf)
                np.minimum.at(low, labels, centroid[:, axis])
                np.maximum.at(high, labels, centroid[:, axis])
                sides += [low.tolist(), high.tolist()]
            boxes = list(zip(*sides))
    means, lasts, positions = mean.tolist(), g_last.tolist(), position.tolist()
    ranked = sorted((_distance(tuple(means[g]), center, three_d), -lasts[g], positions[g]) for g in range(groups))
    label_at = [0] * groups
    for g, pos in enumerate(positions):
        label_at[pos] = g
    # Per group only: the text and layer of its first row, the observation of its newest.
    firsts, totals_list = g_first.tolist(), totals.tolist()
    text_ids, layers = places.text_id[first_row].tolist(), places.layer[first_row].tolist()
    last_obs = places.last_obs[newest].tolist()
    spots = []
    for _, _, pos in ranked:
        g = label_at[pos]
        spots.append(_Spot(text_ids[g], layers[g], int(totals_list[g]), tuple(means[g]), firsts[g], lasts[g],
                           last_obs[g], boxes[g] if boxes is not None else None))
    return ranked, spots


def _first_seen_rank(text_id: np.ndarray, layer: np.ndarray, layer_list: Optional[list[str]] = None) -> np.ndarray:
    """Per row, the rank of its (text, layer) key in order of first appearance (0, 1, ... as met).

    The same numbers as ``rank.setdefault(key, len(rank))`` row by row, from a few array calls:
    a dense area has hundreds of places and only a handful of layers. Rows sorted by (text, layer),
    as ``PlaceCache.near`` gives them, hold each key in one run: the rank is then the run's number.
    """
    if len(text_id) > 1:
        same_text = text_id[1:] == text_id[:-1]
        if (text_id[1:] >= text_id[:-1]).all() and (layer[1:][same_text] >= layer[:-1][same_text]).all():
            run = np.zeros(len(text_id), dtype=np.int64)
            np.cumsum(~same_text | (layer[1:] != layer[:-1]), out=run[1:])
            return run
    code = np.zeros(len(layer), dtype=np.int64)
    names = sorted(set(layer_list if layer_list is not None else layer.tolist()))
    for i, name in enumerate(names[1:], 1):
        code[layer == name] = i
    key = text_id.astype(np.int64) * len(names) + code
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    ranks: np.ndarray = rank[inverse.reshape(-1)]
    return ranks


def _representatives(env: ToolEnv, obs_ids: list[int]) -> dict[int, Ref]:
    """(episode_id, tier) of the observations a batch of hits will show, in one query."""
    if not obs_ids:
        return {}
    return dict(env.obs_refs.get(env.store.reader(), obs_ids))


def _places_near(env: ToolEnv, f: Filters, n: int, three_d: bool) -> PlaceArrays:
    """The places (as columns) of the n nearest things that pass the filters.

    A dense area can hold thousands of places. When the filters name few
    texts (a small layer, a short window), those texts' places are sought
    in the (text, layer, cell) index; otherwise places are read nearest
    first from the R-tree, a few dozen at a time, until n things pass.
    """
    assert f.center is not None and f.radius is not None
    layers = [f.layer] if f.layer else env.catalog.layers
    few = _few_texts(env, f)
    if few is not None:
        return place_arrays_near(env.store, few, f.center, f.radius, layers, three_d)
    k = max(8 * n, NEAREST_FIRST)
    cell = env.store.cell_size
    center = np.asarray(f.center[:3] if three_d else f.center[:2], dtype=np.float64)
    while True:
        # The R-tree's answer; on the plane, the place cache's grid gives the same rows without it.
        fetched = None if three_d else env.store.place_cache.nearest(f.center, k)
        listed = len(fetched) if fetched is not None else 0
        if fetched is None:
            ids = env.store.place_ids_nearest(f.center, k, three_d)
            fetched, listed = place_rows_by_id(env.store, ids.tolist()), len(ids)
        # Place-by-Place, this was: within the circle, then layer and time, then sorted by distance
        # (stably: the R-tree does not sort). Same arithmetic on columns.
        count = fetched.count
        xyz = np.column_stack([fetched.sx / count, fetched.sy / count, fetched.sz / count])[:, :len(center)]
        offset = xyz - center
        d2 = (offset * offset).sum(axis=1) if len(fetched) else np.empty(0)
        inside = d2 <= f.radius * f.radius
        passing = inside & (fetched.first <= f.hi) & (fetched.last >= f.lo)
        if f.layer:
            passing &= fetched.layer == f.layer
        chosen = np.nonzero(passing)[0]
        distance = np.sqrt(d2[chosen])
        by_distance = chosen[np.argsort(distance, kind="stable")]
        texts_in_order = fetched.text_id[by_distance].tolist()
        found = list(dict.fromkeys(texts_in_order))
        if listed < k or int(inside.sum()) < len(fetched) and len(found) < n:
            return place_arrays_near(env.store, found, f.center, f.radius, layers, three_d)
        if len(found) >= n:
            # The R-tree returns whole cells nearest first (ties included), so every place not read
            # lies farther than the farthest cell read; up to one cell of slack is accepted.
            nth = float(np.sqrt(d2[by_distance[texts_in_order.index(found[n - 1])]]))
            low = np.floor(xyz / cell) * cell
            gap = np.maximum(np.maximum(low - center, 0.0), center - (low + cell))
            reach = float(np.sqrt((gap * gap).sum(axis=1)).max())
            if nth <= reach + cell:
                return place_arrays_near(env.store, found[:n], f.center, f.radius, layers, three_d)
        if k >= MAX_NEAREST:
            texts = env.catalog.texts(f.layer)
            return place_arrays_near(env.store, texts, f.center, f.radius, layers, three_d)
        k *= 4


def _distance(a: Position, b: Position, three_d: bool) -> float:
    return math.sqrt((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2 + ((a[2] - b[2]) ** 2 if three_d else 0.0))


def _few_texts(env: ToolEnv, f: Filters) -> Optional[list[int]]:
    """The texts a selective filter allows, when they are few enough to seek one by one."""
    options = []
    if f.layer and env.catalog.size(f.layer) <= SEEK_TEXTS:
        options.append(env.catalog.texts(f.layer))
    if f.timed:
        listed = env.texts.window_texts(f)
        if listed is not None and len(listed) <= SEEK_TEXTS:
            options.append(listed)
    return min(options, key=len) if options else None


def _group_hit(env: ToolEnv, g: _Spot, f: Filters, text: str, distance: float,
               reps: Optional[dict[int, Ref]] = None) -> Optional[Hit]:
    """One thing seen around one spot; a time window that cuts its places is counted in SQL."""
    count, exact, first, last = g.count, True, g.first, g.last
    obs_id = g.newest_obs_id
    if f.timed and not f.covers(first, last):
        assert g.bounds is not None  # _rank_many keeps them under a time window
        min_x, max_x, min_y, max_y = g.bounds
        half = env.store.cell_size
        lo, hi = max(f.lo, first), min(f.hi, last)
        row = env.store.reader().execute(
            "SELECT COUNT(*), MIN(stamp), MAX(stamp) FROM (SELECT stamp FROM observations WHERE text_id = ?"
            " AND stamp BETWEEN ? AND ? AND layer = ? AND source_type != ? AND x BETWEEN ? AND ?"
            " AND y BETWEEN ? AND ? ORDER BY stamp DESC LIMIT 1001)",
            (g.text_id, lo, hi, g.layer, _BODY, min_x - half, max_x + half, min_y - half,
             max_y + half)).fetchone()
        if not row[0]:
            return None
        count, exact, last = min(row[0], 1000), row[0] <= 1000, row[2]
        first = row[1] if row[0] <= 1000 else g.first
        newest = env.store.reader().execute(
            "SELECT id FROM observations WHERE text_id = ? AND stamp = ? AND layer = ? LIMIT 1",
            (g.text_id, last, g.layer)).fetchone()
        obs_id = newest[0] if newest else obs_id
    rep = reps.get(obs_id) if reps is not None else None
    if rep is None:
        rep = env.store.reader().execute(
            "SELECT episode_id, tier FROM observations WHERE id = ?", (obs_id,)).fetchone()
    if rep is None or rep[1] == "archived":
        return None
    return Hit(id=make_id(NodeKind.OBSERVATION, obs_id), kind="observation", text=text, layer=g.layer,
               position=rounded(g.centroid), stamp=last, first_stamp=first,
               episode_id=make_id(NodeKind.EPISODE, rep[0]) if rep[0] is not None else None,
               count=count, count_is_lower_bound=not exact,
               distance=round(distance, 6))  # to the micrometre: numpy and per-place sums may differ in the last bit


def area_gists(env: ToolEnv, f: Filters, n: int) -> list[Hit]:
    """Summaries whose area touches the circle (they stand in for archived observations)."""
    where, params = env.gists.predicates(f)
    rows = env.store.reader().execute(
        f"SELECT g.id FROM gists g WHERE {where} ORDER BY g.time_end DESC LIMIT ?", (*params, n)).fetchall()
    gists = env.gists.perceptual([r[0] for r in rows])
    out = []
    for g in gists:
        d = None
        if g.centroid is not None and f.center is not None:
            d = math.hypot(g.centroid[0] - f.center[0], g.centroid[1] - f.center[1])
        out.append(gist_hit(g, distance=d))
    return out


# ---------------------------------------------------------------------- temporal query
def temporal_query(env: ToolContext, time_after: Any = None, time_before: Any = None, last_n_minutes: Any = None,
                   layer: Any = None, near_x: Any = None, near_y: Any = None, spatial_radius: Any = None,
                   order: Any = "newest", n_results: Any = 10) -> SearchResult:
    n = env.count(n_results)
    order = _order(order)
    now = env.prepare()
    f = env.filters(layer, time_after, time_before, near_x, near_y, spatial_radius)
    if last_n_minutes is not None:
        minutes = env.positive(last_n_minutes, "last_n_minutes", 5.0)
        start = now - minutes * 60.0
        f = Filters(layer=f.layer, after=max(start, f.lo), before=f.before if f.before is not None else now,
                    center=f.center, radius=f.radius)
    hits = env.reads.timeline(f, n, order)
    summary = env.describe(f) or "all time"
    summary = f"{summary}, {order} first"
    return SearchResult("temporal_query", summary, hits, now, [] if hits else env.empty_notes(f),
                        empty="Nothing observed")


def _order(value: Any) -> str:
    if value is None:
        return "newest"
    text = str(value).strip().lower()
    if text in ("newest", "desc", "latest", "recent"):
        return "newest"
    if text in ("oldest", "asc", "earliest"):
        return "oldest"
    raise InvalidInputError(f"order must be 'newest' or 'oldest', got {value!r}")


def timeline(env: ToolEnv, f: Filters, n: int, order: str = "newest", gists: bool = True) -> list[Hit]:
    """Distinct things seen in the window, by their newest (or first) sighting in it."""
    newest = order == "newest"
    groups = _scan_window(env, f, n, newest)
    agg = Aggregator(env.store, env.catalog, Filters(layer=f.layer, after=f.after, before=f.before,
                                                     center=f.center, radius=f.radius))
    names = texts_of(env.store, list(groups))
    hits: list[Hit] = []
    totals = agg.get_many(list(groups), count=True)
    for text_id, (obs_id, stamp, layer, pos, episode, seen_first) in groups.items():
        full = totals[text_id]
        count, exact, first = (full.count, full.exact, full.first) if full is not None else (1, False, None)
        hits.append(Hit(id=make_id(NodeKind.OBSERVATION, obs_id), kind="observation", text=names.get(text_id, ""),
                        layer=layer, position=pos, stamp=full.last if full is not None else stamp,
                        first_stamp=first if first is not None else (seen_first if not newest else None),
                        episode_id=make_id(NodeKind.EPISODE, episode) if episode is not None else None,
                        count=count, count_is_lower_bound=not exact))
    if not newest:
        hits.sort(key=lambda h: (h.first_stamp if h.first_stamp is not None else h.stamp or 0.0))
    if gists and len(hits) < n:
        hits += _window_gists(env, f, n - len(hits), newest)
    return hits[:n]


def _scan_window(env: ToolEnv, f: Filters, n: int, newest: bool) -> dict[int, _Seen]:
    """Read the window newest-first (or oldest-first) in chunks until n distinct texts are found.

    The pages carry only (id, text, stamp): most rows read repeat a text already found, so the
    rest of a row (layer, position, episode) is read afterwards for the n rows that are kept.
    """
    where, params = f.sql("o", time=False, episode=False)
    lo, hi = max(f.lo, -1e300), min(f.hi, 1e300)
    direction = "DESC" if newest else "ASC"
    cmp = "<" if newest else ">"
    firsts: dict[int, tuple[int, float]] = {}
    conn = env.store.reader()
    cursor: Optional[tuple[float, int]] = None
    scanned = 0
    complete = False
    while len(firsts) < n and scanned < SCAN_LIMIT:
        # A short first read: n distinct texts usually turn up in the first few dozen rows. The sizes
        # add up to SCAN_CHUNK, so the pages line up with SCAN_CHUNK-sized ones from there on.
        chunk = FIRST_READS.get(scanned, SCAN_CHUNK)
        page = ""
        page_params: list[Any] = []
        if cursor is not None:
            page = f" AND (o.stamp {cmp} ? OR (o.stamp = ? AND o.id {cmp} ?))"
            page_params = [cursor[0], cursor[0], cursor[1]]
        rows = conn.execute(
            "SELECT o.id, o.text_id, o.stamp FROM observations o"
            f" WHERE o.stamp BETWEEN ? AND ? AND {where} AND o.source_type != ? AND o.text_id IS NOT NULL"
            f" AND o.tier != 'archived'{page} ORDER BY o.stamp {direction}, o.id {direction} LIMIT ?",
            (lo, hi, *params, _BODY, *page_params, chunk)).fetchall()
        for obs_id, text_id, stamp in rows:
            if text_id not in firsts:
                firsts[text_id] = (obs_id, stamp)
                if len(firsts) >= n:
                    break
        scanned += len(rows)
        if len(rows) < chunk:
            complete = True
            break
        cursor = (rows[-1][2], rows[-1][0])
    groups: dict[int, _Seen] = {}
    if firsts:
        slots = marks(len(firsts))
        details = {r[0]: r[1:] for r in conn.execute(
            f"SELECT id, layer, x, y, z, episode_id FROM observations WHERE id IN ({slots})",
            [obs_id for obs_id, _ in firsts.values()])}
        for text_id, (obs_id, stamp) in firsts.items():
            detail = details.get(obs_id)
            if detail is None:  # removed between the two reads (archival with retention): skip it
                continue
            layer, x, y, z, episode = detail
            groups[text_id] = (obs_id, stamp, layer, (x, y, z) if x is not None else None, episode, stamp)
    if not complete and len(groups) < n and scanned >= SCAN_LIMIT:
        _complete_from_catalog(env, f, n, newest, groups)
    return groups


def _complete_from_catalog(env: ToolEnv, f: Filters, n: int, newest: bool, groups: dict[int, _Seen]) -> None:
    """A window flooded by one repeated text: find the other texts through the catalog instead."""
    agg = Aggregator(env.store, env.catalog, Filters(layer=f.layer, after=f.after, before=f.before,
                                                     center=f.center, radius=f.radius))
    found = []
    for text_id, stats in env.catalog.slice_items(f.layer):
        if text_id in groups or not f.overlaps(stats.first, stats.last):
            continue
        hit = agg.get(text_id, count=False)
        if hit is not None:
            # newest: its last sighting in the window; oldest: a lower bound of its first one there
            found.append((hit.last if newest else max(stats.first, f.lo), text_id, hit))
    found.sort(key=lambda item: item[0], reverse=newest)
    chosen = found[: n - len(groups)]
    reps = agg.representatives([hit for _, _, hit in chosen])
    for _, text_id, _ in chosen:
        rep = reps.get(text_id)
        if rep is not None:
            groups[text_id] = (rep.obs_id, rep.stamp, rep.layer, rep.position, rep.episode, rep.stamp)


def _window_gists(env: ToolEnv, f: Filters, n: int, newest: bool) -> list[Hit]:
    where, params = env.gists.predicates(Filters(layer=f.layer, after=f.after, before=f.before,
                                                 center=f.center, radius=f.radius))
    rows = env.store.reader().execute(
        f"SELECT g.id FROM gists g WHERE {where} ORDER BY g.time_end {'DESC' if newest else 'ASC'} LIMIT ?",
        (*params, n)).fetchall()
    return [gist_hit(g) for g in env.gists.perceptual([r[0] for r in rows])]
