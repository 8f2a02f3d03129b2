"""Derived indexes (hnswlib per node kind, the places R-tree): open, reconcile, repair, save.

They are caches of SQLite. On open each loads its newest snapshot and is
reconciled against SQLite (missing rows added, extra ones dropped); after a
commit an index that cannot take the new rows is marked stale and repaired
from SQLite, never failing the write that already succeeded.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from typing import Any, Callable

import numpy as np

from emem_ros.core.types import Position
from emem_ros.indexes.spatial_index import SpatialIndex
from emem_ros.indexes.vector_index import VectorIndex
from emem_ros.storage import codec
from emem_ros.storage.base import StoreBase
from emem_ros.storage.gist_graph import graph_cutoff, graph_gist_ids, left_graph_since
from emem_ros.storage.sqlutil import chunked, marks

log = logging.getLogger(__name__)

# Vector indexes by name: (table holding the vectors, integer label column,
# SQL expression of the text the vector encodes).
VECTOR_TABLES = {
    "texts": ("texts", "id", "text"),
    "gists": ("gists", "id", "text"),
    "entities": ("entities", "id", "name"),
    "episodes": ("episodes", "id", "COALESCE(NULLIF(summary, ''), name)"),
    "experiences": ("experiences", "n",
                    "goal || ' ' || action || ' ' || result || ' ' || reflection"),
    "fs_chunks": ("fs_chunks", "id", "text"),
    "fs_nodes": ("fs_nodes", "id", "name || ': ' || description"),
}


class DerivedIndexesMixin(StoreBase):
    """``MemoryStore``'s derived indexes: ``vectors`` (name -> VectorIndex) and ``places`` (R-tree)."""

    # ------------------------------------------------------------------ derived indexes
    def open_indexes(self) -> None:
        started = time.perf_counter()
        report: dict[str, Any] = {name: self._reconcile_index(name, load=True) for name in VECTOR_TABLES}
        report["places"] = self._reconcile_index("places", load=True)
        self.places.warm()  # the R-tree itself is built on a background thread; queries wait for it
        report["seconds"] = time.perf_counter() - started
        self.open_report = report

    def _reconcile_index(self, name: str, load: bool = False) -> dict[str, Any]:
        """Make one derived index hold exactly what SQLite holds (after loading its snapshot)."""
        if name == "places":
            expected = self._ids("SELECT id FROM places ORDER BY id")
            top = int(expected[-1]) if len(expected) else 0
            loaded = self.places.load(self.index_dir, top) if load else False
            missing, extra = self.places.reconcile(expected, self._fetch_place_boxes)
            return {"loaded": loaded, "caught_up": missing, "dropped": extra, "size": len(self.places)}
        table, label, _ = VECTOR_TABLES[name]
        index = self.vectors[name]
        if name == "gists":
            self.gist_cutoff = graph_cutoff(self.state.conn, self.config.gist_graph_hours)
            expected = graph_gist_ids(self.state.conn, self.gist_cutoff)
        else:
            expected = self._ids(f"SELECT {label} FROM {table} WHERE embedding IS NOT NULL ORDER BY {label}")
        top = int(expected[-1]) if len(expected) else 0
        loaded = index.load(self.index_dir, top) if load else False
        if load and not loaded and len(expected):
            log.info("%s: no usable snapshot, rebuilding %d vectors from SQLite", name, len(expected))
        missing, extra = index.reconcile(expected, functools.partial(self._fetch_vectors, table, label=label))
        return {"loaded": loaded, "caught_up": missing, "dropped": extra, "size": len(index)}

    def new_vector_index(self, name: str) -> VectorIndex:
        """An empty vector index of this memory's settings (the gists' graph reuses the slots it drops)."""
        config = self.config
        return VectorIndex(name, self.dim, m=config.hnsw_m, ef_construction=config.hnsw_ef_construction,
                           ef_search=config.hnsw_ef_search,
                           initial_capacity=config.hnsw_max_elements if name == "texts" else 1024,
                           reuse_deleted=name == "gists" and config.gist_graph_hours > 0)

    def prune_gist_graph(self) -> int:
        """Take the gists that fell behind the horizon (``gist_graph.py``) out of the graph; how many left."""
        with self.state.write_lock:  # reads through the writer connection, as reconcile does
            before = self.gist_cutoff
            cutoff = graph_cutoff(self.state.conn, self.config.gist_graph_hours)
            if cutoff <= before:
                return 0
            gone = left_graph_since(self.state.conn, before, cutoff)
            self.gist_cutoff = cutoff
        self.update_index("gists", lambda: self.vectors["gists"].remove(gone))
        return len(gone)

    def update_index(self, name: str, update: Callable[[], None]) -> None:
        """Apply a committed change to a derived index; on failure mark it stale, never raise.

        The rows are in SQLite already: raising here would make the caller retry
        a write that succeeded. A stale index is reconciled from SQLite at once,
        or at the next write, save or open.
        """
        try:
            update()
        except Exception:
            log.exception("the %s index could not take rows that are already stored; rebuilding it from SQLite",
                          name)
            self.state.stale.add(name)
        if self.state.stale:
            with self.state.write_lock:  # reconcile reads through the writer connection
                self.repair_stale()

    def repair_stale(self) -> None:
        for name in sorted(self.state.stale):
            try:
                self._reconcile_index(name)
            except Exception as exc:
                log.warning("the %s index is still behind SQLite (%s); it is caught up at the next write or"
                            " open", name, exc)
            else:
                self.state.stale.discard(name)
                log.warning("the %s index was caught up from SQLite", name)

    @property
    def stale_indexes(self) -> frozenset[str]:
        return frozenset(self.state.stale)

    def _ids(self, sql: str) -> np.ndarray:
        rows = self.state.conn.execute(sql).fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def _fetch_vectors(self, table: str, ids: np.ndarray, label: str = "id") -> np.ndarray:
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        position = {int(i): n for n, i in enumerate(ids.tolist())}
        for chunk in chunked(ids.tolist()):
            for row_id, blob in self.state.conn.execute(
                f"SELECT {label}, embedding FROM {table} WHERE {label} IN ({marks(len(chunk))})", chunk
            ):
                out[position[row_id]] = codec.blob_to_vector(blob, self.dim)
        return out

    def _fetch_place_boxes(self, ids: np.ndarray) -> np.ndarray:
        boxes = np.empty((len(ids), 6), dtype=np.float64)
        position = {int(i): n for n, i in enumerate(ids.tolist())}
        for chunk in chunked(ids.tolist()):
            for row_id, cx, cy, cz in self.state.conn.execute(
                f"SELECT id, cx, cy, cz FROM places WHERE id IN ({marks(len(chunk))})", chunk
            ):
                boxes[position[row_id]] = self.cell_box(cx, cy, cz)
        return boxes

    def cell_box(self, cx: int, cy: int, cz: int) -> tuple[float, ...]:
        s = self.cell_size
        return (cx * s, cy * s, cz * s, (cx + 1) * s, (cy + 1) * s, (cz + 1) * s)

    def cell_of(self, position: Position) -> tuple[int, int, int]:
        s = self.cell_size
        return (math.floor(position[0] / s), math.floor(position[1] / s), math.floor(position[2] / s))


    def save_indexes(self) -> bool:
        """Snapshot every derived index atomically (cheap when nothing changed); never raises.

        A snapshot is a cache of SQLite: one that cannot be written (read-only
        or full ``.idx`` folder) costs a rebuild on the next open, never data,
        so it is a warning (logged once per open), not an error that would stop
        a close. Returns whether every snapshot was written.
        """
        if self.state.stale:
            with self.state.write_lock:
                self.repair_stale()
        ok = True
        snapshots: list[tuple[str, VectorIndex | SpatialIndex]] = [*self.vectors.items(), ("places", self.places)]
        for name, index in snapshots:
            try:
                index.save(self.index_dir)
            except Exception as exc:
                ok = False
                if not self.state.save_warned:
                    self.state.save_warned = True
                    log.warning("could not save the %s index snapshot in %s (%s: %s); the memory itself is"
                                " safe and the index is rebuilt from it on the next open (warned once)",
                                name, self.index_dir, type(exc).__name__, exc)
                else:
                    log.debug("could not save the %s index snapshot: %s", name, exc)
        return ok
