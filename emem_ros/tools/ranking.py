"""Hybrid retrieval of distinct texts and gists under filters that never starve.

Candidates come from two lists (vector, keyword); each candidate is checked
against the filters before it may take a rank, and the lists keep growing
until they hold enough checked candidates or run dry. When a filter is
selective (an episode, a small area, a short window, a rare layer), its
distinct texts are listed first and scored exactly with numpy, so a text
far down the global ranking is still found.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from emem_ros.core.types import Gist
from emem_ros.indexes.vector_index import VectorIndex
from emem_ros.storage import codec
from emem_ros.storage.sqlutil import chunked, marks
from emem_ros.storage.store import MemoryStore
from emem_ros.tools.aggregate import Aggregator, AreaIndex, Representative, TextAgg, texts_of
from emem_ros.tools.catalog import TextCatalog
from emem_ros.tools.filters import Filters
from emem_ros.tools.hybrid import MAX_FUSED, KeywordIndex, recency_factor, rrf
from emem_ros.tools.results import Hit

EXACT_LIMIT = 1024
"""Up to this many candidate texts, score them all exactly instead of asking hnswlib."""
SHORT_WINDOW_ROWS = 2048
"""A time window with at most this many observations is listed directly."""
FILTERED_SEARCH_SHARE = 0.25
"""Below this share of all texts, hnswlib is asked with a filter instead of over-fetching."""
PARSED_GISTS = 1024
"""Parsed gists kept by the ranker, the last read (about 1 MB)."""
OLDER_SCAN_LIMIT = 8192
"""A filter's gists behind the graph's horizon scored exactly at most (the newest): about a week of patrols."""
MAX_KEYWORD = 4096
KEYWORD_DEPTH = 512
"""Keyword rows read once when the candidates are already listed exactly."""
_BODY = "interoception"


@dataclass
class Constraint:
    """A set the answer must come from: its size, a membership test and a way to list it."""

    size: int
    contains: Callable[[int], bool]
    listing: Callable[[], list[int]]


@dataclass
class Candidate:
    kind: str
    """'text' or 'gist'."""
    key: int
    similarity: Optional[float] = None
    agg: Optional[TextAgg] = None
    gist: Optional[Gist] = None
    score: float = 0.0

    @property
    def stamp(self) -> Optional[float]:
        if self.agg is not None:
            return self.agg.last
        return self.gist.time_end if self.gist is not None else None


class TextRanker:
    """Distinct perception/manual texts ranked by vector + keyword evidence under filters."""

    def __init__(self, store: MemoryStore, catalog: TextCatalog) -> None:
        self._store = store
        self._catalog = catalog
        self.keywords = KeywordIndex("texts_fts", content="texts")
        self.vectors: Optional[TextVectorSource] = None
        """Where stored text vectors are read (``ToolEnv`` sets its memo); None: ``store.text_vectors``."""

    def constraints(self, f: Filters, area: Optional[AreaIndex]) -> list[Constraint]:
        out: list[Constraint] = []
        if f.layer or f.episode is not None:
            cat, layer, episode = self._catalog, f.layer, f.episode
            members = cat.slice_ref(layer, episode)  # dict lookups are atomic: safe inside hnswlib's filter
            out.append(Constraint(len(members), members.__contains__, lambda: cat.texts(layer, episode)))
        if area is not None and area.listed is not None:
            listed = area.listed
            out.append(Constraint(len(listed), listed.__contains__, lambda: list(listed)))
        if f.timed:
            window = self.window_texts(f)
            if window is not None:
                in_window = set(window)
                out.append(Constraint(len(in_window), in_window.__contains__, lambda: list(in_window)))
        return out

    def window_texts(self, f: Filters) -> Optional[list[int]]:
        """Distinct perception texts of a short time window (None when the window is long)."""
        conn = self._store.reader()
        lo, hi = max(f.lo, -1e300), min(f.hi, 1e300)
        rows = conn.execute("SELECT COUNT(*) FROM (SELECT 1 FROM observations WHERE stamp BETWEEN ? AND ? LIMIT ?)",
                            (lo, hi, SHORT_WINDOW_ROWS + 1)).fetchone()[0]
        if rows > SHORT_WINDOW_ROWS:
            return None
        return [r[0] for r in conn.execute(
            "SELECT DISTINCT text_id FROM observations WHERE stamp BETWEEN ? AND ? AND text_id IS NOT NULL"
            " AND source_type != ?", (lo, hi, _BODY))]

    def rank(self, query: str, vector: np.ndarray, agg: Aggregator, want: int, floor: float,
             constraints: Sequence[Constraint]) -> tuple[list[Candidate], list[Candidate]]:
        """(vector list, keyword list) of checked candidates, best first."""
        ordered = sorted(constraints, key=lambda c: c.size)
        if ordered and ordered[0].size == 0:
            return [], []
        contains = _all(ordered)
        exact: Optional[list[int]] = None
        if ordered and ordered[0].size <= EXACT_LIMIT:
            exact = [t for t in ordered[0].listing() if contains(t)]
        if exact is not None:
            vector_list = self._exact(vector, exact, agg, want, floor)
        else:
            index = self._store.vectors["texts"]
            use_filter = bool(ordered) and ordered[0].size < FILTERED_SEARCH_SHARE * max(1, len(index))
            universe = ordered[0].listing if ordered else (lambda: self._catalog.texts())
            vector_list = _grow(index, vector, agg, want, floor, contains if use_filter else None, universe,
                                self._store, self.vectors)
        member = set(exact).__contains__ if exact is not None else contains
        keyword_list = self._keyword(query, agg, want, member, exact is not None)
        return vector_list, keyword_list

    def _exact(self, vector: np.ndarray, ids: list[int], agg: Aggregator, want: int,
               floor: float) -> list[Candidate]:
        return _score_exactly(self._store, vector, ids, agg, want, floor, vectors=self.vectors)

    def _keyword(self, query: str, agg: Aggregator, want: int, member: Optional[Callable[[int], bool]],
                 exact: bool) -> list[Candidate]:
        """Checked keyword candidates; a small exact candidate set is read once, deep, never regrown."""
        conn = self._store.reader()
        plan = self.keywords.plan(conn, query)
        if plan is None:
            return []
        limit = KEYWORD_DEPTH if exact else max(8 * want, 128)
        seen: set[int] = set()
        out: list[Candidate] = []
        while True:
            ids = self.keywords.run(conn, plan, limit)
            agg.prefetch([t for t in ids if t not in seen and (member is None or member(t))])
            for text_id in ids:
                if text_id in seen:
                    continue
                seen.add(text_id)
                if member is not None and not member(text_id):
                    continue
                found = agg.get(text_id, count=False)
                if found is not None:
                    out.append(Candidate("text", text_id, agg=found))
                    if len(out) >= want:
                        return out
            if exact or len(ids) < limit or limit >= MAX_KEYWORD:
                return out
            limit *= 4


def _all(constraints: Sequence[Constraint]) -> Callable[[int], bool]:
    tests = [c.contains for c in constraints]
    if not tests:
        return lambda _t: True
    if len(tests) == 1:
        return tests[0]
    return lambda t: all(test(t) for test in tests)


def _grow(index: VectorIndex, vector: np.ndarray, agg: Aggregator, want: int, floor: float,
          allowed: Optional[Callable[[int], bool]], universe: Callable[[], list[int]],
          store: MemoryStore, vectors: Optional[TextVectorSource] = None) -> list[Candidate]:
    """hnswlib with growing k until ``want`` candidates pass the filters or similarity runs out.

    hnswlib may return fewer than k neighbours (its graph search gives up,
    or its filter starves); then the rest of ``universe`` is scored exactly,
    so a filter never hides a match.
    """
    k, seen, out = max(2 * want, 32), set(), []
    size = len(index)
    while True:
        labels, sims = index.search(vector, k, allowed=allowed)
        agg.prefetch([label for label in labels.tolist() if label not in seen])
        exhausted = False
        for label, sim in zip(labels.tolist(), sims.tolist()):
            if label in seen:
                continue
            seen.add(label)
            if sim < floor:
                exhausted = True
                continue
            found = agg.get(label, count=False)
            if found is not None:
                out.append(Candidate("text", label, similarity=sim, agg=found))
        if len(out) >= want or exhausted or k >= size:
            break
        if len(labels) < k:
            out += _score_exactly(store, vector, [t for t in universe() if t not in seen], agg,
                                  want - len(out), floor, vectors=vectors)
            break
        k *= 4
    out.sort(key=lambda c: -(c.similarity or 0.0))
    return out[:want]


TextVectorSource = Callable[[Sequence[int]], np.ndarray]
"""``store.text_vectors`` or a memo of it (``vector_memo.TextVectors.get``)."""


def _score_exactly(store: MemoryStore, vector: np.ndarray, ids: list[int], agg: Aggregator, want: int,
                   floor: float, chunk: int = 4096, vectors: Optional[TextVectorSource] = None) -> list[Candidate]:
    """Exact cosine over listed texts, best first, checked until ``want`` pass."""
    if not ids or want <= 0:
        return []
    read = vectors or store.text_vectors
    scored: list[tuple[float, int]] = []
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        sims = read(part) @ vector
        scored += [(float(sims[i]), part[i]) for i in np.nonzero(sims >= floor)[0]]
    scored.sort(reverse=True)
    out: list[Candidate] = []
    for sim, text_id in scored:
        found = agg.get(text_id, count=False)
        if found is not None:
            out.append(Candidate("text", text_id, similarity=sim, agg=found))
            if len(out) >= want:
                break
    return out


class GistRanker:
    """Gists ranked by vector + keyword evidence; the gists table is small, so filters are SQL."""

    def __init__(self, store: MemoryStore, catalog: TextCatalog) -> None:
        self._store = store
        self._catalog = catalog
        self.keywords = KeywordIndex("gists_fts", content="gists")
        self._by_layer: dict[str, tuple[int, np.ndarray]] = {}
        """Per layer: the highest gist id looked at, and the sorted ids of the gists covering the layer."""
        self._by_layer_lock = threading.Lock()
        self._parsed_lock = threading.Lock()
        self._parsed: OrderedDict[int, Gist] = OrderedDict()
        """The gists read last (rows are never updated, only inserted): JSON parsing is most of a read."""
        self._columns = _GistColumns()

    def reset(self) -> None:
        """Gists were rewritten or deleted (forget): what was read of them is read again."""
        with self._by_layer_lock, self._parsed_lock:
            self._by_layer = {}
            self._parsed = OrderedDict()
            self._columns = _GistColumns()

    def layer_gists(self, conn: sqlite3.Connection, layer: str) -> np.ndarray:
        """Ids of the gists that cover a layer, kept per layer and caught up with new gists.

        Gists are only ever inserted (ids grow), so the set for ids up to the
        highest one seen stays right; testing every gist's JSON layer list
        on each filtered query costs milliseconds at thousands of gists.
        """
        top = conn.execute("SELECT COALESCE(MAX(id), 0) FROM gists").fetchone()[0]
        with self._by_layer_lock:
            seen, ids = self._by_layer.get(layer, (0, np.empty(0, np.int64)))
        if top > seen:
            new = [r[0] for r in conn.execute(
                "SELECT g.id FROM gists g WHERE g.id > ? AND g.id <= ? AND"
                " EXISTS (SELECT 1 FROM json_each(g.layers) WHERE json_each.value = ?) ORDER BY g.id",
                (seen, top, layer))]
            ids = np.concatenate([ids, np.asarray(new, np.int64)]) if new else ids
            with self._by_layer_lock:
                if self._by_layer.get(layer, (0,))[0] < top:
                    self._by_layer[layer] = (top, ids)
        return ids

    def _allowed(self, conn: sqlite3.Connection, f: Filters) -> set[int]:
        """Ids of the gists that pass the filters: ``predicates`` evaluated on in-memory columns."""
        ids = self._columns.sync(conn).matching(f)
        if not f.layer:
            return set(ids.tolist())
        return set(ids[np.isin(ids, self.layer_gists(conn, f.layer), assume_unique=True)].tolist())

    @staticmethod
    def predicates(f: Filters) -> tuple[str, list[object]]:
        parts: list[str] = []
        params: list[object] = []
        if f.after is not None:
            parts.append("g.time_end >= ?")
            params.append(f.after)
        if f.before is not None:
            parts.append("g.time_start <= ?")
            params.append(f.before)
        if f.episode is not None:
            parts.append("g.episode_id = ?")
            params.append(f.episode)
        if f.layer:
            parts.append("EXISTS (SELECT 1 FROM json_each(g.layers) WHERE json_each.value = ?)")
            params.append(f.layer)
        if f.center is not None:
            cx, cy, _ = f.center
            parts.append("g.cx IS NOT NULL AND (g.cx - ?) * (g.cx - ?) + (g.cy - ?) * (g.cy - ?)"
                         " <= (? + g.radius) * (? + g.radius)")
            params += [cx, cx, cy, cy, f.radius, f.radius]
        return " AND ".join(parts) or "1", params

    def rank(self, query: str, vector: np.ndarray, f: Filters, want: int,
             floor: float) -> tuple[list[Candidate], list[Candidate]]:
        conn = self._store.reader()
        index = self._store.vectors["gists"]
        if not len(index) and not conn.execute("SELECT EXISTS (SELECT 1 FROM gists)").fetchone()[0]:
            return [], []
        allowed: Optional[set[int]] = None
        if not f.empty:
            allowed = self._allowed(conn, f)
            if not allowed:
                return [], []
        vector_hits: list[tuple[int, float]] = []
        if allowed is not None and len(allowed) <= EXACT_LIMIT:
            older = self._columns.ended_before(self._store.gist_cutoff, allowed)
            ids = sorted(allowed.difference(older.tolist())) + older.tolist()
            vectors = np.concatenate([_gist_vectors(conn, index, ids[:len(ids) - len(older)], self._store.dim),
                                      _gist_vectors(conn, None, ids[len(ids) - len(older):], self._store.dim)])
            sims = vectors @ vector
            vector_hits = [(ids[i], float(sims[i])) for i in np.argsort(-sims)[: want * 2]]
        else:
            if len(index):
                k = max(2 * want, 32)
                labels, sims = index.search(vector, k, allowed=allowed.__contains__ if allowed is not None else None)
                vector_hits = list(zip(labels.tolist(), sims.tolist()))
            if allowed is not None:  # the filter's gists behind the graph's horizon are scored from SQLite
                older = self._columns.ended_before(self._store.gist_cutoff, allowed)[-OLDER_SCAN_LIMIT:].tolist()
                for start in range(0, len(older), EXACT_LIMIT):  # a chunk at a time: no matrix of them all
                    part = older[start:start + EXACT_LIMIT]
                    sims = _gist_vectors(conn, None, part, self._store.dim) @ vector
                    vector_hits += [(part[i], float(sims[i])) for i in np.argsort(-sims)[: want * 2]]
                vector_hits = sorted(vector_hits, key=lambda hit: -hit[1])[: max(2 * want, 32)]
        vector_hits = [(g, s) for g, s in vector_hits if s >= floor]
        # The keyword list is read lazily, as far as the answer needs: a deep list (KEYWORD_DEPTH under a
        # filter) is mostly unused, and its second pass (any word, by BM25) costs most when it runs at all.
        keyword_ids = (g for g in self.keywords.stream(conn, query, KEYWORD_DEPTH if allowed else max(4 * want, 32))
                       if allowed is None or g in allowed)
        gists: dict[int, Optional[Gist]] = {}
        self._read_gists(gists, [g for g, _ in vector_hits])
        keyword_list: list[Candidate] = []
        step = max(want, 16)
        while len(keyword_list) < want:
            part = list(itertools.islice(keyword_ids, step))
            if not part:
                break
            self._read_gists(gists, part)
            keyword_list += [Candidate("gist", g, gist=gists[g]) for g in part if gists.get(g) is not None]
        vector_list = [Candidate("gist", g, similarity=s, gist=gists[g]) for g, s in vector_hits
                       if gists.get(g) is not None]
        return vector_list[:want], keyword_list[:want]

    def perceptual(self, ids: Sequence[int]) -> list[Gist]:
        """``[g for g in store.get_gists(ids) if not is_body_only(g)]``, each gist parsed once."""
        found: dict[int, Optional[Gist]] = {}
        self._read_gists(found, ids)
        return [gist for gist in (found.get(g) for g in ids) if gist is not None]

    def _read_gists(self, into: dict[int, Optional[Gist]], ids: Sequence[int]) -> None:
        """Fetch the gists not read yet into ``into``; body-only (and missing) ones map to None."""
        wanted = [g for g in dict.fromkeys(ids) if g not in into]
        if not wanted:
            return
        found: dict[int, Gist] = {}
        with self._parsed_lock:
            for g in wanted:
                cached = self._parsed.get(g)
                if cached is not None:
                    self._parsed.move_to_end(g)
                    found[g] = cached
        missing = [g for g in wanted if g not in found]
        if missing:
            fresh = {gist_number(g): g for g in self._store.get_gists(missing)}
            with self._parsed_lock:
                self._parsed.update(fresh)
                while len(self._parsed) > PARSED_GISTS:
                    self._parsed.popitem(last=False)
            found.update(fresh)
        for g in wanted:
            gist = found.get(g)
            into[g] = gist if gist is not None and not self.is_body_only(gist) else None

    def is_body_only(self, gist: Gist) -> bool:
        """A summary of body readings only belongs to body_status, not to perception answers."""
        body = set(self._catalog.body_layers)
        return bool(gist.layers) and set(gist.layers) <= body


class _GistColumns:
    """id, time range, episode and circle of every gist, as numpy columns, for filter tests.

    Gists are only inserted (ids grow), so the columns catch up by id.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._top = 0
        empty = np.empty(0)
        self.ids, self.t0, self.t1, self.episode = np.empty(0, np.int64), empty, empty, empty
        self.cx, self.cy, self.radius = empty, empty, empty

    def sync(self, conn: sqlite3.Connection) -> "_GistColumns":
        top = conn.execute("SELECT COALESCE(MAX(id), 0) FROM gists").fetchone()[0]
        if top <= self._top:  # lower: this thread's snapshot predates another's catch-up
            return self
        with self._lock:
            if top > self._top:
                rows = conn.execute(
                    "SELECT id, time_start, time_end, COALESCE(episode_id, -1), cx, cy, radius FROM gists"
                    " WHERE id > ? AND id <= ? ORDER BY id", (self._top, top)).fetchall()
                if rows:
                    cols = list(zip(*rows))
                    nan = float("nan")
                    self.ids = np.concatenate([self.ids, np.asarray(cols[0], np.int64)])
                    self.t0 = np.concatenate([self.t0, np.asarray(cols[1], np.float64)])
                    self.t1 = np.concatenate([self.t1, np.asarray(cols[2], np.float64)])
                    self.episode = np.concatenate([self.episode, np.asarray(cols[3], np.float64)])
                    self.cx = np.concatenate([self.cx, np.asarray([nan if v is None else v for v in cols[4]])])
                    self.cy = np.concatenate([self.cy, np.asarray([nan if v is None else v for v in cols[5]])])
                    self.radius = np.concatenate([self.radius, np.asarray(cols[6], np.float64)])
                self._top = top
        return self

    def ended_before(self, cutoff: float, among: set[int]) -> np.ndarray:
        """Ids in ``among`` of the gists that ended before ``cutoff``, ascending."""
        with self._lock:
            ids, t1 = self.ids, self.t1
        old = ids[t1 < cutoff]
        return old[np.isin(old, np.fromiter(among, dtype=np.int64, count=len(among)), assume_unique=True)]

    def matching(self, f: Filters) -> np.ndarray:
        """Ids passing ``GistRanker.predicates(f)`` except the layer test (same arithmetic)."""
        with self._lock:
            ids, t0, t1, episode = self.ids, self.t0, self.t1, self.episode
            cx, cy, radius = self.cx, self.cy, self.radius
        keep = np.ones(len(ids), dtype=bool)
        if f.after is not None:
            keep &= t1 >= f.after
        if f.before is not None:
            keep &= t0 <= f.before
        if f.episode is not None:
            keep &= episode == f.episode
        if f.center is not None:
            x, y, _ = f.center
            reach = (f.radius or 0.0) + radius
            with np.errstate(invalid="ignore"):
                keep &= ~np.isnan(cx) & ((cx - x) * (cx - x) + (cy - y) * (cy - y) <= reach * reach)
        return ids[keep]


def _gist_vectors(conn: sqlite3.Connection, index: Optional[VectorIndex], ids: list[int], dim: int) -> np.ndarray:
    """The vectors of ``ids`` (unit length), zeros for a gist without one.

    The graph holds each gist's vector already, so no copy is kept: they are read from it, and from
    SQLite for a gist it does not hold (newer than this thread's view, or never embedded). ``index``
    None: the gists are behind the graph's horizon, read from SQLite without asking the graph.
    """
    out = np.zeros((len(ids), dim), dtype=np.float32)
    wanted = np.asarray(ids, dtype=np.int64)
    if index is not None and len(wanted):
        held, vectors = index.held_vectors(wanted)
        out[held] = vectors
    else:
        held = np.zeros(len(wanted), dtype=bool)
    rest = [int(g) for g in wanted[~held]]
    position = {g: i for i, g in enumerate(ids)}
    for chunk in chunked(rest):
        slots = marks(len(chunk))
        for gid, blob in conn.execute(
                f"SELECT id, embedding FROM gists WHERE id IN ({slots}) AND embedding IS NOT NULL", chunk):
            out[position[gid]] = codec.blob_to_vector(blob, dim)
    return out


def fuse(vector_lists: Sequence[list[Candidate]], keyword_lists: Sequence[list[Candidate]], now: float,
         weight: float, halflife: float) -> list[Candidate]:
    """One RRF over kinds: vector lists merge by cosine, keyword lists interleave by rank."""
    by_key: dict[object, Candidate] = {}
    vector: list[tuple[object, float]] = []
    for item in sorted((c for lst in vector_lists for c in lst), key=lambda c: -(c.similarity or 0.0)):
        by_key.setdefault((item.kind, item.key), item)
        vector.append(((item.kind, item.key), item.similarity or 0.0))
    keyword: list[object] = []
    depth = max((len(lst) for lst in keyword_lists), default=0)
    for rank in range(depth):
        for lst in keyword_lists:
            if rank < len(lst):
                item = lst[rank]
                by_key.setdefault((item.kind, item.key), item)
                keyword.append((item.kind, item.key))
    fused = rrf(vector, keyword)
    out = []
    for key, entry in fused.items():
        item = by_key[key]
        if entry.similarity is not None:
            item.similarity = entry.similarity
        item.score = entry.score / MAX_FUSED * recency_factor(item.stamp, now, weight, halflife)
        out.append(item)
    out.sort(key=lambda c: (-c.score, -(c.similarity or 0.0), c.kind, c.key))
    return out


def gist_hit(gist: Gist, score: Optional[float] = None, similarity: Optional[float] = None,
             distance: Optional[float] = None) -> Hit:
    return Hit(id=gist.id, kind="gist", text=gist.text, layer=None, position=gist.centroid,
               stamp=gist.time_end, first_stamp=gist.time_start, score=score, episode_id=gist.episode_id,
               count=gist.source_count, radius=gist.radius, similarity=similarity, layers=tuple(gist.layers),
               distance=distance)


def text_hits(store: MemoryStore, agg: Aggregator, candidates: Sequence[Candidate]) -> list[Hit]:
    """Hits for ranked text candidates (in order): full counts and the newest observation of each."""
    made = text_hits_by_key(store, agg, candidates)
    return [made[c.key] for c in candidates if c.kind == "text" and c.key in made]


def text_hits_by_key(store: MemoryStore, agg: Aggregator, candidates: Sequence[Candidate]) -> dict[int, Hit]:
    texts = [c for c in candidates if c.kind == "text"]
    full = agg.get_many([c.key for c in texts], count=True)
    reps = agg.representatives([a for a in full.values() if a is not None])
    names = texts_of(store, [c.key for c in texts])
    out: dict[int, Hit] = {}
    for c in texts:
        totals = full[c.key]
        if totals is None:
            continue
        rep = reps.get(c.key) or _fallback_representative(store, agg, c.key)
        if rep is None:
            continue
        out[c.key] = Hit(id=rep.node_id, kind="observation", text=names.get(c.key, ""), layer=rep.layer,
                         position=rep.position, stamp=totals.last, score=round(c.score, 4),
                         episode_id=rep.episode_id, count=totals.count, count_is_lower_bound=not totals.exact,
                         first_stamp=totals.first, similarity=c.similarity)
    return out


def _fallback_representative(store: MemoryStore, agg: Aggregator, text_id: int) -> Optional[Representative]:
    """An area match whose observations sit just outside the circle: use its newest place."""
    if agg.area is None:
        return None
    places = agg.area.places_of(text_id)
    if not places:
        return None
    newest = max(places, key=lambda p: p.last_stamp)
    row = store.reader().execute(
        "SELECT id, stamp, layer, x, y, z, episode_id FROM observations WHERE id = ? AND tier != 'archived'",
        (newest.last_obs_id,)).fetchone()
    if row is None:
        return None
    obs_id, stamp, layer, x, y, z, episode = row
    return Representative(obs_id, stamp, layer, (x, y, z) if x is not None else None, episode)


def gist_number(gist: Gist) -> int:
    return int(gist.id.split("-")[1])
