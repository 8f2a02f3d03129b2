"""``FleetReads``: what the tool runners read (``tools.reads.ToolReads``), from a fleet store in PostgreSQL.

The runners are the robot's own (``fleet.tools.bind``); these reads answer
them through ``FleetReader``'s SQL for the robots of one call
(``FleetEnv.chosen``). Hits say which robot saw them:
``[robot2/detections] "pallet 4711"``. Positions are in the fleet frame
(each robot's map placed by its ``emem fleet add-robot`` transform).

What differs from one robot's answer, and why:

- a thing seen by two robots is one hit per robot (each with its own count,
  last sighting and place): "who saw it last" is the question a fleet asks;
- counts are exact (the ``sightings`` summary); with a time window, place or
  episode filter the newest ``CAP`` rows per robot are read and a count
  beyond is a lower bound ("1000+"); locate weighs the ``READ_PLACES``
  heaviest whole-history cells (the ``places`` summary), or with a time
  window each robot's newest ``LOCATE_CAP`` sightings in it;
- locate merges every robot's sightings in the fleet frame (measured object
  positions and robot poses); camera bearings (rays) are not used over the
  fleet (they are stored in each robot's own frame, in its metadata);
- episode ids are per robot: ``episode_id`` needs exactly one robot in ``robots``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

import numpy as np

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.types import NodeKind, Position, make_id, rounded
from emem_ros.fleet import one_robot
from emem_ros.fleet.env import FleetEnv
from emem_ros.fleet.reader import GistRow, Places, Scope, TextHit
from emem_ros.geometry.rays import DEFAULT_VIEW_RANGE
from emem_ros.geometry.uncertainty import COVERAGE
from emem_ros.tools import placement as placing
from emem_ros.tools.filters import Filters
from emem_ros.tools.hybrid import MAX_FUSED, query_tokens, recency_factor, rrf
from emem_ros.tools.results import EpisodeReport, Hit, LocateResult, PlaceCluster, fmt_time

CAP = 1000
"""Sightings read per robot and text at most (newest first) when a filter needs each row."""
LOCATE_CAP = 100
"""Sightings per robot and text that locate weighs at most (the newest: where it is now)."""
TEXT_BATCH = 1
"""Ranked texts whose sightings are read first (a text seen by ten robots fills ten hits); doubling after."""
NEARBY_ROWS = 1500
"""Sightings read nearest first around a point at most."""
SCAN_CHUNK = 512
SCAN_LIMIT = 8192
TEMPERATURE = 0.05
MIN_RELEVANCE = 0.01
MAX_PLACES = 2000
READ_PLACES = 500
"""Grid cells locate reads at most, the heaviest first (its own weight, computed by the server): whole-history
cells of ten robots are thousands, and the light ones cannot move the answer."""
OTHER_PLACES = 4
CELL = 0.5
"""Metres: sightings are grouped in cells of this size before locate weighs them (the robot's own grid)."""
SAMPLE_PER_LAYER = 4


# ---------------------------------------------------------------------- hits
def _text_hit(h: TextHit, name: str, score: Optional[float] = None, similarity: Optional[float] = None) -> Hit:
    return Hit(id=make_id(NodeKind.OBSERVATION, h.obs_id), kind="observation", text=name, layer=h.layer,
               position=rounded(h.position) if h.position is not None else None, stamp=h.last,
               first_stamp=h.first, score=score, similarity=similarity,
               episode_id=make_id(NodeKind.EPISODE, h.episode) if h.episode is not None else None,
               count=h.count, count_is_lower_bound=not h.exact,
               distance=round(h.distance, 6) if h.distance is not None else None, robot=h.robot)


def _gist_hit(g: GistRow, score: Optional[float] = None, center: Any = None) -> Hit:
    distance = None
    if center is not None and g.center is not None:
        distance = math.hypot(g.center[0] - center[0], g.center[1] - center[1])
    return Hit(id=make_id(NodeKind.GIST, g.id), kind="gist", text=g.text, position=g.center, stamp=g.time_end,
               first_stamp=g.time_start, score=score, similarity=g.similarity,
               episode_id=make_id(NodeKind.EPISODE, g.episode) if g.episode is not None else None,
               count=g.source_count, radius=g.radius, layers=g.layers, distance=distance, robot=g.robot)


def _group(hits: list[TextHit]) -> dict[int, list[TextHit]]:
    out: dict[int, list[TextHit]] = {}
    for h in hits:
        out.setdefault(h.text_id, []).append(h)
    for group in out.values():
        group.sort(key=lambda h: -h.last)  # the robot that saw it last first
    return out


# ---------------------------------------------------------------------- ranking
def _rank(env: FleetEnv, query: str, scope: Scope, want: int, texts: bool = True,
          gists: bool = True) -> tuple[list[tuple[Any, float, Optional[float]]], dict[tuple[str, int], GistRow]]:
    """(key, fused score, cosine) best first: ('text', id) and ('gist', (robot, id)), by RRF of both lists."""
    vector = env.vector(query)
    tokens = query_tokens(query)
    floor = env.config.similarity_floor
    vector_list: list[tuple[object, float]] = []
    keyword: list[list[object]] = []
    similar, keyword_ids, similar_gists, words = env.reader.candidates(vector, tokens, scope, want, texts, gists)
    if texts:
        vector_list += [(("text", t), s) for t, s in similar if s >= floor]
        keyword.append([("text", t) for t in keyword_ids])
    found: dict[tuple[str, int], GistRow] = {}
    if gists:
        for g in similar_gists:
            if g.similarity is not None and g.similarity >= floor:
                found[(g.robot, g.id)] = g
                vector_list.append((("gist", (g.robot, g.id)), g.similarity))
        for g in words:
            found.setdefault((g.robot, g.id), g)
        keyword.append([("gist", (g.robot, g.id)) for g in words])
    vector_list.sort(key=lambda item: -item[1])
    interleaved: list[object] = []
    for rank in range(max((len(k) for k in keyword), default=0)):
        interleaved += [k[rank] for k in keyword if rank < len(k)]
    fused = rrf(vector_list, interleaved)
    ranked = sorted(((key, f.score / MAX_FUSED, f.similarity) for key, f in fused.items()),
                    key=lambda item: (-item[1], -(item[2] or 0.0), str(item[0])))
    return ranked, found


def _recency(env: FleetEnv, stamp: Optional[float], now: float) -> float:
    return recency_factor(stamp, now, env.config.recency_weight, env.config.recency_halflife)


def ranked_hits(env: FleetEnv, query: str, scope: Scope, n: int, now: float, gists: bool = True) -> list[Hit]:
    """Texts (one hit per robot and layer that saw them) and gists, fused by RRF, best first."""
    ranked, found = _rank(env, query, scope, n + max(5, n // 2), gists=gists)
    chosen = ranked[: n + 3]
    text_ids = [key[1] for key, _, _ in chosen if key[0] == "text"]
    groups: dict[int, list[TextHit]] = {}
    read, size = 0, TEXT_BATCH
    while read < len(text_ids):  # in rank order, only as many texts as the answer needs
        batch = text_ids[read: read + size]
        groups.update(_group(env.reader.sightings(batch, scope, CAP)))
        read, size = read + len(batch), size * 2
        if env.config.recency_weight <= 0 and _enough(chosen, groups, text_ids[read:], n):
            break
    names = env.reader.names([t for t in text_ids[:read] if t in groups])
    scored: list[tuple[float, int, list[Hit]]] = []
    for order, (key, score, sim) in enumerate(chosen):
        if key[0] == "gist":
            g = found[key[1]]
            s = score * _recency(env, g.time_end, now)
            scored.append((s, order, [_gist_hit(g, round(s, 4))]))
        elif key[1] in groups:
            group = groups[key[1]]
            s = score * _recency(env, group[0].last, now)
            scored.append((s, order, [_text_hit(h, names.get(key[1], ""), round(s, 4), sim) for h in group]))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [hit for _, _, hits in scored for hit in hits][:n]


# ---------------------------------------------------------------------- semantic search
def _enough(chosen: list[tuple[Any, float, Optional[float]]], groups: dict[int, list[TextHit]],
            unread: list[int], n: int) -> bool:
    """Whether the hits before the first unread text already fill the answer (ranking has no recency)."""
    pending = set(unread)
    count = 0
    for key, _, _ in chosen:
        if key[0] == "text" and key[1] in pending:
            return False
        count += 1 if key[0] == "gist" else len(groups.get(key[1], ()))
        if count >= n:
            return True
    return True


# ---------------------------------------------------------------------- spatial query
def nearby_hits(env: FleetEnv, scope: Scope, n: int, gists: bool = True) -> list[Hit]:
    found, _more = env.reader.nearby(scope, NEARBY_ROWS)
    found = found[:n]
    env.reader.fill(found, position=False)  # episodes; the place is the centroid of the sightings around
    names = env.reader.names([h.text_id for h in found])
    hits = [_text_hit(h, names.get(h.text_id, "")) for h in found]
    if gists and len(hits) < n:
        hits += [_gist_hit(g, center=scope.center) for g in env.reader.gists_by_time(scope, n - len(hits))]
    return hits


# ---------------------------------------------------------------------- temporal query
def timeline(env: FleetEnv, scope: Scope, n: int, order: str = "newest", gists: bool = True) -> list[Hit]:
    """Distinct things (per robot) seen in the window, by their newest (or first) sighting in it."""
    newest = order == "newest"
    firsts: dict[tuple[str, int], float] = {}
    cursor: Optional[tuple[float, str, int]] = None
    scanned = 0
    while len(firsts) < n and scanned < SCAN_LIMIT:
        rows = env.reader.window(scope, newest, SCAN_CHUNK, cursor)
        for robot, _obs, text_id, stamp in rows:
            firsts.setdefault((robot, text_id), stamp)
            if len(firsts) >= n:
                break
        scanned += len(rows)
        if len(rows) < SCAN_CHUNK:
            break
        cursor = (rows[-1][3], rows[-1][0], rows[-1][1])
    hits: list[Hit] = []
    if firsts:
        robots = sorted({r for r, _ in firsts})
        texts = sorted({t for _, t in firsts})
        groups = [h for h in env.reader.sightings(texts, scope, CAP, robots=robots) if (h.robot, h.text_id) in firsts]
        names = env.reader.names(texts)
        groups.sort(key=(lambda h: -h.last) if newest else (lambda h: h.first))
        hits = [_text_hit(h, names.get(h.text_id, "")) for h in groups]
    if gists and len(hits) < n:
        hits += [_gist_hit(g) for g in env.reader.gists_by_time(scope, n - len(hits), newest)]
    return hits[:n]


# ---------------------------------------------------------------------- gists and entities
def gist_search(env: FleetEnv, scope: Scope, query: str, n: int, now: float) -> list[Hit]:
    ranked, found = _rank(env, query, scope, max(2 * n, 10), texts=False)
    scored = [(score * _recency(env, found[key[1]].time_end, now), found[key[1]]) for key, score, _ in ranked]
    scored.sort(key=lambda item: -item[0])
    return [_gist_hit(g, round(s, 4)) for s, g in scored[:n]]


def entities_near(env: FleetEnv, robots: Optional[tuple[str, ...]], center: Any, radius: Optional[float], n: int,
                  name: Optional[str] = None, entity_type: Optional[str] = None,
                  after: Optional[float] = None) -> list[Hit]:
    rows = env.reader.entities(robots, center, radius, n, name=name, entity_type=entity_type, after=after)
    scores = {(e.robot, e.id): 1.0 for e in rows} if name else {}
    if name and len(rows) < n:
        floor = env.config.similarity_floor
        for e in env.reader.entities(robots, center, radius, n, entity_type=entity_type, after=after,
                                     vector=env.vector(name)):
            if (e.robot, e.id) not in scores and e.similarity is not None and e.similarity >= floor:
                rows.append(e)
                scores[(e.robot, e.id)] = e.similarity
    hits = []
    for e in rows[:n]:
        distance = None
        if center is not None and e.position is not None:
            distance = math.hypot(e.position[0] - center[0], e.position[1] - center[1])
        score = scores.get((e.robot, e.id))
        hits.append(Hit(id=make_id(NodeKind.ENTITY, e.id), kind="entity", text=e.name, layer=e.layer,
                        position=e.position, stamp=e.last_seen, first_stamp=e.first_seen, count=e.sightings,
                        radius=e.spread, entity_type=e.entity_type, distance=distance,
                        score=round(score, 4) if score is not None else None, robot=e.robot))
    if center is not None:
        hits.sort(key=lambda h: h.distance if h.distance is not None else math.inf)
    return hits


# ---------------------------------------------------------------------- locate and recall
@dataclasses.dataclass(frozen=True)
class _LayerKind:
    robot: bool
    view_range: float


def _layer_kinds(env: FleetEnv, places: Places) -> dict[str, _LayerKind]:
    """What each robot's layer's positions mean (the robot's pose, or the thing's), from a few sightings."""
    sample: dict[tuple[str, int], str] = {}
    for label in sorted(set(places.layer.tolist())):
        mask = places.layer == label
        for robot, obs in list(zip(places.robot[mask].tolist(), places.last_obs[mask].tolist()))[:SAMPLE_PER_LAYER]:
            sample[(robot, int(obs))] = label
    meta = env.reader.metadata(list(sample))
    seen: dict[str, list[dict[str, Any]]] = {label: [] for label in set(sample.values())}
    for key, label in sample.items():
        seen[label].append(meta.get(key, {}))
    kinds = {}
    for label, rows in seen.items():
        ranges = [float(r) for r in (m.get("view_range") for m in rows)
                  if isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0]
        kinds[label] = _LayerKind(robot=any(m.get("position_source") == "odometry" for m in rows),
                                  view_range=max(ranges) if ranges else DEFAULT_VIEW_RANGE)
    return kinds


def _weights(env: FleetEnv, places: Places, relevance: dict[int, float]) -> np.ndarray:
    rel = np.asarray([relevance[int(t)] for t in places.text_id.tolist()], dtype=np.float64)
    texts, index = np.unique(places.text_id, return_inverse=True)
    index = index.reshape(-1)
    newest = np.full(len(texts), -np.inf)
    np.maximum.at(newest, index, places.last)
    recency = np.power(0.5, (newest[index] - places.last) / env.config.recency_halflife)
    weight: np.ndarray = rel * (1.0 + np.log(places.count)) * recency
    return weight


@dataclasses.dataclass
class _Located:
    result: LocateResult
    ranked: list[tuple[Any, float, Optional[float]]]


def _locate(env: FleetEnv, concept: str, scope: Scope, n: int, now: float, hits: bool = True) -> _Located:
    ranked, _ = _rank(env, concept, scope, max(2 * n, 10), gists=False)
    ranked = ranked[:n]
    empty = LocateResult(concept, None, None, 0.0, 0, None, [], [], now)
    if not ranked:
        return _Located(empty, ranked)
    vector = env.vector(concept)
    ids = [key[1] for key, _, _ in ranked]
    names, vectors = env.reader.texts(ids)
    sims = {t: float(v @ vector) for t, v in vectors.items()}
    best = max(sims.values(), default=0.0)
    relevance = {t: math.exp((s - best) / TEMPERATURE) for t, s in sims.items()}
    relevance = {t: w for t, w in relevance.items() if w >= MIN_RELEVANCE}
    places = env.reader.places(list(relevance), scope, LOCATE_CAP, CELL, relevance=relevance,
                               halflife=env.config.recency_halflife, limit=READ_PLACES)
    if not len(places):
        if hits:
            empty.evidence = ranked_hits(env, concept, scope, 3, now, gists=False)
        return _Located(empty, ranked)
    places.weight = _weights(env, places, relevance)
    if len(places) > MAX_PLACES:
        capped = places.capped
        places = places.subset(np.argsort(-places.weight)[:MAX_PLACES])
        places.capped = capped
    kinds = _layer_kinds(env, places)
    robot_layers = [label for label, kind in kinds.items() if kind.robot]
    is_robot = np.isin(places.layer, np.asarray(robot_layers, dtype=object)) if robot_layers \
        else np.zeros(len(places), dtype=bool)
    placements: list[placing.Placement] = []
    measured = places.subset(~is_robot)
    if len(measured):
        placements += _from(placing.measured_placements(measured), measured)
    if is_robot.any():
        blur = CELL * math.sqrt(0.5)
        robot = places.subset(is_robot)
        robot = robot.subset(~placing.explained(robot, placements, lambda layer: kinds[layer].view_range + blur))
        if len(robot):
            placements += _from(placing.robot_placements(robot, lambda layer: kinds[layer].view_range, blur), robot)
    placements = placing.absorb(placements)
    placing.finish(placements[: 1 + OTHER_PLACES])
    if not placements:
        return _Located(empty, ranked)
    total = sum(p.weight for p in placements)
    best_place = placements[0]
    score = {key[1]: s for key, s, _ in ranked}
    evidence = _evidence(best_place.source.subset(best_place.members), names, score) if hits else []
    result = LocateResult(
        concept=concept, position=best_place.position, radius=best_place.radius,
        confidence=round(COVERAGE * best_place.weight / total, 3), count=best_place.count,
        last_stamp=best_place.last, evidence=evidence, now=now,
        elsewhere=[PlaceCluster(p.position, p.radius, round(p.weight / total, 3), p.count, p.last,
                                names.get(p.label, ""), p.kind, p.poses, robots=_robots_of(p))
                   for p in placements[1: 1 + OTHER_PLACES]],
        source=best_place.kind, poses=best_place.poses, view_range=best_place.view_range)
    result.notes.append(_seen_by(best_place, env, now))
    if best_place.kind == placing.ROBOT:
        result.notes.append("no object position was measured: the place is where the robots stood when they saw "
                            f"it, and the thing may be up to {best_place.view_range or DEFAULT_VIEW_RANGE:g} m from "
                            "there (the radius covers that)")
    if places.capped:
        pairs = ", ".join(f"{names.get(t, '')!r} by {r}" for r, t in places.capped[:5])
        result.notes.append(f"seen very often: only the newest {LOCATE_CAP} sightings per robot were weighed "
                            f"({pairs})")
    return _Located(result, ranked)


def _from(placements: list[placing.Placement], source: Places) -> list[placing.Placement]:
    for p in placements:
        p.source = source
    return placements


def _robots_of(p: placing.Placement) -> tuple[str, ...]:
    source = getattr(p, "source", None)
    if source is None or p.members is None:
        return ()
    return tuple(sorted(set(source.robot[p.members].tolist())))


def _seen_by(p: placing.Placement, env: FleetEnv, now: float) -> str:
    """Which robots' sightings placed it, how often each, and who saw it last."""
    members = p.source.subset(p.members)
    robots, index = np.unique(members.robot.astype(str), return_inverse=True)
    index = index.reshape(-1)
    counts = np.bincount(index, weights=members.count, minlength=len(robots))
    lasts = np.full(len(robots), -np.inf)
    np.maximum.at(lasts, index, members.last)
    per = {str(r): (int(c), float(l)) for r, c, l in zip(robots.tolist(), counts.tolist(), lasts.tolist())}
    last_robot = max(per, key=lambda r: per[r][1])
    listing = ", ".join(f"{r} ×{c}" for r, (c, _) in sorted(per.items()))
    return f"seen by {listing}; last by {last_robot} at {fmt_time(per[last_robot][1], now)}"


def _evidence(cluster: Places, names: dict[int, str], score: dict[int, float]) -> list[Hit]:
    """One hit per robot, text and layer in the winning cluster."""
    groups: dict[tuple[str, int, str], np.ndarray] = {}
    for key in set(zip(cluster.robot.tolist(), cluster.text_id.tolist(), cluster.layer.tolist())):
        groups[key] = (cluster.robot == key[0]) & (cluster.text_id == key[1]) & (cluster.layer == key[2])
    hits = []
    for (robot, text_id, label), mask in groups.items():
        count = cluster.count[mask]
        position = (cluster.xyz[mask] * count[:, None]).sum(axis=0) / count.sum()
        newest = int(cluster.last_obs[mask][np.argmax(cluster.last[mask])])
        hits.append(Hit(id=make_id(NodeKind.OBSERVATION, newest), kind="observation", text=names.get(text_id, ""),
                        layer=label.split("/", 1)[1], robot=robot, position=rounded(position),
                        stamp=float(cluster.last[mask].max()), first_stamp=float(cluster.first[mask].min()),
                        score=round(score.get(text_id, 0.0), 4), count=int(count.sum())))
    hits.sort(key=lambda h: (-(h.score or 0.0), -(h.stamp or 0.0)))
    return hits[:5]


class FleetLocated:
    """``_locate``'s answer; its matches are the concept's best texts, one hit per robot that saw them."""

    def __init__(self, env: FleetEnv, located: _Located, concept: str, scope: Scope, now: float) -> None:
        self._env, self._concept, self._scope, self._now = env, concept, scope, now
        self.result = located.result
        self.matched = bool(located.ranked)

    def matches(self, n: int) -> list[Hit]:
        return ranked_hits(self._env, self._concept, self._scope, n, self._now, gists=False)


class FleetReads:
    """The tool runners' reads (``tools.reads.ToolReads``) over the fleet store, for ``env.chosen`` robots."""

    def __init__(self, env: FleetEnv) -> None:
        self._env = env

    def _robot(self) -> str:
        chosen = self._env.chosen
        if not chosen or len(chosen) != 1:
            raise InvalidInputError("this question is about one robot: give robots=['<robot id>']")
        return chosen[0]

    # perception
    def ranked_hits(self, query: str, f: Filters, n: int, now: float, gists: bool = True) -> list[Hit]:
        return ranked_hits(self._env, query, self._env.scope_of(f), n, now, gists)

    def nearby_hits(self, f: Filters, n: int, three_d: bool = False, gists: bool = True) -> list[Hit]:
        return nearby_hits(self._env, self._env.scope_of(f, three_d), n, gists)

    def area_gists(self, f: Filters, n: int) -> list[Hit]:
        scope = self._env.scope_of(f)
        return [_gist_hit(g, center=scope.center) for g in self._env.reader.gists_by_time(scope, n)]

    def timeline(self, f: Filters, n: int, order: str = "newest", gists: bool = True) -> list[Hit]:
        return timeline(self._env, self._env.scope_of(f), n, order, gists)

    # knowledge
    def gist_search(self, query: str, f: Filters, n: int, now: float) -> list[Hit]:
        return gist_search(self._env, self._env.scope_of(f), query, n, now)

    def gist_count(self) -> int:
        return self._env.reader.gist_count()

    def entities_near(self, center: Optional[Position], radius: Optional[float], n: int, name: Optional[str] = None,
                      entity_type: Optional[str] = None, after: Optional[float] = None) -> list[Hit]:
        return entities_near(self._env, self._env.chosen, center, radius, n, name, entity_type, after)

    def entity_count(self) -> int:
        return self._env.reader.entity_count()

    # episodes
    def episode_reports(self, number: Optional[int], name: Optional[str], n: int) -> list[EpisodeReport]:
        return episode_reports(self._env, self._env.chosen, number, name, n)

    def recent_episodes(self, n: int) -> list[tuple[str, str]]:
        return [(f"{r[0]}/ep-{r[1]}", r[2]) for r in self._env.reader.episodes(self._env.chosen, n)]

    # places
    def locate(self, concept: str, f: Filters, n: int, now: float, evidence: bool = True) -> FleetLocated:
        scope = self._env.scope_of(f)
        return FleetLocated(self._env, _locate(self._env, concept, scope, n, now, hits=evidence), concept, scope,
                            now)

    def pinned(self, position: Optional[Position], radius: float, entity_ids: Sequence[str]) -> list[str]:
        return []  # planner notes (MemFS) stay on the robot

    # the robot itself
    def current_position(self) -> tuple[Optional[Position], str]:
        return one_robot.current_position(self._env.reader, self._robot())

    def active_episode(self) -> Optional[str]:
        return one_robot.active_episode(self._env.reader, self._robot())

    @property
    def body(self) -> one_robot.BodyRows:
        return one_robot.BodyRows(self._env.reader, self._robot())


def episode_reports(env: FleetEnv, robots: Optional[tuple[str, ...]], number: Optional[int], name: Optional[str],
                    n: int) -> list[EpisodeReport]:
    """Episodes of the robots, newest first (ids are per robot: ``robot2/ep-3``)."""
    from emem_ros.tools.episodes import GISTS_PER_EPISODE, TOP_TEXTS

    rows = env.reader.episodes(robots, 1 if number is not None else n, number=number, name=name)
    reports = []
    for robot, num, title, status, start, end, parent, summary, goal, result, reflection, success in rows:
        count, most, gists, subtasks = env.reader.episode_contents(robot, int(num), TOP_TEXTS, GISTS_PER_EPISODE)
        reports.append(EpisodeReport(
            id=f"{robot}/ep-{num}", name=title, status=status, start=float(start),
            end=float(end) if end is not None else None,
            parent_id=f"{robot}/ep-{parent}" if parent is not None else None, summary=summary or "", goal=goal,
            result=result, reflection=reflection, success=None if success is None else bool(success),
            observations=count, top_texts=most, gists=[_gist_hit(g) for g in gists],
            subtasks=[f"{robot}/ep-{i} '{n_}'" for i, n_ in subtasks]))
    return reports
