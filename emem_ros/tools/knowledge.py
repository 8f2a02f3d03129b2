"""search_gists and entity_query: long-term summaries and tracked things.

Gists and entities are written by consolidation; their tables are small
(one row per cluster or per thing), so filters are plain SQL and meaning is
hnswlib or an exact scan of the filtered rows.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

from emem_ros.core.types import Entity, NodeKind, Position, make_id
from emem_ros.storage.sqlutil import marks
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.filters import Filters, area
from emem_ros.tools.ranking import fuse, gist_hit
from emem_ros.tools.reads import ToolContext
from emem_ros.tools.results import Hit, SearchResult, quoted

ENTITY_RADIUS = 5.0
"""Metres used when entity_query gets near_x/near_y without spatial_radius."""


def search_gists(env: ToolContext, query: Any, n_results: Any = 10, time_after: Any = None,
                 time_before: Any = None) -> SearchResult:
    query = env.text(query, "query")
    n = env.count(n_results)
    now = env.prepare()
    f = env.filters(time_after=time_after, time_before=time_before)
    hits = env.reads.gist_search(query, f, n, now)
    notes = []
    if not hits:
        notes.append("no summaries exist yet (consolidation has not run); use semantic_search"
                     if env.reads.gist_count() == 0 else "no summary passes the filters or resembles the query")
    words = env.describe(f)
    summary = quoted(query) + (f" ({words})" if words else "")
    return SearchResult("search_gists", summary, hits, now, notes, empty="No summary matches")


def gist_search(env: ToolEnv, query: str, f: Filters, n: int, now: float) -> list[Hit]:
    vector = env.query_vector(query)
    gist_v, gist_k = env.gists.rank(query, vector, f, max(2 * n, 10), env.config.similarity_floor)
    fused = fuse([gist_v], [gist_k], now, env.config.recency_weight, env.config.recency_halflife)[:n]
    return [gist_hit(c.gist, score=round(c.score, 4), similarity=c.similarity) for c in fused if c.gist]


def entity_query(env: ToolContext, name: Any = None, entity_type: Any = None, near_x: Any = None, near_y: Any = None,
                 spatial_radius: Any = None, last_seen_after: Any = None, n_results: Any = 10) -> SearchResult:
    n = env.count(n_results)
    now = env.prepare()
    if name is not None and not isinstance(name, str):
        name = str(name)
    if entity_type is not None and not isinstance(entity_type, str):
        entity_type = str(entity_type)
    center, radius = area(near_x, near_y, spatial_radius, default_radius=ENTITY_RADIUS)
    after = env.time("last_seen_after", last_seen_after)
    hits = env.reads.entities_near(center, radius, n, name=name or None, entity_type=entity_type or None,
                                   after=after)
    scope = env.describe(Filters())  # what the store narrows on its own (over the fleet: the robots asked)
    words = ([scope] if scope else []) + entity_filter_words(name, entity_type, center, radius, after, env.fmt)
    notes = []
    if not hits:
        notes.append("no entities are tracked yet (consolidation creates them); try semantic_search or locate"
                     if env.reads.entity_count() == 0 else "try a broader name, no type, or a larger radius")
    return SearchResult("entity_query", "entities " + (", ".join(words) if words else "(all)"), hits, now, notes,
                        empty="No entities")


def entity_filter_words(name: Any, entity_type: Any, center: Optional[Position], radius: Optional[float],
                        after: Optional[float], fmt: Callable[[float], str]) -> list[str]:
    """How an entity_query's filters read in its answer (the robot's and the fleet's alike)."""
    words = []
    if name:
        words.append(f"named like {quoted(name)}")
    if entity_type:
        words.append(f"of type '{entity_type}'")
    if center is not None:
        words.append(f"within {radius:g} m of ({center[0]:.1f}, {center[1]:.1f})")
    if after is not None:
        words.append(f"seen after {fmt(after)}")
    return words


def entities_near(env: ToolEnv, center: Optional[Position], radius: Optional[float], n: int,
                  name: Optional[str] = None, entity_type: Optional[str] = None,
                  after: Optional[float] = None) -> list[Hit]:
    """Entities by substring of name (then by meaning), type, place and recency."""
    where, params = ["1"], list[object]()
    if entity_type:
        where.append("e.entity_type = ? COLLATE NOCASE")
        params.append(entity_type)
    if after is not None:
        where.append("e.last_seen >= ?")
        params.append(after)
    if center is not None and radius is not None:
        cx, cy, _ = center
        where.append("e.x BETWEEN ? AND ? AND e.y BETWEEN ? AND ?"
                     " AND (e.x - ?) * (e.x - ?) + (e.y - ?) * (e.y - ?) <= ?")
        params += [cx - radius, cx + radius, cy - radius, cy + radius, cx, cx, cy, cy, radius * radius]
    conn = env.store.reader()
    columns = _COLUMNS
    order = "e.last_seen DESC, e.sightings DESC"
    found: dict[str, Entity] = {}
    scores: dict[str, float] = {}
    if name:
        patterns = ["%" + form.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                    for form in _forms(name)]
        like = " OR ".join("e.name LIKE ? ESCAPE '\\'" for _ in patterns)
        rows = conn.execute(f"SELECT {columns} FROM entities e WHERE {' AND '.join(where)}"
                            f" AND ({like}) ORDER BY {order} LIMIT ?",
                            (*params, *patterns, n)).fetchall()
        for row in rows:
            entity = _entity(row)
            found[entity.id] = entity
            scores[entity.id] = 1.0
        if len(found) < n:
            for entity, sim in _by_meaning(env, name, " AND ".join(where), params, n):
                if entity.id not in found:
                    found[entity.id] = entity
                    scores[entity.id] = sim
    elif center is not None:
        # Up to 200 candidates are ranked by distance, n are shown: parse only those n (the rows come
        # whole in the one query: a second one by id cost more than the columns).
        cands = conn.execute(f"SELECT {columns} FROM entities e WHERE {' AND '.join(where)} ORDER BY {order}"
                             f" LIMIT ?", (*params, max(n, 200))).fetchall()
        cands.sort(key=lambda r: math.hypot(r[3] - center[0], r[4] - center[1]))  # stable, like hits.sort below
        for row in cands[:n]:
            entity = _entity(row)
            found[entity.id] = entity
    else:
        rows = conn.execute(f"SELECT {columns} FROM entities e WHERE {' AND '.join(where)} ORDER BY {order}"
                            f" LIMIT ?", (*params, n)).fetchall()
        for row in rows:
            entity = _entity(row)
            found[entity.id] = entity
    hits = [_entity_hit(e, center, scores.get(e.id)) for e in found.values()]
    if center is not None:
        hits.sort(key=lambda h: (h.distance if h.distance is not None else math.inf))
    elif name:
        hits.sort(key=lambda h: -(h.score or 0.0))
    return hits[:n]


def _forms(name: str) -> list[str]:
    """The name as asked and, for a plural, its singular ("green sofas" also finds "green sofa")."""
    text = name.strip()
    forms = [text]
    lower = text.lower()
    for ending, replace in (("ies", "y"), ("ches", "ch"), ("shes", "sh"), ("ses", "s"), ("xes", "x"), ("s", "")):
        if lower.endswith(ending) and len(text) > len(ending) + 2 and not lower.endswith("ss"):
            forms.append(text[: len(text) - len(ending)] + replace)
            break
    return forms


NAME_FLOOR = 0.6
"""Cosine below which an entity's name is not taken to mean the asked one. Measured with MiniLM: a
synonym or a kind of it scores 0.6-0.9 (mug/cup 0.71, sofa/couch 0.86, chair/armchair 0.73), other
household things 0.2-0.55 (mug/fridge 0.35, mug/television 0.30, mug/bottle 0.51)."""


def _by_meaning(env: ToolEnv, name: str, where: str, params: list[object], n: int) -> list[tuple[Entity, float]]:
    index = env.store.vectors["entities"]
    if not len(index):
        return []
    vector = env.query_vector(name)
    labels, sims = index.search(vector, max(4 * n, 32))
    floor = max(env.config.similarity_floor, NAME_FLOOR)
    pairs = [(int(l), float(s)) for l, s in zip(labels.tolist(), sims.tolist()) if s >= floor]
    if not pairs:
        return []
    slots = marks(len(pairs))
    rows = {r[0]: r for r in env.store.reader().execute(
        f"SELECT {_COLUMNS} FROM entities e WHERE {where} AND e.id IN ({slots})",
        (*params, *[p[0] for p in pairs])).fetchall()}
    return [(_entity(rows[l]), s) for l, s in pairs if l in rows][:n]


_COLUMNS = ("e.id, e.name, e.entity_type, e.x, e.y, e.z, e.spread, e.first_seen, e.last_seen, e.sightings,"
            " e.confidence, e.layer")
"""An entity's columns but its metadata: a hit shows none of it, and decoding its JSON was most of a row's cost."""


def _entity(row: Sequence[Any]) -> Entity:
    """``store.entity_from_row`` of a ``_COLUMNS`` row (metadata left empty)."""
    eid, name, etype, x, y, z, spread, first, last, sightings, confidence, layer = row
    return Entity(id=make_id(NodeKind.ENTITY, eid), name=name, entity_type=etype,
                  position=(x, y, z) if x is not None else None, spread=spread, first_seen=first,
                  last_seen=last, sightings=sightings, confidence=confidence, layer=layer)


def _entity_hit(entity: Entity, center: Optional[Position], score: Optional[float]) -> Hit:
    distance = None
    if center is not None and entity.position is not None:
        distance = math.hypot(entity.position[0] - center[0], entity.position[1] - center[1])
    return Hit(id=entity.id, kind="entity", text=entity.name, layer=entity.layer, position=entity.position,
               stamp=entity.last_seen, first_stamp=entity.first_seen, count=entity.sightings,
               radius=entity.spread, entity_type=entity.entity_type, distance=distance,
               score=round(score, 4) if score is not None else None)

