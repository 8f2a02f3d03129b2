"""locate and recall: where a concept is, and everything remembered around there.

Averaging every match (the peer's way) puts "the red chair" halfway between
the chair and a door that shares the word "red". Here each matching text
weighs by its cosine similarity (sharpened, so the best match dominates) and
by how often it was seen in each place; the places are clustered in space
and the heaviest cluster wins. The other clusters are reported, not averaged
in. A concept no single spot dominates (a room seen from several spots) is
linked again at room scale.

What placed the answer, and how sure it is, depends on the evidence
(``tools.placement``): measured object positions, camera bearings from
several poses (triangulated), one pose's bearing (a direction and a range
interval), or only where the robot stood (within the layer's view range).
Each answer's radius holds the thing with the stated probability; its
confidence is that probability times the share of the evidence pointing
there. Two things of one class far apart (two mugs in two rooms) are two
answers: the best first, the other under "elsewhere".

"Where is it" means where it is now: a place's weight halves for every
``recency_halflife`` between its last sighting and the newest sighting of the
same text, so a mug seen 20 times yesterday at A and 10 times an hour ago at
B is at B (A is listed as elsewhere), while a place seen a lot just before the
newest glance still outweighs that glance. With a time window, the evidence
is what was seen inside it (``window_places``), not whole-history places
that merely overlap it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from emem_ros.core.types import NodeKind, Position, make_id, rounded
from emem_ros.engine.positions import ROBOT, ROBOT_SOURCE
from emem_ros.geometry.rays import DEFAULT_VIEW_RANGE, RaySet
from emem_ros.geometry.uncertainty import COVERAGE, Region
from emem_ros.tools import placement as placing
from emem_ros.tools.aggregate import Aggregator, texts_of
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.filters import Filters
from emem_ros.tools.pose_places import TrackEvidence
from emem_ros.tools.ranking import Candidate, fuse, text_hits
from emem_ros.tools.ray_layers import layer_has_rays
from emem_ros.tools.ray_reads import read_place_rays, read_rays
from emem_ros.tools.reads import ToolContext
from emem_ros.tools.results import Hit, LocateResult, PlaceCluster, RecallResult
from emem_ros.tools.window_places import places_in_window

TEMPERATURE = 0.05
"""Cosine gap that divides a text's weight by e: the best match dominates, near-ties share."""
MIN_RELEVANCE = 0.01
"""Texts weighing less than this next to the best match are not read at all."""
MAX_PLACES = 2000
OTHER_PLACES = 4
ENTITY_APART = 3.0
"""m: an entity of the answer's name this far from every place listed is another place the thing was."""
MAX_RAYS_READ = 500
"""Sightings (in camera layers) up to which every ray is read; beyond, one ray per place."""
MAX_RAY_PLACES = 400
"""Places whose ray is read at most (the heaviest: relevance, sightings, recency)."""


@dataclass
class _Located:
    result: LocateResult
    ranked: list[Candidate]
    agg: Aggregator


def locate(env: ToolContext, concept: Any, n_results: Any = 10, layer: Any = None, time_after: Any = None,
           time_before: Any = None) -> LocateResult:
    concept = env.text(concept, "concept")
    n = env.count(n_results)
    now = env.prepare()
    f = env.filters(layer, time_after, time_before)
    located = env.reads.locate(concept, f, n, now)
    if not located.matched:
        located.result.notes += env.empty_notes(f)
    return located.result


def _locate(env: ToolEnv, concept: str, f: Filters, n: int, now: float, hits: bool = True) -> _Located:
    """The located place; ``hits=False`` leaves ``evidence`` empty (recall shows only the place, the other
    places and its own matches, and listing the evidence costs a query and a pass per text)."""
    agg = Aggregator(env.store, env.catalog, f)
    vector = env.query_vector(concept)
    text_v, text_k = env.texts.rank(concept, vector, agg, max(2 * n, 10), env.config.similarity_floor,
                                    env.texts.constraints(f, None))
    ranked = fuse([text_v], [text_k], now, env.config.recency_weight, env.config.recency_halflife)[:n]
    empty = LocateResult(concept, None, None, 0.0, 0, None, [], [], now)
    if not ranked:
        return _Located(empty, ranked, agg)
    relevance = _relevance(env, vector, ranked)
    evidence = _Evidence.load(env, relevance, f)
    if evidence is None:
        if hits:
            empty.evidence = text_hits(env.store, agg, ranked[:3])
        return _Located(empty, ranked, agg)
    capped = list(evidence.capped)
    masks = _layer_masks(evidence.layer)
    kinds = _layer_kinds(env, evidence, masks)
    robot_layers = [layer for layer, kind in kinds.items() if kind.robot]
    placements: list[placing.Placement] = []
    measured = evidence.subset(~_in_layers(masks, len(evidence.layer), robot_layers))
    if len(measured.weight):
        placements += _from(placing.measured_placements(measured), measured)
    pose_layers = list(robot_layers)
    rays: Optional[tuple[RaySet, np.ndarray, np.ndarray]] = None
    ray_layers = [layer for layer in robot_layers if kinds[layer].rays]
    if ray_layers:
        in_ray_layers = _in_layers(masks, len(evidence.layer), ray_layers)
        if evidence.count[in_ray_layers].sum() <= MAX_RAYS_READ:
            texts = sorted(set(evidence.text_id[in_ray_layers].tolist()))
            read = read_rays(env.store.reader(), texts, ray_layers, f.after, f.before)
        else:  # seen thousands of times: one ray per viewpoint (place), the heaviest places first
            ids = evidence.last_obs[in_ray_layers]
            heaviest = np.argsort(-evidence.weight[in_ray_layers], kind="stable")[:MAX_RAY_PLACES]
            read = read_place_rays(env.store.reader(), ids[heaviest].tolist())
        if len(read.rays):
            read.rays.weight = _lookup(relevance, read.text_id) * _recency(
                read.text_id, read.rays.stamp, env.config.recency_halflife)
            rays = (read.rays, read.text_id, read.layer)
            placements += placing.ray_placements(read.rays, read.text_id, placements)
            capped += read.capped
            pose_layers = [layer for layer in robot_layers if layer not in set(read.layer.tolist())]
    if pose_layers:
        blur = env.store.cell_size * math.sqrt(0.5)
        robot = evidence.subset(_in_layers(masks, len(evidence.layer), pose_layers))
        robot = robot.subset(~placing.explained(robot, placements, lambda layer: kinds[layer].view_range + blur))
        if len(robot.weight):
            placements += _from(placing.robot_placements(robot, lambda layer: kinds[layer].view_range, blur), robot)
    placements = placing.absorb(placements)
    track = TrackEvidence(env.store, concept, set(relevance))

    def from_track(p: placing.Placement) -> Optional[Region]:
        layers = sorted(set(p.source.layer[p.members].tolist())) if p.source is not None else []
        return track.region(p.seen_from, layers, max(kinds[layer].view_range for layer in layers)) if layers else None

    placing.finish(placements[: 1 + OTHER_PLACES], from_track)
    if not placements:
        if hits:
            empty.evidence = text_hits(env.store, agg, ranked[:3])
        return _Located(empty, ranked, agg)
    total = sum(p.weight for p in placements)
    best = placements[0]
    names = texts_of(env.store, set(evidence.text_id.tolist()) | ({*rays[1].tolist()} if rays else set()))
    score = {c.key: c.score for c in ranked}
    found: list[Hit] = []
    if hits:
        found = (_ray_evidence(env, best, rays, names, score) if best.kind in (placing.BEARINGS, placing.RAY)
                 else _evidence(env, best.source.subset(best.members), names, score))
    result = LocateResult(
        concept=concept, position=best.position, radius=best.radius,
        confidence=round(COVERAGE * best.weight / total, 3), count=best.count, last_stamp=best.last,
        evidence=found, now=now,
        elsewhere=[PlaceCluster(p.position, p.radius, round(p.weight / total, 3), p.count, p.last,
                                names.get(p.label, ""), p.kind, p.poses) for p in placements[1: 1 + OTHER_PLACES]],
        source=best.kind, poses=best.poses, segment=best.segment, view_range=best.view_range)
    if not f.timed and f.layer is None and len(result.elsewhere) < OTHER_PLACES:
        result.elsewhere += _entities_elsewhere(env, names.get(best.label, ""),
                                                [best.position, *(p.position for p in result.elsewhere)],
                                                OTHER_PLACES - len(result.elsewhere))
    note = _placed_note(best, robot_layers, sorted(set(rays[2][best.members].tolist())) if rays is not None
                        and best.kind in (placing.BEARINGS, placing.RAY) else [])
    if note:
        result.notes.append(note)
    if capped:
        result.notes.append(f"seen very often in this window: only the newest sightings of "
                            f"{', '.join(repr(names.get(t, '')) for t in sorted(set(capped)))} were counted")
    return _Located(result, ranked, agg)


def _entities_elsewhere(env: ToolEnv, label: str, listed: list[Position], limit: int) -> list[PlaceCluster]:
    """Places an entity of this name stands for that no listed place covers (issue 26).

    Archival deletes a text whose hot observations are all archived, and its places with it: a thing
    seen every day becomes a new text each morning, and the places it was at before (the red mug on
    the kitchen table until Wednesday) leave locate's evidence. Its entities keep where and when it
    was; they are listed with weight 0 (the answer stays what the evidence says).
    """
    if not label:
        return []
    rows = env.store.reader().execute(
        "SELECT x, y, z, spread, sightings, last_seen FROM entities WHERE name = ? COLLATE NOCASE"
        " AND x IS NOT NULL AND y IS NOT NULL ORDER BY last_seen DESC LIMIT 20", (label,)).fetchall()
    out: list[PlaceCluster] = []
    for x, y, z, spread, sightings, last in rows:
        if len(out) >= limit:
            break
        if all(math.hypot(x - p[0], y - p[1]) > ENTITY_APART for p in listed):
            position = (float(x), float(y), float(z or 0.0))
            out.append(PlaceCluster(position, max(float(spread or 0.0), 0.1), 0.0, int(sightings), float(last),
                                    label, "entity"))
            listed.append(position)
    return out


def _from(placements: list[placing.Placement], source: "_Evidence") -> list[placing.Placement]:
    """Remember which places each placement's mask (``members``) is over: the best one lists them."""
    for p in placements:
        p.source = source
    return placements


def _placed_note(best: placing.Placement, robot_layers: list[str], ray_layers: list[str]) -> Optional[str]:
    if best.kind == placing.MEASURED:
        if not robot_layers:
            return None
        return (f"placed by measured object positions; sightings in {', '.join(robot_layers)} "
                "(stored at the robot's pose) were left out of the estimate")
    if best.kind == placing.BEARINGS:
        return (f"placed by bearings: camera detections in {', '.join(ray_layers)} from {best.poses} poses, "
                "triangulated (no depth was measured)")
    if best.kind == placing.RAY:
        return ("seen from one pose only: that gives a direction and a range interval, not a point; "
                "the radius covers the whole interval")
    return (f"no object position was measured and no camera bearing is known: the place is where the robot "
            f"stood when it saw it, and the thing may be up to {best.view_range or DEFAULT_VIEW_RANGE:g} m "
            "from there (the radius covers that)")


@dataclass(frozen=True)
class _LayerKind:
    robot: bool
    """Positions are the robot's (``position_source: odometry``), not the thing's."""
    rays: bool
    """Some of its observations carry a camera ray."""
    view_range: float


SAMPLE_PER_LAYER = 4


def _layer_kinds(env: ToolEnv, evidence: "_Evidence", masks: dict[str, np.ndarray]) -> dict[str, _LayerKind]:
    """What each layer's positions mean, from a few of its observations (a layer is one sensor).

    A 2-D detection is stored where the robot stood, metres from the object;
    a 3-D detection (or a caller-given position) says where the thing is.
    """
    layers = sorted(masks)
    sample: dict[int, str] = {}
    for layer in layers:
        for obs in evidence.last_obs[masks[layer]][:SAMPLE_PER_LAYER].tolist():
            sample[int(obs)] = layer
    seen: dict[str, list[tuple[bool, bool, object]]] = {layer: [] for layer in layers}
    said = {layer: False for layer in layers}
    for obs, (source, ray, view_range) in sorted(env.obs_kinds.get(env.store.reader(), list(sample)).items()):
        seen[sample[obs]].append((source == ROBOT_SOURCE, ray == "array", view_range))
        said[sample[obs]] = said[sample[obs]] or source is not None
    kinds = {}
    conn = env.store.reader()
    for layer, rows in seen.items():
        ranges = [r for _, _, r in rows if isinstance(r, (int, float)) and r > 0]
        robot = any(r for r, _, _ in rows) or (not said[layer] and _unsaid_is_robot(env, conn, layer, ranges))
        rays = any(y for _, y, _ in rows) or (robot and layer_has_rays(env.store, conn, layer))
        kinds[layer] = _LayerKind(robot=robot, rays=rays,
                                  view_range=float(max(ranges)) if ranges else DEFAULT_VIEW_RANGE)
    return kinds


def _unsaid_is_robot(env: ToolEnv, conn: Any, layer: str, ranges: list[Any]) -> bool:
    """A layer whose sightings say nothing of their positions: its declaration, else what its data shows
    (``engine.positions.infer``: robot pose unless it reported things at distinct places at one moment)."""
    meaning, view_range = env.engine.positions.meaning(conn, layer)
    if meaning == ROBOT and view_range:
        ranges.append(view_range)
    return meaning == ROBOT


def _layer_masks(layer: np.ndarray) -> dict[str, np.ndarray]:
    """Per layer of the evidence, its rows (a few layers; comparing the object array is the costly part,
    so it is done once per layer, and the masks serve every selection by layer)."""
    return {name: layer == name for name in set(layer.tolist())}


def _in_layers(masks: dict[str, np.ndarray], n: int, layers: list[str]) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    for name in layers:  # a few layers: cheaper than np.isin, which sorts the object array
        if name in masks:
            mask |= masks[name]
    return mask


def _ray_evidence(env: ToolEnv, best: placing.Placement, rays: Optional[tuple[RaySet, np.ndarray, np.ndarray]],
                  names: dict[int, str], score: dict[int, float]) -> list[Hit]:
    """The rays that placed it as one-sighting places at the placed position: ``_evidence``'s hits."""
    if rays is None:
        return []
    ray_set, text_id, layer = rays
    m = best.members
    n = int(m.sum())
    as_places = _Evidence(text_id[m], layer[m], np.tile(np.asarray(best.position, dtype=np.float64), (n, 1)),
                          np.ones(n), ray_set.stamp[m], ray_set.stamp[m], ray_set.key[m], ray_set.weight[m])
    return _evidence(env, as_places, names, score)


def _relevance(env: ToolEnv, vector: np.ndarray, ranked: list[Candidate]) -> dict[int, float]:
    """exp((cosine - best) / T) per text: similarity decides, not rank (ranks are nearly flat under RRF).

    Texts weighing under MIN_RELEVANCE cannot move the answer and are dropped before their places are read.
    """
    ids = [c.key for c in ranked]
    sims = env.text_vectors.get(ids) @ vector
    best = float(sims.max())
    weights = {t: math.exp((float(s) - best) / TEMPERATURE) for t, s in zip(ids, sims)}
    return {t: w for t, w in weights.items() if w >= MIN_RELEVANCE}


@dataclass
class _Evidence:
    """Places of the relevant texts as arrays: position, weight, counts and times."""

    text_id: np.ndarray
    layer: np.ndarray
    xyz: np.ndarray
    count: np.ndarray
    first: np.ndarray
    last: np.ndarray
    last_obs: np.ndarray
    weight: np.ndarray
    capped: tuple[int, ...] = ()
    """Texts of which a time window's newest sightings only were read (see ``window_places``)."""

    @property
    def xy(self) -> np.ndarray:
        return self.xyz[:, :2]

    @classmethod
    def load(cls, env: ToolEnv, relevance: dict[int, float], f: Filters) -> Optional["_Evidence"]:
        places = env.store.place_cache.of_texts(list(relevance), f.layer, f.after, f.before)
        window = places_in_window(env.store, places, f.after, f.before, f.layer)
        places = window.places
        if not len(places):
            return None
        count = places.count
        text_id = places.text_id
        xyz = np.column_stack([places.sx / count, places.sy / count, places.sz / count])
        rel = _lookup(relevance, text_id)
        weight = rel * (1.0 + np.log(count)) * _recency(text_id, places.last, env.config.recency_halflife)
        evidence = cls(text_id, places.layer, xyz, count, places.first, places.last, places.last_obs, weight,
                       tuple(window.capped))
        if len(places) > MAX_PLACES:
            evidence = evidence.subset(np.argsort(-evidence.weight)[:MAX_PLACES])
        return evidence

    def subset(self, mask: np.ndarray) -> "_Evidence":
        return _Evidence(self.text_id[mask], self.layer[mask], self.xyz[mask], self.count[mask], self.first[mask],
                         self.last[mask], self.last_obs[mask], self.weight[mask])

    def centre(self) -> tuple[float, float, float]:
        c = (self.xyz * self.weight[:, None]).sum(axis=0) / self.weight.sum()
        return (round(float(c[0]), 3), round(float(c[1]), 3), round(float(c[2]), 3))

    def radius(self, cell: float, centre: Optional[tuple[float, float, float]] = None) -> float:
        """Weighted RMS distance to the centre (``centre()``, unless given), plus half a cell (the grid's own blur)."""
        c = np.asarray((centre or self.centre())[:2])
        spread = float((self.weight * ((self.xy - c) ** 2).sum(axis=1)).sum() / self.weight.sum())
        return round(math.sqrt(spread) + cell / 2, 2)


def _lookup(values: dict[int, float], keys: np.ndarray) -> np.ndarray:
    """``np.array([values[k] for k in keys])`` for keys that are all in ``values``, without a Python loop."""
    known = np.fromiter(values, dtype=np.int64, count=len(values))
    order = np.argsort(known)
    weights = np.fromiter(values.values(), dtype=np.float64, count=len(values))[order]
    looked_up: np.ndarray = weights[np.searchsorted(known[order], keys)]
    return looked_up


def _recency(text_id: np.ndarray, last: np.ndarray, halflife: float) -> np.ndarray:
    """2^(-(newest sighting of the text - last sighting here) / halflife) per place: 1 where it was seen last."""
    texts, index = np.unique(text_id, return_inverse=True)
    index = index.reshape(-1)
    newest = np.full(len(texts), -np.inf)
    np.maximum.at(newest, index, last)
    weights: np.ndarray = np.power(0.5, (newest[index] - last) / halflife)
    return weights


def _evidence(env: ToolEnv, cluster: _Evidence, names: dict[int, str], score: dict[int, float]) -> list[Hit]:
    """One hit per text (and layer) in the winning cluster: where it was seen there, how often, how lately."""
    groups: dict[tuple[int, str], np.ndarray] = {}
    for key in set(zip(cluster.text_id.tolist(), cluster.layer.tolist())):
        groups[key] = (cluster.text_id == key[0]) & (cluster.layer == key[1])
    newest = {key: int(cluster.last_obs[mask][np.argmax(cluster.last[mask])]) for key, mask in groups.items()}
    episodes = {obs: ref[0] for obs, ref in env.obs_refs.get(env.store.reader(), list(newest.values())).items()}
    hits = []
    for (text_id, layer), mask in groups.items():
        count = cluster.count[mask]
        position = (cluster.xyz[mask] * count[:, None]).sum(axis=0) / count.sum()
        obs_id = newest[(text_id, layer)]
        episode = episodes.get(obs_id)
        hits.append(Hit(id=make_id(NodeKind.OBSERVATION, obs_id), kind="observation", text=names.get(text_id, ""),
                        layer=layer, position=rounded(position),
                        stamp=float(cluster.last[mask].max()), first_stamp=float(cluster.first[mask].min()),
                        score=round(score.get(text_id, 0.0), 4), count=int(count.sum()),
                        episode_id=make_id(NodeKind.EPISODE, episode) if episode is not None else None))
    hits.sort(key=lambda h: (-(h.score or 0.0), -h.count))
    return hits[:5]


def recall(env: ToolContext, query: Any, n_results: Any = 10, radius_multiplier: Any = 1.5) -> RecallResult:
    """Locate the concept, then gather what is around it: observations, summaries, entities."""
    query = env.text(query, "query")
    n = env.count(n_results)
    multiplier = env.positive(radius_multiplier, "radius_multiplier", 1.5)
    now = env.prepare()
    located = env.reads.locate(query, Filters(), n, now, evidence=False)
    matches = located.matches(min(n, 5))
    where = located.result
    if where.position is None or where.radius is None:
        gists = env.reads.gist_search(query, Filters(), 3, now)
        entities = env.reads.entities_near(None, None, 3, name=query)
        pinned = env.reads.pinned(None, 0.0, [h.id for h in entities])
        found = matches or gists or entities or pinned
        notes = [] if found else [f"nothing in {env.store_name} resembles this query"]
        return RecallResult(query, None, None, matches, [], gists, entities, now, notes, pinned)
    radius = round(max(where.radius * multiplier, 2.0), 2)
    around = Filters(center=where.position, radius=radius)
    nearby = env.reads.nearby_hits(around, n, gists=False)
    gists = env.reads.area_gists(around, 3)
    entities = env.reads.entities_near(where.position, radius, min(n, 5))
    notes = []
    if where.elsewhere:
        places = "; ".join(f"({p.position[0]:.1f}, {p.position[1]:.1f}) \"{p.label}\"" for p in where.elsewhere)
        notes.append(f"also seen elsewhere (use locate for details): {places}")
    pinned = env.reads.pinned(where.position, radius, [h.id for h in entities])
    return RecallResult(query, where.position, radius, matches, nearby, gists, entities, now, notes, pinned)

