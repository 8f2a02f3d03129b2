"""What the fleet tools read, in SQL: the read interface of ``fleet.tools`` over the fleet store.

The robot's tools read its SQLite file through catalogs, place caches and
hnswlib; over the fleet the same questions are PostgreSQL queries: pgvector's
HNSW (with iterative scans, so filters never starve it), ``tsvector`` for
words, PostGIS for circles and nearest-first reads, and the summaries the
sync keeps (schema v4): ``sightings`` (per text, robot and layer: exact
counts, first and last stamp, the newest sighting's place) and ``places``
(the 0.5 m grid cells locate weighs). They answer every read without a time
window, circle or episode in one primary-key read, however often a thing was
seen; with one of those filters the observations are read, bounded (``cap``
rows per robot and text, newest first), and counts beyond the cap are
reported as lower bounds, as the robot's own tools do. Counts include
sightings the robot archived (the fleet keeps their text). Results come in
binary (locate's thousands of cells decode in a third of the time), and the
four candidate lists of a ranking come in one statement.

A ``Scope`` is one call's filters (robots, layer, time window, circle) in
the fleet frame. Perception reads never return body readings
(interoception); reads of the observations skip archived ones (their gists
stand in), the summaries count them (the fleet keeps their text).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from emem_ros.fleet import db
from emem_ros.fleet.errors import FleetError, FleetUnavailableError
from emem_ros.fleet.schema import FleetInfo, open_fleet

log = logging.getLogger(__name__)

Position = tuple[float, float, float]
BODY = "interoception"
KEYWORD_MATCHES = 64
"""Texts holding a query word read at most before ranking (a common word matches half the fleet)."""
COUNT_CAP = 1000
"""Sightings of one text by one robot counted at most (from the index alone); beyond, a lower bound."""
TEXT_MEMO = 4096
BODY_LAYERS_TTL = 300.0
"""Seconds the list of body layers is kept (it only grows when a robot gets a new sensor)."""


@dataclass(frozen=True)
class Scope:
    """One call's filters, in the fleet frame; None means unbounded."""

    robots: Optional[tuple[str, ...]] = None
    layer: Optional[str] = None
    after: Optional[float] = None
    before: Optional[float] = None
    center: Optional[Position] = None
    radius: Optional[float] = None
    three_d: bool = False
    episode: Optional[int] = None
    """An episode row number of the one robot in ``robots`` (episode ids are per robot)."""

    @property
    def timed(self) -> bool:
        return self.after is not None or self.before is not None

    @property
    def empty(self) -> bool:
        return not (self.robots or self.layer or self.timed or self.center is not None or self.episode is not None)

    def observations(self, alias: str = "o", robots: bool = True) -> tuple[str, list[Any]]:
        """Predicates on perception observations (never body readings nor archived rows) and their params."""
        a = alias
        parts = [f"{a}.source_type <> '{BODY}'", f"{a}.tier <> 'archived'", f"{a}.text_id IS NOT NULL"]
        params: list[Any] = []
        if robots and self.robots:
            parts.append(f"{a}.robot_id = ANY(%s)")
            params.append(list(self.robots))
        if self.layer:
            parts.append(f"{a}.layer = %s")
            params.append(self.layer)
        if self.after is not None:
            parts.append(f"{a}.stamp >= %s")
            params.append(self.after)
        if self.before is not None:
            parts.append(f"{a}.stamp <= %s")
            params.append(self.before)
        if self.episode is not None:
            parts.append(f"{a}.episode_id = %s")
            params.append(self.episode)
        if self.center is not None:
            within = "ST_3DDWithin" if self.three_d else "ST_DWithin"
            parts.append(f"{within}({a}.position, ST_MakePoint(%s, %s, %s), %s)")
            params += [*self.center, self.radius]
        return " AND ".join(parts), params


@dataclass
class TextHit:
    """A text's sightings by one robot in one layer (within the scope)."""

    text_id: int
    robot: str
    layer: str
    count: int
    exact: bool
    first: float
    last: float
    obs_id: int
    position: Optional[Position] = None
    episode: Optional[int] = None
    distance: Optional[float] = None


@dataclass
class GistRow:
    robot: str
    id: int
    text: str
    center: Optional[Position]
    radius: float
    time_start: float
    time_end: float
    source_count: int
    layers: tuple[str, ...]
    episode: Optional[int]
    similarity: Optional[float] = None


@dataclass
class EntityRow:
    robot: str
    id: int
    name: str
    entity_type: Optional[str]
    position: Optional[Position]
    spread: float
    first_seen: float
    last_seen: float
    sightings: int
    layer: str
    similarity: Optional[float] = None


@dataclass
class Places:
    """Sightings grouped per robot, text, layer and grid cell: what ``locate`` weighs (``PlaceLike``)."""

    robot: np.ndarray
    text_id: np.ndarray
    layer: np.ndarray
    """'robot/layer': a layer is one robot's sensor (its view range, its kind of position)."""
    xyz: np.ndarray
    count: np.ndarray
    first: np.ndarray
    last: np.ndarray
    last_obs: np.ndarray
    weight: np.ndarray
    capped: tuple[tuple[str, int], ...] = ()
    """(robot, text) pairs of which only the newest ``cap`` sightings were read."""

    def subset(self, mask: np.ndarray) -> "Places":
        return Places(self.robot[mask], self.text_id[mask], self.layer[mask], self.xyz[mask], self.count[mask],
                      self.first[mask], self.last[mask], self.last_obs[mask], self.weight[mask])

    def __len__(self) -> int:
        return len(self.count)


def vector_literal(vector: np.ndarray) -> str:
    """pgvector's text form ('[0.1,0.2,...]'): no driver adapter needed."""
    return "[" + ",".join(f"{float(v):.7g}" for v in np.asarray(vector, dtype=np.float32).ravel()) + "]"


def ts_query(tokens: Sequence[str]) -> Optional[str]:
    """An OR ``to_tsquery`` over word tokens (already letters and digits only); ts_rank prefers all words."""
    words = [t for t in tokens if t.isalnum()]
    return " | ".join(words) if words else None


ROBOTS_SQL = "COALESCE(%s::text[], (SELECT array_agg(robot_id) FROM fleet.robots))"
"""The robots a read covers: those given, else every robot of the store (read in the same statement)."""


def _robot_list(robots: Optional[Sequence[str]]) -> Optional[list[str]]:
    return list(robots) if robots else None


def _no_places() -> Places:
    empty = np.empty(0)
    return Places(empty.astype(object), empty.astype(np.int64), empty.astype(object), np.empty((0, 3)),
                  empty, empty, empty, empty.astype(np.int64), empty)


def _summary_filter(text_ids: Sequence[int], robots: Optional[list[str]],
                    layer: Optional[str]) -> tuple[list[str], list[Any]]:
    """WHERE parts and parameters picking the texts (and robots, layer) from a summary table
    (``fleet.sightings`` or ``fleet.places``: both keyed by text, robot and layer)."""
    parts, params = ["text_id = ANY(%s)"], list[Any]([list(text_ids)])
    if robots:
        parts.append("robot_id = ANY(%s)")
        params.append(robots)
    if layer:
        parts.append("layer = %s")
        params.append(layer)
    return parts, params


def _point(x: Any, y: Any, z: Any) -> Optional[Position]:
    if x is None or y is None:
        return None
    return (float(x), float(y), float(z or 0.0))


class FleetReader:
    """One read-only session on a fleet store (autocommit: no transaction is held between calls)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.RLock()
        self._conn: Any = None
        self.info: FleetInfo = self._connect()
        self._body_layers: tuple[float, frozenset[str]] = (-math.inf, frozenset())
        self._names: OrderedDict[int, str] = OrderedDict()
        self._vectors: OrderedDict[int, np.ndarray] = OrderedDict()
        """Texts are content-addressed and never change (a forgotten one is deleted and its id never comes
        back in an answer): names and vectors of the last ``TEXT_MEMO`` texts asked for save a round trip."""

    # ------------------------------------------------------------------ connection
    def _connect(self) -> FleetInfo:
        conn = db.connect(self.url, autocommit=True)
        info = open_fleet(conn, db.redact(self.url))
        for setting in ("SET max_parallel_workers_per_gather = 0", "SET jit = off",  # short reads: no worker
                        "SET hnsw.iterative_scan = relaxed_order", "SET hnsw.ef_search = 40"):  # or JIT start-up
            try:  # pgvector < 0.8 has no iterative scans: filtered searches then read deeper (k grows)
                conn.execute(setting)
            except Exception as exc:
                log.debug("fleet reader: %s failed: %s", setting, exc)
        self._conn = conn
        return info

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read; a dropped connection is reopened once, then reported as unavailable."""
        with self._lock:
            for attempt in (0, 1):
                try:
                    if self._conn is None:
                        self._connect()
                    # binary results: thousands of rows (locate's cells) decode in a third of the time
                    return list(self._conn.cursor(binary=True).execute(sql, params).fetchall())
                except Exception as exc:
                    if not db.is_connection_error(exc):
                        raise
                    self._drop()
                    if attempt:
                        raise FleetUnavailableError(
                            f"lost the fleet store at {db.redact(self.url)}: {str(exc).strip() or exc}") from exc
        return []

    def _drop(self) -> None:
        try:
            if self._conn is not None:
                self._conn.close()
        except Exception:
            pass
        self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    # ------------------------------------------------------------------ robots and layers
    def robots(self) -> list[str]:
        return [r[0] for r in self.rows("SELECT robot_id FROM fleet.robots ORDER BY robot_id")]

    def check_robots(self, robots: Sequence[str]) -> tuple[str, ...]:
        """The robots asked for, each known to the store (else a plain-words error listing the known ones)."""
        known = self.robots()
        unknown = [r for r in robots if r not in known]
        if unknown:
            raise FleetError(f"no robot {', '.join(map(repr, unknown))} in the fleet store; its robots are: "
                             + (", ".join(known) if known else "none yet"))
        return tuple(dict.fromkeys(robots))

    def newest_stamp(self) -> Optional[float]:
        row = self.rows("SELECT max(stamp) FROM fleet.observations")
        return float(row[0][0]) if row and row[0][0] is not None else None

    def layers(self, robots: Optional[Sequence[str]] = None) -> list[str]:
        """Perception layers in the store (only read for notes on empty answers)."""
        where, params = ("robot_id = ANY(%s) AND ", [list(robots)]) if robots else ("", [])
        return [r[0] for r in self.rows(
            f"SELECT DISTINCT layer FROM fleet.observations WHERE {where}source_type <> %s ORDER BY 1",
            (*params, BODY))]

    def body_layers(self) -> frozenset[str]:
        """Layers holding body readings (their gists belong to body_status, not to perception answers)."""
        stamp, layers = self._body_layers
        if time.monotonic() - stamp > BODY_LAYERS_TTL:
            layers = frozenset(r[0] for r in self.rows(
                "SELECT DISTINCT layer FROM fleet.observations WHERE source_type = %s", (BODY,)))
            self._body_layers = (time.monotonic(), layers)
        return layers

    # ------------------------------------------------------------------ texts
    @staticmethod
    def summarised(scope: Scope) -> bool:
        """Whether the summaries (schema v4: per robot, text and layer, whole history) answer this scope:
        no time window, circle or episode (those need the rows themselves)."""
        return not (scope.timed or scope.center is not None or scope.episode is not None)

    @classmethod
    def _sighted(cls, scope: Scope) -> tuple[str, list[Any]]:
        """' AND EXISTS (a sighting of text t in the scope)': from the summary (a primary-key probe) when it
        answers the scope, else from the observations. Texts only body readings or nobody's rows hold
        never take a place among the k nearest."""
        if cls.summarised(scope):
            parts, params = ["s.text_id = t.id"], list[Any]()
            if scope.robots:
                parts.append("s.robot_id = ANY(%s)")
                params.append(list(scope.robots))
            if scope.layer:
                parts.append("s.layer = %s")
                params.append(scope.layer)
            return f" AND EXISTS (SELECT 1 FROM fleet.sightings s WHERE {' AND '.join(parts)})", params
        where, params = scope.observations("o")
        return f" AND EXISTS (SELECT 1 FROM fleet.observations o WHERE o.text_id = t.id AND {where})", params

    def candidates(self, vector: np.ndarray, tokens: Sequence[str], scope: Scope, k: int, texts: bool = True,
                   gists: bool = True) -> tuple[list[tuple[int, float]], list[int], list[GistRow], list[GistRow]]:
        """``similar_texts``, ``keyword_texts``, ``similar_gists`` and ``keyword_gists`` in one statement
        (one round trip instead of four: under load each one waits for the server to be scheduled)."""
        literal = vector_literal(vector)
        query = ts_query(tokens)
        parts: list[str] = []
        params: list[Any] = []
        pad = (", NULL::text, NULL::bigint, NULL::text" + ", NULL::float8" * 6 + ", NULL::integer, NULL::text,"
               " NULL::bigint")  # the gist columns (``_GIST``), typed for UNION ALL
        if texts:
            where, extra = self._sighted(scope)
            parts.append("(SELECT 1, t.id, 1 - (t.embedding <=> %s::vector)" + pad + " FROM fleet.texts t WHERE"
                         f" t.embedding IS NOT NULL{where} ORDER BY t.embedding <=> %s::vector LIMIT %s)")
            params += [literal, *extra, literal, k]
            if query is not None:
                parts.append("(SELECT 2, t.id, NULL::float8" + pad + " FROM (SELECT id, tsv FROM fleet.texts WHERE"
                             f" tsv @@ to_tsquery('english', %s) LIMIT %s) t WHERE true{where} ORDER BY"
                             " ts_rank_cd(t.tsv, to_tsquery('english', %s)) DESC, t.id DESC LIMIT %s)")
                params += [query, KEYWORD_MATCHES, *extra, query, k]
        if gists:
            where, extra = self._gist_where(scope)
            parts.append(f"(SELECT 3, NULL::bigint, 1 - (g.embedding <=> %s::vector), {self._GIST} FROM fleet.gists g"
                         f" WHERE g.embedding IS NOT NULL AND {where} ORDER BY g.embedding <=> %s::vector LIMIT %s)")
            params += [literal, *extra, literal, k]
            if query is not None:
                parts.append(f"(SELECT 4, NULL::bigint, NULL::float8, {self._GIST} FROM fleet.gists g WHERE g.tsv @@"
                             f" to_tsquery('english', %s) AND {where} ORDER BY ts_rank_cd(g.tsv,"
                             " to_tsquery('english', %s)) DESC LIMIT %s)")
                params += [query, *extra, query, k]
        similar: list[tuple[int, float]] = []
        keyword: list[int] = []
        similar_gists: list[GistRow] = []
        keyword_gists: list[GistRow] = []
        if parts:
            for row in self.rows(" UNION ALL ".join(parts), params):
                if row[0] == 1:
                    similar.append((int(row[1]), float(row[2])))
                elif row[0] == 2:
                    keyword.append(int(row[1]))
                elif row[0] == 3:
                    similar_gists.append(self._gist(row[3:], float(row[2])))
                else:
                    keyword_gists.append(self._gist(row[3:]))
        similar.sort(key=lambda item: -item[1])  # relaxed order: iterative scans may return near-ties swapped
        similar_gists.sort(key=lambda g: -(g.similarity or 0.0))
        return similar, keyword, similar_gists, keyword_gists

    def similar_texts(self, vector: np.ndarray, scope: Scope, k: int) -> list[tuple[int, float]]:
        """(text id, cosine) of the k texts nearest in meaning with a sighting in the scope, best first."""
        where, params = self._sighted(scope)
        literal = vector_literal(vector)
        found = self.rows(
            "SELECT t.id, 1 - (t.embedding <=> %s::vector) FROM fleet.texts t WHERE t.embedding IS NOT NULL"
            f"{where} ORDER BY t.embedding <=> %s::vector LIMIT %s", (literal, *params, literal, k))
        out = [(int(t), float(s)) for t, s in found]
        out.sort(key=lambda item: -item[1])  # relaxed order: iterative scans may return near-ties swapped
        return out

    def keyword_texts(self, tokens: Sequence[str], scope: Scope, k: int) -> list[int]:
        """Texts holding query words (best ``ts_rank_cd`` first) with a sighting in the scope."""
        query = ts_query(tokens)
        if query is None:
            return []
        where, params = self._sighted(scope)
        return [int(r[0]) for r in self.rows(
            "SELECT t.id FROM (SELECT id, tsv FROM fleet.texts WHERE tsv @@ to_tsquery('english', %s) LIMIT %s) t"
            f" WHERE true{where} ORDER BY ts_rank_cd(t.tsv, to_tsquery('english', %s)) DESC, t.id DESC LIMIT %s",
            (query, KEYWORD_MATCHES, *params, query, k))]

    def text_vectors(self, ids: Sequence[int]) -> dict[int, np.ndarray]:
        rows = self.rows("SELECT id, embedding::text FROM fleet.texts WHERE id = ANY(%s) AND embedding IS NOT NULL",
                         (list(ids),))
        return {int(i): np.asarray(json.loads(v), dtype=np.float32) for i, v in rows}

    def texts(self, ids: Sequence[int]) -> tuple[dict[int, str], dict[int, np.ndarray]]:
        """Names and vectors of texts, in one read (none for those remembered from earlier calls)."""
        wanted = list(dict.fromkeys(int(i) for i in ids))
        missing = [i for i in wanted if i not in self._vectors or i not in self._names]
        if missing:
            for i, text, vector in self.rows("SELECT id, text, embedding::text FROM fleet.texts WHERE id = ANY(%s)",
                                             (missing,)):
                self._remember(self._names, int(i), text)
                if vector is not None:  # a text's vector may still arrive (an embedder outage): not remembered
                    self._remember(self._vectors, int(i), np.asarray(json.loads(vector), dtype=np.float32))
        names = {i: self._names[i] for i in wanted if i in self._names}
        vectors = {i: self._vectors[i] for i in wanted if i in self._vectors}
        return names, vectors

    def names(self, ids: Sequence[int]) -> dict[int, str]:
        if not ids:
            return {}
        wanted = list(dict.fromkeys(int(i) for i in ids))
        missing = [i for i in wanted if i not in self._names]
        if missing:
            for i, t in self.rows("SELECT id, text FROM fleet.texts WHERE id = ANY(%s)", (missing,)):
                self._remember(self._names, int(i), t)
        return {i: self._names[i] for i in wanted if i in self._names}

    def _remember(self, memo: "OrderedDict[int, Any]", key: int, value: Any) -> None:
        with self._lock:
            memo[key] = value
            memo.move_to_end(key)
            while len(memo) > TEXT_MEMO:
                memo.popitem(last=False)

    # ------------------------------------------------------------------ sightings
    def sightings(self, text_ids: Sequence[int], scope: Scope, cap: int,
                  robots: Optional[Sequence[str]] = None) -> list[TextHit]:
        """Each robot's sightings of each text in the scope: count, first, last and the newest one.

        Without a layer, circle or episode filter the counts come from the
        index ``(robot_id, text_id, stamp)`` alone (an index-only count, up to
        ``COUNT_CAP``; the first sighting is the index's first entry), so a
        text seen a hundred thousand times costs a bounded read per robot;
        with one, the newest ``cap`` matching rows are
        read per robot (and each layer is its own hit). Counts beyond either
        cap are lower bounds.
        """
        if not text_ids:
            return []
        fleet_robots = _robot_list(robots or scope.robots)
        if self.summarised(scope):
            return self._sightings_summary(text_ids, fleet_robots, scope.layer)
        if scope.layer or scope.center is not None or scope.episode is not None:
            hits = self._sightings_read(text_ids, fleet_robots, scope, cap)
        else:
            hits = self._sightings_counted(text_ids, fleet_robots, scope)
        self.fill(hits)
        return hits

    def _sightings_summary(self, text_ids: Sequence[int], robots: Optional[list[str]],
                           layer: Optional[str]) -> list[TextHit]:
        """Each robot's and layer's whole-history sightings of the texts, from ``fleet.sightings``: exact
        counts and the newest sighting's place in one primary-key read, however often a text was seen."""
        parts, params = _summary_filter(text_ids, robots, layer)
        rows = self.rows(
            "SELECT text_id, robot_id, layer, count, first_stamp, last_stamp, last_obs_id, ST_X(last_position),"
            f" ST_Y(last_position), ST_Z(last_position), last_episode FROM fleet.sightings WHERE {' AND '.join(parts)}",
            params)
        return [TextHit(int(tid), rid, lay, int(n), True, float(first), float(last), int(obs), _point(x, y, z),
                        int(episode) if episode is not None else None)
                for tid, rid, lay, n, first, last, obs, x, y, z, episode in rows]

    def _sightings_counted(self, text_ids: Sequence[int], robots: Optional[list[str]], scope: Scope) -> list[TextHit]:
        where, params = scope.observations("o", robots=False)
        window, window_params = "", list[Any]()
        if scope.after is not None:
            window += " AND c.stamp >= %s"
            window_params.append(scope.after)
        if scope.before is not None:
            window += " AND c.stamp <= %s"
            window_params.append(scope.before)
        rows = self.rows(
            "SELECT t.tid, r.rid, n.layer, k.n, f.first, n.stamp, n.id"
            " FROM unnest(%s::bigint[]) t(tid) CROSS JOIN unnest(" + ROBOTS_SQL + ") r(rid) CROSS JOIN LATERAL ("
            "  SELECT o.id, o.layer, o.stamp FROM fleet.observations o"
            f"  WHERE o.robot_id = r.rid AND o.text_id = t.tid AND {where} ORDER BY o.stamp DESC LIMIT 1) n"
            " CROSS JOIN LATERAL (SELECT count(*) AS n FROM (SELECT 1"
            "  FROM fleet.observations c WHERE c.robot_id = r.rid AND c.text_id = t.tid"
            f"{window} LIMIT %s) x) k"
            " CROSS JOIN LATERAL (SELECT min(c.stamp) AS first FROM fleet.observations c"
            f"  WHERE c.robot_id = r.rid AND c.text_id = t.tid{window}) f",
            (list(text_ids), robots, *params, *window_params, COUNT_CAP + 1, *window_params))
        return [TextHit(int(tid), rid, layer, min(int(n), COUNT_CAP), int(n) <= COUNT_CAP, float(first),
                        float(last), int(obs_id)) for tid, rid, layer, n, first, last, obs_id in rows]

    def _sightings_read(self, text_ids: Sequence[int], robots: Optional[list[str]], scope: Scope, cap: int) -> list[TextHit]:
        where, params = scope.observations("o", robots=False)
        rows = self.rows(
            "SELECT t.tid, r.rid, s.layer, count(*), min(s.stamp), max(s.stamp),"
            " max(s.id)"
            " FROM unnest(%s::bigint[]) t(tid) CROSS JOIN unnest(" + ROBOTS_SQL + ") r(rid) CROSS JOIN LATERAL ("
            "  SELECT o.id, o.layer, o.stamp FROM fleet.observations o"
            f"  WHERE o.robot_id = r.rid AND o.text_id = t.tid AND {where}"
            "  ORDER BY o.stamp DESC LIMIT %s) s"
            " GROUP BY t.tid, r.rid, s.layer", (list(text_ids), robots, *params, cap + 1))
        hits = [TextHit(int(tid), rid, layer, int(count), True, float(first), float(last), int(obs_id))
                for tid, rid, layer, count, first, last, obs_id in rows]
        # A (text, robot) whose read reached cap + 1 rows has more: its counts are lower bounds.
        totals: dict[tuple[int, str], int] = {}
        for h in hits:
            totals[(h.text_id, h.robot)] = totals.get((h.text_id, h.robot), 0) + h.count
        for h in hits:
            if totals[(h.text_id, h.robot)] > cap:
                h.exact = False
        return hits

    def fill(self, hits: Sequence[TextHit], position: bool = True) -> None:
        """Position (unless ``position`` is False) and episode of each hit's newest observation, in one read."""
        if not hits:
            return
        rows = self.rows(
            "SELECT k.r, k.i, o.x, o.y, o.z, o.episode_id FROM unnest(%s::text[], %s::bigint[]) k(r, i)"
            " CROSS JOIN LATERAL (SELECT ST_X(position) x, ST_Y(position) y, ST_Z(position) z, episode_id"
            "  FROM fleet.observations WHERE robot_id = k.r AND id = k.i LIMIT 1) o",
            ([h.robot for h in hits], [h.obs_id for h in hits]))
        found = {(r[0], int(r[1])): r[2:] for r in rows}
        for h in hits:
            detail = found.get((h.robot, h.obs_id))
            if detail is not None:
                if position:
                    h.position = _point(*detail[:3])
                h.episode = int(detail[3]) if detail[3] is not None else None

    def nearby(self, scope: Scope, limit: int) -> tuple[list[TextHit], bool]:
        """Things seen in the scope's circle (the ``limit`` nearest sightings), per robot, text and layer.

        Returns the groups (centroid of their sightings in the circle, nearest
        first) and whether the circle held more sightings than were read.
        """
        assert scope.center is not None
        where, params = scope.observations("o")
        cx, cy, cz = scope.center
        rows = self.rows(
            "SELECT s.robot_id, s.text_id, s.layer, count(*), min(s.stamp), max(s.stamp), avg(s.x), avg(s.y),"
            " avg(s.z), max(s.id), NULL"
            " FROM (SELECT o.robot_id, o.text_id, o.layer, o.stamp, o.id, o.episode_id, ST_X(o.position) x,"
            "  ST_Y(o.position) y, COALESCE(ST_Z(o.position), 0) z"
            f"  FROM fleet.observations o WHERE {where}"
            "  ORDER BY o.position <-> ST_MakePoint(%s, %s, %s) LIMIT %s) s"
            " GROUP BY s.robot_id, s.text_id, s.layer", (*params, cx, cy, cz, limit + 1))
        more = sum(int(r[3]) for r in rows) > limit
        hits = []
        for rid, tid, layer, count, first, last, x, y, z, obs_id, episode in rows:
            position = (float(x), float(y), float(z))
            d = math.dist(position if scope.three_d else position[:2], scope.center if scope.three_d
                          else scope.center[:2])
            hits.append(TextHit(int(tid), rid, layer, int(count), not more, float(first), float(last), int(obs_id),
                                position, int(episode) if episode is not None else None, d))
        hits.sort(key=lambda h: (h.distance or 0.0, -h.last))
        return hits, more

    def window(self, scope: Scope, newest: bool, limit: int,
               cursor: Optional[tuple[float, str, int]]) -> list[tuple[str, int, int, float]]:
        """(robot, obs id, text id, stamp) in the scope, newest (or oldest) first, after ``cursor``."""
        where, params = scope.observations("o")
        direction, cmp = ("DESC", "<") if newest else ("ASC", ">")
        page, page_params = "", []
        if cursor is not None:
            page = f" AND (o.stamp, o.robot_id, o.id) {cmp} (%s, %s, %s)"
            page_params = list(cursor)
        return [(r[0], int(r[1]), int(r[2]), float(r[3])) for r in self.rows(
            f"SELECT o.robot_id, o.id, o.text_id, o.stamp FROM fleet.observations o WHERE {where}{page}"
            f" ORDER BY o.stamp {direction}, o.robot_id {direction}, o.id {direction} LIMIT %s",
            (*params, *page_params, limit))]

    def places(self, text_ids: Sequence[int], scope: Scope, cap: int, cell: float,
               robots: Optional[Sequence[str]] = None, relevance: Optional[dict[int, float]] = None,
               halflife: float = 3600.0, limit: Optional[int] = None) -> Places:
        """Each robot's positioned sightings of the texts, grouped in ``cell``-metre cells in the fleet frame.

        Without a time window: every sighting, from the summary ``fleet.places`` (kept by the sync); with
        ``relevance`` (text -> weight) and ``limit``, only the ``limit`` heaviest cells (relevance x
        (1 + ln count) x 2^-(newest sighting of the text - last here) / ``halflife``: locate's own weight)
        leave the server. With a time window: each robot's newest ``cap`` sightings in the window, read from
        the observations."""
        fleet_robots = _robot_list(robots or scope.robots)
        if not text_ids:
            return _no_places()
        if self.summarised(scope) and math.isclose(cell, self.info.place_cell):
            return self._as_places(self._places_summary(text_ids, fleet_robots, scope.layer, relevance, halflife,
                                                        limit), cap=None)
        where, params = scope.observations("o", robots=False)
        rows = self.rows(
            "SELECT r.rid, t.tid, s.layer, count(*), sum(s.x), sum(s.y), sum(s.z), min(s.stamp), max(s.stamp),"
            " max(s.id)"
            " FROM unnest(%s::bigint[]) t(tid) CROSS JOIN unnest(" + ROBOTS_SQL + ") r(rid) CROSS JOIN LATERAL ("
            "  SELECT o.id, o.layer, o.stamp, ST_X(o.position) x, ST_Y(o.position) y,"
            "   COALESCE(ST_Z(o.position), 0) z FROM fleet.observations o"
            f"  WHERE o.robot_id = r.rid AND o.text_id = t.tid AND o.position IS NOT NULL AND {where}"
            "  ORDER BY o.stamp DESC LIMIT %s) s"
            " GROUP BY r.rid, t.tid, s.layer, floor(s.x / %s), floor(s.y / %s)",
            (list(text_ids), fleet_robots, *params, cap, cell, cell))
        return self._as_places(list(zip(*rows)) if rows else [], cap)

    def _places_summary(self, text_ids: Sequence[int], robots: Optional[list[str]], layer: Optional[str],
                        relevance: Optional[dict[int, float]], halflife: float, limit: Optional[int]) -> list[Any]:
        """Whole-history grid cells of the texts from ``fleet.places`` (what the robot's place cache holds),
        as columns; with ``relevance`` and ``limit`` only the ``limit`` heaviest leave the server."""
        parts, params = _summary_filter(text_ids, robots, layer)
        columns = "robot_id, text_id, layer, count, sx, sy, sz, first_stamp, last_stamp, last_obs_id"
        sql = f"SELECT {columns} FROM fleet.places WHERE {' AND '.join(parts)}"
        if relevance and limit:  # newest sighting per text from the other summary: no window over the cells
            newest = ["s.text_id = w.tid"] + [part.replace("text_id", "s.text_id").replace("robot_id", "s.robot_id")
                                              .replace("layer", "s.layer") for part in parts[1:]]
            sql = ("WITH w AS MATERIALIZED (SELECT w.tid, w.rel, (SELECT max(s.last_stamp) FROM fleet.sightings s"
                   f"  WHERE {' AND '.join(newest)}) AS newest FROM unnest(%s::bigint[], %s::float8[]) w(tid, rel))"
                   f" SELECT {', '.join('p.' + c.strip() for c in columns.split(','))} FROM fleet.places p"
                   f" JOIN w ON w.tid = p.text_id WHERE {' AND '.join('p.' + part for part in parts)}"
                   " ORDER BY w.rel * (1 + ln(p.count)) * power(0.5, (w.newest - p.last_stamp) / %s) DESC LIMIT %s")
            params = [*params[1:], list(relevance), [float(v) for v in relevance.values()], *params,
                      max(halflife, 1e-9), limit]
        rows = self.rows(sql, params)
        return list(zip(*rows)) if rows else []

    @staticmethod
    def _as_places(cols: list[Any], cap: Optional[int]) -> Places:
        """Columns (robot, text, layer, count, sx, sy, sz, first, last, last obs) as arrays; with ``cap``, the
        (robot, text) pairs whose read stopped at ``cap`` sightings are listed as capped."""
        if not cols or not len(cols[0]):
            return _no_places()
        count = np.asarray(cols[3], dtype=np.float64)
        xyz = np.column_stack([np.asarray(cols[i], dtype=np.float64) / count for i in (4, 5, 6)])
        robot = np.asarray(cols[0], dtype=object)
        layer = np.asarray([f"{r}/{layer}" for r, layer in zip(cols[0], cols[2])], dtype=object)
        capped: tuple[tuple[str, int], ...] = ()
        if cap is not None:
            per_pair: dict[tuple[str, int], int] = {}
            for r, t, n in zip(cols[0], cols[1], cols[3]):
                per_pair[(r, int(t))] = per_pair.get((r, int(t)), 0) + int(n)
            capped = tuple(sorted(pair for pair, n in per_pair.items() if n >= cap))
        return Places(robot, np.asarray(cols[1], dtype=np.int64), layer, xyz, count,
                      np.asarray(cols[7], dtype=np.float64), np.asarray(cols[8], dtype=np.float64),
                      np.asarray(cols[9], dtype=np.int64), np.ones(len(count)), capped)

    def metadata(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
        """Parsed metadata of a few observations (what a layer's positions mean)."""
        if not keys:
            return {}
        rows = self.rows(
            "SELECT k.r, k.i, o.metadata FROM unnest(%s::text[], %s::bigint[]) k(r, i) CROSS JOIN LATERAL"
            " (SELECT metadata FROM fleet.observations WHERE robot_id = k.r AND id = k.i LIMIT 1) o",
            ([k[0] for k in keys], [k[1] for k in keys]))
        out: dict[tuple[str, int], dict[str, Any]] = {}
        for rid, oid, meta in rows:
            try:
                parsed = json.loads(meta) if meta else {}
            except ValueError:
                parsed = {}
            out[(rid, int(oid))] = parsed if isinstance(parsed, dict) else {}
        return out

    # ------------------------------------------------------------------ gists and entities
    _GIST = ("g.robot_id, g.id, g.text, ST_X(g.center), ST_Y(g.center), ST_Z(g.center), g.radius, g.time_start,"
             " g.time_end, g.source_count, g.layers::text, g.episode_id")

    def _gist_where(self, scope: Scope) -> tuple[str, list[Any]]:
        parts, params = ["true"], list[Any]()
        if scope.robots:
            parts.append("g.robot_id = ANY(%s)")
            params.append(list(scope.robots))
        if scope.after is not None:
            parts.append("g.time_end >= %s")
            params.append(scope.after)
        if scope.before is not None:
            parts.append("g.time_start <= %s")
            params.append(scope.before)
        if scope.episode is not None:
            parts.append("g.episode_id = %s")
            params.append(scope.episode)
        if scope.layer:
            parts.append("g.layers ? %s")
            params.append(scope.layer)
        if scope.center is not None:
            parts.append("g.center IS NOT NULL AND ST_Distance(g.center, ST_MakePoint(%s, %s, %s)) <= %s + g.radius")
            params += [*scope.center, scope.radius]
        body = sorted(self.body_layers())
        if body:  # a summary of body readings only belongs to body_status
            parts.append("NOT (jsonb_array_length(g.layers) > 0 AND g.layers <@ %s::jsonb)")
            params.append(json.dumps(body))
        return " AND ".join(parts), params

    @staticmethod
    def _gist(row: tuple[Any, ...], similarity: Optional[float] = None) -> GistRow:
        layers = tuple(str(x) for x in json.loads(row[10] or "[]"))
        return GistRow(row[0], int(row[1]), row[2], _point(*row[3:6]), float(row[6] or 0.0), float(row[7]),
                       float(row[8]), int(row[9]), layers, int(row[11]) if row[11] is not None else None, similarity)

    def similar_gists(self, vector: np.ndarray, scope: Scope, k: int) -> list[GistRow]:
        where, params = self._gist_where(scope)
        literal = vector_literal(vector)
        rows = self.rows(f"SELECT {self._GIST}, 1 - (g.embedding <=> %s::vector) FROM fleet.gists g"
                         f" WHERE g.embedding IS NOT NULL AND {where} ORDER BY g.embedding <=> %s::vector LIMIT %s",
                         (literal, *params, literal, k))
        out = [self._gist(r[:12], float(r[12])) for r in rows]
        out.sort(key=lambda g: -(g.similarity or 0.0))
        return out

    def keyword_gists(self, tokens: Sequence[str], scope: Scope, k: int) -> list[GistRow]:
        query = ts_query(tokens)
        if query is None:
            return []
        where, params = self._gist_where(scope)
        rows = self.rows(f"SELECT {self._GIST} FROM fleet.gists g WHERE g.tsv @@ to_tsquery('english', %s)"
                         f" AND {where} ORDER BY ts_rank_cd(g.tsv, to_tsquery('english', %s)) DESC LIMIT %s",
                         (query, *params, query, k))
        return [self._gist(r) for r in rows]

    def gists_by_time(self, scope: Scope, k: int, newest: bool = True) -> list[GistRow]:
        where, params = self._gist_where(scope)
        rows = self.rows(f"SELECT {self._GIST} FROM fleet.gists g WHERE {where}"
                         f" ORDER BY g.time_end {'DESC' if newest else 'ASC'} LIMIT %s", (*params, k))
        return [self._gist(r) for r in rows]

    def gist_count(self) -> int:
        return int(self.rows("SELECT count(*) FROM fleet.gists")[0][0])

    _ENTITY = ("e.robot_id, e.id, e.name, e.entity_type, ST_X(e.position), ST_Y(e.position), ST_Z(e.position),"
               " e.spread, e.first_seen, e.last_seen, e.sightings, e.layer")

    @staticmethod
    def _entity(row: tuple[Any, ...], similarity: Optional[float] = None) -> EntityRow:
        return EntityRow(row[0], int(row[1]), row[2], row[3], _point(*row[4:7]), float(row[7] or 0.0),
                         float(row[8]), float(row[9]), int(row[10]), row[11], similarity)

    def entities(self, robots: Optional[Sequence[str]], center: Optional[Position], radius: Optional[float],
                 k: int, name: Optional[str] = None, entity_type: Optional[str] = None,
                 after: Optional[float] = None, vector: Optional[np.ndarray] = None) -> list[EntityRow]:
        """Entities by part of the name (or, with ``vector``, by meaning), type, circle and recency."""
        parts, params = ["true"], list[Any]()
        if robots:
            parts.append("e.robot_id = ANY(%s)")
            params.append(list(robots))
        if entity_type:
            parts.append("lower(e.entity_type) = lower(%s)")
            params.append(entity_type)
        if after is not None:
            parts.append("e.last_seen >= %s")
            params.append(after)
        if center is not None:
            parts.append("ST_DWithin(e.position, ST_MakePoint(%s, %s, %s), %s)")
            params += [*center, radius]
        where = " AND ".join(parts)
        if vector is not None:
            literal = vector_literal(vector)
            rows = self.rows(f"SELECT {self._ENTITY}, 1 - (e.embedding <=> %s::vector) FROM fleet.entities e"
                             f" WHERE e.embedding IS NOT NULL AND {where} ORDER BY e.embedding <=> %s::vector"
                             " LIMIT %s", (literal, *params, literal, k))
            return [self._entity(r[:12], float(r[12])) for r in rows]
        if name:
            pattern = "%" + name.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            parts.append("e.name ILIKE %s")
            params.append(pattern)
            where = " AND ".join(parts)
        order = "e.last_seen DESC, e.sightings DESC"
        if center is not None:
            order = "e.position <-> ST_MakePoint(%s, %s, %s), " + order
            params_order: list[Any] = list(center)
        else:
            params_order = []
        rows = self.rows(f"SELECT {self._ENTITY} FROM fleet.entities e WHERE {where} ORDER BY {order} LIMIT %s",
                         (*params, *params_order, k))
        return [self._entity(r) for r in rows]

    # ------------------------------------------------------------------ episodes
    _EPISODE = ("e.robot_id, e.id, e.name, e.status, e.start, e.\"end\", e.parent_id, e.summary, e.goal, e.result,"
                " e.reflection, e.success")

    def episodes(self, robots: Optional[Sequence[str]], k: int, number: Optional[int] = None,
                 name: Optional[str] = None) -> list[tuple[Any, ...]]:
        """Episode rows (robot, id, name, status, start, end, parent, summary, goal, result, reflection, success),
        newest first."""
        parts, params = ["true"], list[Any]()
        if robots:
            parts.append("e.robot_id = ANY(%s)")
            params.append(list(robots))
        if number is not None:
            parts.append("e.id = %s")
            params.append(number)
        if name:
            parts.append("e.name ILIKE %s")
            params.append("%" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        return self.rows(f"SELECT {self._EPISODE} FROM fleet.episodes e WHERE {' AND '.join(parts)}"
                         " ORDER BY e.start DESC, e.robot_id LIMIT %s", (*params, k))

    def episode_contents(self, robot: str, number: int, top: int,
                         gists: int) -> tuple[int, list[tuple[str, int]], list[GistRow], list[tuple[int, str]]]:
        """An episode's observation count, most seen texts, first gists and subtasks."""
        count = int(self.rows("SELECT count(*) FROM (SELECT 1 FROM fleet.observations WHERE robot_id = %s AND"
                              " episode_id = %s AND source_type <> %s LIMIT %s) x",
                              (robot, number, BODY, COUNT_CAP))[0][0])
        most = [(t, int(c)) for t, c in self.rows(
            "SELECT t.text, x.c FROM (SELECT text_id, count(*) AS c FROM fleet.observations WHERE robot_id = %s"
            " AND episode_id = %s AND source_type <> %s AND text_id IS NOT NULL GROUP BY text_id"
            " ORDER BY c DESC, text_id LIMIT %s) x JOIN fleet.texts t ON t.id = x.text_id ORDER BY x.c DESC",
            (robot, number, BODY, top))]
        found = [self._gist(r) for r in self.rows(
            f"SELECT {self._GIST} FROM fleet.gists g WHERE g.robot_id = %s AND g.episode_id = %s"
            " ORDER BY g.time_start LIMIT %s", (robot, number, gists))]
        subtasks = [(int(i), n) for i, n in self.rows(
            "SELECT id, name FROM fleet.episodes WHERE robot_id = %s AND parent_id = %s ORDER BY start, id",
            (robot, number))]
        return count, most, found, subtasks

    def entity_count(self) -> int:
        return int(self.rows("SELECT count(*) FROM fleet.entities")[0][0])
