"""Episodes, gists, entities and edges: rows <-> records, and their small writes."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from emem_ros.core.errors import UnknownNodeError
from emem_ros.core.types import Entity, Episode, EpisodeStatus, Gist, NodeKind, Position, Tier, make_id
from emem_ros.storage import codec
from emem_ros.storage.base import StoreBase
from emem_ros.storage.sqlutil import chunked, inserted_id, marks


class GraphMixin(StoreBase):
    """``MemoryStore``'s episode, gist, entity and edge methods."""

    # ------------------------------------------------------------------ episodes
    def create_episode(self, name: str, start: float, parent_id: Optional[int] = None,
                       goal: Optional[str] = None, metadata: Optional[dict[str, Any]] = None) -> int:
        with self.write() as conn:
            if parent_id is not None and not conn.execute(
                    "SELECT 1 FROM episodes WHERE id=?", (parent_id,)).fetchone():
                raise UnknownNodeError(f"no episode {make_id(NodeKind.EPISODE, parent_id)} to nest under")
            previous = conn.execute(
                "SELECT id FROM episodes WHERE parent_id IS ? ORDER BY start DESC, id DESC LIMIT 1",
                (parent_id,),
            ).fetchone()
            cursor = conn.execute(
                "INSERT INTO episodes(name, start, status, parent_id, previous_id, goal, metadata)"
                " VALUES(?,?,?,?,?,?,?)",
                (name, start, EpisodeStatus.ACTIVE.value, parent_id,
                 previous[0] if previous else None, goal, codec.dumps(metadata)),
            )
            return inserted_id(cursor)

    def finish_episode(self, episode_id: int, end: float, *, status: str = EpisodeStatus.COMPLETED.value,
                       result: Optional[str] = None, reflection: Optional[str] = None,
                       success: Optional[bool] = None, action: Optional[str] = None) -> None:
        with self.write() as conn:
            cursor = conn.execute(
                "UPDATE episodes SET end=?, status=?, result=COALESCE(?, result),"
                " reflection=COALESCE(?, reflection), success=COALESCE(?, success),"
                " action=COALESCE(?, action) WHERE id=?",
                (end, status, result, reflection, None if success is None else int(bool(success)),
                 action, episode_id),
            )
            if cursor.rowcount == 0:
                raise UnknownNodeError(f"no episode {make_id(NodeKind.EPISODE, episode_id)}")

    def set_episode_summary(self, episode_id: int, summary: str, embedding: Optional[np.ndarray]) -> None:
        with self.write() as conn:
            conn.execute("UPDATE episodes SET summary=?, embedding=?, consolidated=1 WHERE id=?",
                         (summary, codec.vector_to_blob(embedding) if embedding is not None else None,
                          episode_id))
        if embedding is not None:
            self.update_index("episodes", lambda: self.vectors["episodes"].add(
                np.array([episode_id]), np.asarray(embedding).reshape(1, -1)))

    EPISODE_COLUMNS = ("id, name, start, end, status, parent_id, previous_id, summary, goal, action,"
                       " result, reflection, success, metadata")

    def episode_from_row(self, row: Sequence[Any]) -> Episode:
        (eid, name, start, end, status, parent, previous, summary, goal, action,
         result, reflection, success, metadata) = row
        def ep(n: Optional[int]) -> Optional[str]:
            return make_id(NodeKind.EPISODE, n) if n is not None else None

        return Episode(
            id=make_id(NodeKind.EPISODE, eid), name=name, start=start, end=end, status=status, parent_id=ep(parent),
            previous_id=ep(previous), summary=summary or "", goal=goal, action=action, result=result,
            reflection=reflection, success=None if success is None else bool(success),
            metadata=codec.loads(metadata),
        )

    def get_episode(self, episode_id: int) -> Episode:
        row = self.reader().execute(
            f"SELECT {self.EPISODE_COLUMNS} FROM episodes WHERE id=?", (episode_id,)).fetchone()
        if row is None:
            raise UnknownNodeError(f"no episode {make_id(NodeKind.EPISODE, episode_id)} in this memory")
        return self.episode_from_row(row)

    def list_episodes(self, name: Optional[str] = None, last_n: int = 10) -> list[Episode]:
        sql = f"SELECT {self.EPISODE_COLUMNS} FROM episodes"
        params: list[Any] = []
        if name:
            sql += " WHERE name = ? OR name LIKE ?"
            params += [name, f"%{name}%"]
        sql += " ORDER BY start DESC, id DESC LIMIT ?"
        params.append(int(last_n))
        return [self.episode_from_row(r) for r in self.reader().execute(sql, params)]

    # ------------------------------------------------------------------ gists
    GIST_COLUMNS = ("id, text, cx, cy, cz, radius, time_start, time_end, source_count, layers, episode_id,"
                    " created_at, metadata")

    def gist_from_row(self, row: Sequence[Any]) -> Gist:
        (gid, text, cx, cy, cz, radius, t0, t1, count, layers, episode_id, created, metadata) = row
        return Gist(
            id=make_id(NodeKind.GIST, gid), text=text,
            centroid=(cx, cy, cz) if cx is not None else None, radius=radius,
            time_start=t0, time_end=t1, source_count=count, layers=tuple(json.loads(layers or "[]")),
            episode_id=make_id(NodeKind.EPISODE, episode_id) if episode_id is not None else None,
            created_at=created, metadata=codec.loads(metadata),
        )

    def add_gist(self, conn: sqlite3.Connection, *, text: str, centroid: Optional[Position], radius: float,
                 time_start: float, time_end: float, observation_ids: Sequence[int], layers: Sequence[str],
                 embedding: Optional[np.ndarray], episode_id: Optional[int] = None,
                 metadata: Optional[dict[str, Any]] = None, now: Optional[float] = None,
                 linked_ids: Sequence[int] = ()) -> int:
        """Insert a gist inside the caller's write transaction and promote its sources.

        ``linked_ids`` (a visit's body readings) are linked and promoted with
        them in the same statements but not counted as sources. Call
        ``index_gist`` after the transaction commits.
        """
        now = time.time() if now is None else now
        cx, cy, cz = centroid if centroid is not None else (None, None, None)
        cursor = conn.execute(
            "INSERT INTO gists(text, cx, cy, cz, radius, time_start, time_end, source_count, layers,"
            " episode_id, created_at, metadata, embedding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (text, cx, cy, cz, radius, time_start, time_end, len(observation_ids),
             json.dumps(sorted(set(layers))), episode_id, now, codec.dumps(metadata),
             codec.vector_to_blob(embedding) if embedding is not None else None),
        )
        gist_id = inserted_id(cursor)
        conn.execute("INSERT INTO gists_fts(rowid, text) VALUES(?, ?)", (gist_id, text))
        ids = list(map(int, observation_ids))
        ids += map(int, linked_ids)
        for chunk in chunked(ids):
            conn.execute(
                f"UPDATE observations SET gist_id=?, tier=?, tier_since=? WHERE id IN ({marks(len(chunk))})"
                " AND tier != 'archived'",
                [gist_id, Tier.LONG_TERM.value, now, *chunk],
            )
        return gist_id

    def index_gist(self, gist_id: int, embedding: Optional[np.ndarray]) -> None:
        if embedding is not None:
            self.update_index("gists", lambda: self.vectors["gists"].add(
                np.array([gist_id]), np.asarray(embedding).reshape(1, -1)))

    def get_gists(self, ids: Sequence[int]) -> list[Gist]:
        return self._records_by_id("gists", self.GIST_COLUMNS, ids, self.gist_from_row)

    # ------------------------------------------------------------------ entities and edges
    ENTITY_COLUMNS = ("id, name, entity_type, x, y, z, spread, first_seen, last_seen, sightings, confidence,"
                      " layer, metadata")

    def entity_from_row(self, row: Sequence[Any]) -> Entity:
        (eid, name, etype, x, y, z, spread, first, last, sightings, confidence, layer, metadata) = row
        return Entity(
            id=make_id(NodeKind.ENTITY, eid), name=name, entity_type=etype,
            position=(x, y, z) if x is not None else None, spread=spread, first_seen=first,
            last_seen=last, sightings=sightings, confidence=confidence, layer=layer,
            metadata=codec.loads(metadata),
        )

    def get_entities(self, ids: Sequence[int]) -> list[Entity]:
        return self._records_by_id("entities", self.ENTITY_COLUMNS, ids, self.entity_from_row)

    def _records_by_id(self, table: str, columns: str, ids: Sequence[int], from_row: Callable[[Any], Any]) -> list[Any]:
        """Rows of ``table`` by id as records, in the order asked (missing ids skipped)."""
        ids = [int(i) for i in ids]
        found = {}
        for chunk in chunked(ids):
            for row in self.reader().execute(
                    f"SELECT {columns} FROM {table} WHERE id IN ({marks(len(chunk))})", chunk):
                found[row[0]] = from_row(row)
        return [found[i] for i in ids if i in found]

    @staticmethod
    def bump_edge(conn: sqlite3.Connection, kind: str, src: str, dst: str, weight: float = 1.0,
                  now: Optional[float] = None) -> None:
        """Add an edge or add to its weight: edges are never duplicated."""
        conn.execute(
            "INSERT INTO edges(kind, src, dst, weight, updated) VALUES(?,?,?,?,?)"
            " ON CONFLICT(kind, src, dst) DO UPDATE SET weight = weight + excluded.weight,"
            " updated = excluded.updated",
            (kind, src, dst, weight, time.time() if now is None else now),
        )
