"""Reading observations, text vectors and places back as records."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from emem_ros.core.errors import UnknownNodeError
from emem_ros.core.types import NodeKind, Observation, Position, make_id, parse_id
from emem_ros.storage import codec
from emem_ros.storage.base import StoreBase
from emem_ros.storage.records import Place
from emem_ros.storage.sqlutil import chunked, marks

OBSERVATION_COLUMNS = (
    "o.id, t.text, o.stamp, o.layer, o.source_type, o.x, o.y, o.z, o.frame_id, o.confidence, "
    "o.episode_id, o.gist_id, o.tier, o.value, o.metadata"
)


class ObservationReadsMixin(StoreBase):
    """``MemoryStore``'s reads of observations and places (through each thread's reader connection)."""

    # ------------------------------------------------------------------ reading observations
    def observation_from_row(self, row: Sequence[Any]) -> Observation:
        (oid, text, stamp, layer, source_type, x, y, z, frame_id, confidence,
         episode_id, gist_id, tier, value, metadata) = row
        return Observation(
            id=make_id(NodeKind.OBSERVATION, oid),
            text=text if text is not None else "",
            stamp=stamp, layer=layer, source_type=source_type,
            position=(x, y, z) if x is not None else None,
            frame_id=frame_id or self.config.frame_id, confidence=confidence,
            episode_id=make_id(NodeKind.EPISODE, episode_id) if episode_id is not None else None,
            gist_id=make_id(NodeKind.GIST, gist_id) if gist_id is not None else None,
            tier=tier, value=value, metadata=codec.loads(metadata),
        )

    def get_observations(self, ids: Sequence[int]) -> list[Observation]:
        """Observations by row id, in the order asked (missing ids are skipped)."""
        found: dict[int, Observation] = {}
        ids = [int(i) for i in ids]
        for chunk in chunked(ids):
            for row in self.reader().execute(
                f"SELECT {OBSERVATION_COLUMNS} FROM observations o LEFT JOIN texts t ON t.id = o.text_id"
                f" WHERE o.id IN ({marks(len(chunk))})", chunk,
            ):
                found[row[0]] = self.observation_from_row(row)
        return [found[i] for i in ids if i in found]

    def get_observation(self, node_id: str) -> Observation:
        kind, number = parse_id(node_id)
        if kind is not NodeKind.OBSERVATION:
            raise UnknownNodeError(f"{node_id} is not an observation id")
        found = self.get_observations([number])
        if not found:
            raise UnknownNodeError(f"no observation {node_id} in this memory")
        return found[0]

    def query_observations(self, where: str = "1", params: Sequence[Any] = (), order: str = "o.stamp DESC",
                           limit: Optional[int] = None) -> list[Observation]:
        """Observations matching a SQL condition over ``o`` (observations) and ``t`` (texts)."""
        sql = (f"SELECT {OBSERVATION_COLUMNS} FROM observations o LEFT JOIN texts t ON t.id = o.text_id"
               f" WHERE {where} ORDER BY {order}")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [self.observation_from_row(r) for r in self.reader().execute(sql, tuple(params))]

    def text_vectors(self, text_ids: Sequence[int]) -> np.ndarray:
        """Stored vectors of texts (zero rows for texts without one)."""
        out = np.zeros((len(text_ids), self.dim), dtype=np.float32)
        position = {int(t): n for n, t in enumerate(text_ids)}
        ids = list(position)
        for chunk in chunked(ids):
            for text_id, blob in self.reader().execute(
                f"SELECT id, embedding FROM texts WHERE id IN ({marks(len(chunk))}) AND embedding IS NOT NULL", chunk
            ):
                out[position[text_id]] = codec.blob_to_vector(blob, self.dim)
        return out

    def place_ids_nearest(self, center: Position, k: int, three_d: bool = False) -> np.ndarray:
        """Ids of the k places whose cells are nearest to ``center`` (ties add a few; not sorted).

        Horizontal distance unless ``three_d``. Read helper for the retrieval
        tools: a dense area may hold thousands of places, the nearest few
        are what a "what is here" answer needs.
        """
        cx, cy, cz = center
        query = (cx, cy, cz, cx, cy, cz) if three_d else (cx, cy, -1e9, cx, cy, 1e9)
        return self.places.nearest(query, int(k))

    def count_places_in(self, box: tuple[float, float, float, float, float, float]) -> int:
        """How many place cells intersect a box, without listing them."""
        return self.places.count(box)

    def places_within(self, center: Position, radius: float, layer: Optional[str] = None) -> list[Place]:
        """Places whose centroid lies within ``radius`` (3-D) of ``center``."""
        cx, cy, cz = center
        box = (cx - radius, cy - radius, cz - radius - self.cell_size,
               cx + radius, cy + radius, cz + radius + self.cell_size)
        ids = self.places.intersection(box)
        if len(ids) == 0:
            return []
        places = self.get_places(ids.tolist(), layer=layer)
        r2 = radius * radius
        return [p for p in places
                if (p.centroid[0] - cx) ** 2 + (p.centroid[1] - cy) ** 2 <= r2]

    def get_places(self, ids: Sequence[int], layer: Optional[str] = None) -> list[Place]:
        out: list[Place] = []
        ids = list(ids)
        for chunk in chunked(ids):
            sql = (
                "SELECT p.id, p.text_id, t.text, p.layer, p.count, p.sx, p.sy, p.sz, p.first_stamp,"
                " p.last_stamp, p.last_obs_id FROM places p JOIN texts t ON t.id = p.text_id"
                f" WHERE p.id IN ({marks(len(chunk))})"
            )
            params: list[Any] = list(chunk)
            if layer:
                sql += " AND p.layer = ?"
                params.append(layer)
            for pid, tid, text, lay, count, sx, sy, sz, first, last, last_obs in self.reader().execute(sql, params):
                out.append(Place(pid, tid, text, lay, count, (sx / count, sy / count, sz / count),
                                 first, last, last_obs))
        return out

    def places_of_texts(self, text_ids: Sequence[int]) -> list[Place]:
        ids = [int(t) for t in text_ids]
        out: list[int] = []
        for chunk in chunked(ids):
            out.extend(r[0] for r in self.reader().execute(
                f"SELECT id FROM places WHERE text_id IN ({marks(len(chunk))})", chunk))
        return self.get_places(out)
