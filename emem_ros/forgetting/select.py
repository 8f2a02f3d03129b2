"""Which stored things a selector names: observations (hot and archived), texts, entities, cold records.

Read-only, on the caller's reader connection: nothing is locked while the
selection is worked out. Archived observations keep no text in SQLite, so a
``match`` finds them in the cold store (their skeleton rows are then
selected by id); meaning (``similar_to``) asks the vector index for hot texts
and embeds archived ones at selection time (``meaning.py``: the cold store
keeps no vectors).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional

from emem_ros.core.errors import UnknownNodeError
from emem_ros.core.types import EdgeKind, NodeKind, parse_id
from emem_ros.forgetting.meaning import cold_similar
from emem_ros.forgetting.selector import Selector, within
from emem_ros.storage.sqlutil import chunked, marks

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.consolidation.coldstore import ColdStore
    from emem_ros.engine import Engine

SIMILAR_FIRST_K = 64


@dataclass
class Selection:
    observations: set[int] = field(default_factory=set)
    """Observation rows to delete (hot and archived skeletons)."""
    texts: set[int] = field(default_factory=set)
    """Text rows whose content the selector names (deleted once nothing left refers to them)."""
    entities: set[int] = field(default_factory=set)
    """Entities removed whatever sightings remain (the selector named them)."""
    cold: set[int] = field(default_factory=set)
    """Observation numbers whose cold-store record goes."""

    @property
    def empty(self) -> bool:
        return not (self.observations or self.texts or self.entities or self.cold)


def select(engine: "Engine", conn: sqlite3.Connection, selector: Selector,
           cold: Optional["ColdStore"]) -> Selection:
    out = Selection()
    text_ids: Optional[set[int]] = None
    if selector.match:
        text_ids = matching_texts(conn, selector)
    if selector.similar_to:
        similar = similar_texts(engine, selector)
        text_ids = similar if text_ids is None else text_ids & similar
    entity_obs: Optional[set[int]] = None
    if selector.entity:
        out.entities = resolve_entities(conn, selector.entity)
        entity_obs = entity_observations(engine, conn, out.entities)
        if text_ids is not None:  # combined with words or meaning: only the entities they name too
            out.entities = {e for e in out.entities if _entity_text_in(conn, e, text_ids)}
    if text_ids is not None:
        out.texts = set(text_ids)
    where, params = _filters(selector)
    candidates: list[set[int]] = []  # one set per criterion given; the observations are in all of them
    if text_ids is not None:
        candidates.append(_with_texts(conn, text_ids, where, params, selector))
    if entity_obs is not None:
        candidates.append(_with_ids(conn, entity_obs, where, params, selector))
    if selector.ids:
        candidates.append(_with_ids(conn, set(selector.ids), where, params, selector))
    if candidates:
        out.observations = set.intersection(*candidates)
    else:
        out.observations = _rows(conn, where, params, selector)
    archived = _archived(conn, out.observations)
    out.cold |= archived
    if cold is not None and entity_obs is None and (selector.match or selector.similar_to):
        # Archived texts: words are read from the cold store, meaning is embedded there (meaning.py).
        found = cold_similar(engine, cold, selector, record_selected) if selector.similar_to \
            else cold_matches(cold, selector)
        out.cold |= found
        out.observations |= found
    return out


def _filters(selector: Selector) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if selector.layer:
        where.append("layer = ?")
        params.append(selector.layer)
    if selector.since is not None:
        where.append("stamp >= ?")
        params.append(selector.since)
    if selector.until is not None:
        where.append("stamp <= ?")
        params.append(selector.until)
    if selector.radius is not None:
        assert selector.x is not None and selector.y is not None
        where.append("x BETWEEN ? AND ? AND y BETWEEN ? AND ?")
        params += [selector.x - selector.radius, selector.x + selector.radius,
                   selector.y - selector.radius, selector.y + selector.radius]
    return where, params


def _rows(conn: sqlite3.Connection, where: list[str], params: list[Any], selector: Selector,
          extra: str = "", extra_params: Iterable[Any] = ()) -> set[int]:
    clauses = [*where, *([extra] if extra else [])]
    sql = "SELECT id, x, y FROM observations" + (" WHERE " + " AND ".join(clauses) if clauses else "")
    return {i for i, x, y in conn.execute(sql, [*params, *extra_params]) if within(selector, x, y)}


def _with_texts(conn: sqlite3.Connection, text_ids: set[int], where: list[str], params: list[Any],
                selector: Selector) -> set[int]:
    found: set[int] = set()
    for chunk in chunked(sorted(text_ids)):
        found |= _rows(conn, where, params, selector, f"text_id IN ({marks(len(chunk))})", chunk)
    return found


def _with_ids(conn: sqlite3.Connection, ids: set[int], where: list[str], params: list[Any],
              selector: Selector) -> set[int]:
    found: set[int] = set()
    for chunk in chunked(sorted(ids)):
        found |= _rows(conn, where, params, selector, f"id IN ({marks(len(chunk))})", chunk)
    return found


def _archived(conn: sqlite3.Connection, ids: set[int]) -> set[int]:
    found: set[int] = set()
    for chunk in chunked(sorted(ids)):
        found |= {r[0] for r in conn.execute(
            f"SELECT id FROM observations WHERE tier = 'archived' AND id IN ({marks(len(chunk))})", chunk)}
    return found


def _like(word: str) -> str:
    return "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def matching_texts(conn: sqlite3.Connection, selector: Selector) -> set[int]:
    """Text rows holding the words: a LIKE pass narrows (ASCII case-insensitive), the regex decides."""
    assert selector.match is not None
    words = selector.match.split()
    sql = "SELECT id, text FROM texts WHERE " + " AND ".join("text LIKE ? ESCAPE '\\'" for _ in words)
    ascii_only = all(w.isascii() for w in words)
    rows = conn.execute(sql, [_like(w) for w in words]) if ascii_only else conn.execute("SELECT id, text FROM texts")
    return {i for i, text in rows if selector.matches(text)}


def similar_texts(engine: "Engine", selector: Selector) -> set[int]:
    """Texts whose vector is at least ``min_similarity`` from the query's (k grows until one falls below)."""
    assert selector.similar_to is not None
    index = engine.store.vectors["texts"]
    vector = engine.embed_query(selector.similar_to)
    k = SIMILAR_FIRST_K
    while True:
        labels, sims = index.search(vector, k)
        if len(labels) < k or (len(sims) and float(sims[-1]) < selector.min_similarity):
            return {int(label) for label, s in zip(labels, sims) if float(s) >= selector.min_similarity}
        k *= 4


def resolve_entities(conn: sqlite3.Connection, entity: str) -> set[int]:
    try:
        kind, number = parse_id(entity)
    except ValueError:
        kind, number = NodeKind.ENTITY, -1
    if kind is NodeKind.ENTITY and number >= 0:
        if conn.execute("SELECT 1 FROM entities WHERE id=?", (number,)).fetchone() is None:
            raise UnknownNodeError(f"no entity {entity} in this memory")
        return {number}
    found = {r[0] for r in conn.execute("SELECT id FROM entities WHERE name = ? COLLATE NOCASE", (entity,))}
    if not found:
        raise UnknownNodeError(f"no entity named {entity!r} in this memory")
    return found


def entity_observations(engine: "Engine", conn: sqlite3.Connection, entities: set[int]) -> set[int]:
    """Its sightings (OBSERVED_IN edges), and the observations of its name where and while it was seen."""
    out: set[int] = set()
    reach = float(engine.config.entity_spatial_radius)
    for number in sorted(entities):
        for (dst,) in conn.execute("SELECT dst FROM edges WHERE kind=? AND src=?",
                                   (EdgeKind.OBSERVED_IN.value, f"ent-{number}")):
            try:
                out.add(parse_id(dst)[1])
            except ValueError:
                continue
        row = conn.execute("SELECT name, x, y, spread, first_seen, last_seen FROM entities WHERE id=?",
                           (number,)).fetchone()
        if row is None:
            continue
        name, x, y, spread, first, last = row
        radius = max(float(spread or 0.0), reach)
        sql = ("SELECT o.id, o.x, o.y FROM observations o JOIN texts t ON t.id = o.text_id"
               " WHERE t.text = ? COLLATE NOCASE AND o.stamp BETWEEN ? AND ?")
        for i, ox, oy in conn.execute(sql, (name, first, last)):
            if x is None or (ox is not None and (ox - x) ** 2 + (oy - y) ** 2 <= radius ** 2):
                out.add(i)
    return out


def _entity_text_in(conn: sqlite3.Connection, entity: int, text_ids: set[int]) -> bool:
    row = conn.execute("SELECT t.id FROM entities e JOIN texts t ON t.text = e.name COLLATE NOCASE"
                       " WHERE e.id=?", (entity,)).fetchone()
    return row is not None and row[0] in text_ids


def cold_matches(cold: "ColdStore", selector: Selector) -> set[int]:
    """Archived observations whose cold record holds the words and meets the other criteria."""
    out: set[int] = set()
    for record in cold.iter_records():
        if record_selected(record, selector):
            try:
                out.add(parse_id(str(record.get("id")))[1])
            except ValueError:
                continue
    return out


def record_selected(record: dict[str, Any], selector: Selector, text_key: str = "text",
                    stamp_key: str = "stamp", layer_key: str = "layer") -> bool:
    """A cold-store or dead-letter record against the selector (in Python: these live outside SQLite)."""
    if selector.match and not selector.matches(str(record.get(text_key) or "")):
        return False
    if selector.similar_to or selector.entity:
        return False  # meaning and entities need SQLite; those records are reached by id
    if selector.ids:
        try:
            if parse_id(str(record.get("id")))[1] not in selector.ids:
                return False
        except ValueError:
            return False
    if selector.layer and record.get(layer_key) != selector.layer:
        return False
    stamp = record.get(stamp_key)
    if selector.since is not None and (stamp is None or float(stamp) < selector.since):
        return False
    if selector.until is not None and (stamp is None or float(stamp) > selector.until):
        return False
    if selector.radius is not None:
        position = record.get("position")
        if position is None and "x" in record:
            position = [record.get("x"), record.get("y")]
        if not position or position[0] is None or not within(selector, position[0], position[1]):
            return False
    return True


def describe_ids(ids: Iterable[int]) -> str:
    return json.dumps([f"obs-{i}" for i in sorted(ids)])
