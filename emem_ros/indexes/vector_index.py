"""hnswlib cosine index over unit vectors, keyed by SQLite row ids.

The index is derived: SQLite holds every vector as a BLOB. On open the newest
snapshot is loaded and caught up from rows above its high-water mark; a
snapshot that cannot be read, or whose size disagrees with SQLite, is rebuilt.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable, Iterable, Optional

import hnswlib
import numpy as np

from emem_ros.indexes.snapshots import list_snapshots, write_snapshot

log = logging.getLogger(__name__)

# Below this many live vectors an exact numpy scan is as fast as the graph
# and never misses a filtered candidate.
EXACT_SCAN_LIMIT = 2048
PARALLEL_BATCH = 1024
"""Vectors added at once from which hnswlib inserts on several threads."""
PARALLEL_THREADS = max(1, min(4, os.cpu_count() or 1))


class VectorIndex:
    def __init__(
        self,
        name: str,
        dim: int,
        *,
        m: int = 16,
        ef_construction: int = 100,
        ef_search: int = 64,
        initial_capacity: int = 10_000,
        reuse_deleted: bool = False,
    ) -> None:
        self.name = name
        self.dim = dim
        self._m = m
        self._ef_construction = ef_construction
        self._ef_search = ef_search
        self._initial_capacity = max(16, initial_capacity)
        self._reuse = reuse_deleted
        """New vectors take the slots of removed ones, so an index that drops as many as it takes stays its size."""
        self._lock = threading.RLock()
        self._index: Optional[hnswlib.Index] = None
        """Made at the first vector: an hnswlib graph costs 2.6 MB before it holds any (a lock per label
        slot group), and most memories never fill some indexes (episodes, experiences, notes)."""
        self._live = 0
        self.high_water = 0
        self.dirty = False

    # -- building -------------------------------------------------------
    def _new_index(self, capacity: int) -> hnswlib.Index:
        index = hnswlib.Index(space="cosine", dim=self.dim)
        index.init_index(
            max_elements=capacity, ef_construction=self._ef_construction, M=self._m,
            allow_replace_deleted=self._reuse,
        )
        index.set_ef(self._ef_search)
        index.set_num_threads(1)
        return index

    def add(self, labels: np.ndarray, vectors: np.ndarray, parallel: bool = False) -> None:
        """Insert vectors; ``parallel`` lets a big batch use several cores (ingest of many new texts).

        Rebuilds and catch-ups stay on one thread, so they give the same graph every time.
        """
        if len(labels) == 0:
            return
        labels = np.asarray(labels, dtype=np.int64)
        vectors = np.asarray(vectors, dtype=np.float32)
        with self._lock:
            if self._index is None:
                self._index = self._new_index(max(self._initial_capacity, len(labels)))
            index = self._index
            # Slots of removed vectors are free again only where they are reused.
            needed = (self._live if self._reuse else index.get_current_count()) + len(labels)
            capacity = index.get_max_elements()
            if needed > capacity:
                index.resize_index(max(needed, capacity * 2))
            # A big batch (a stream of new texts) is inserted on several cores: insertion is the
            # slowest step of ingest then. Small batches stay on one thread.
            threads = PARALLEL_THREADS if parallel and len(labels) >= PARALLEL_BATCH else 1
            index.add_items(vectors, labels, num_threads=threads, replace_deleted=self._reuse)
            self._live += len(labels)
            self.high_water = max(self.high_water, int(labels.max()))
            self.dirty = True

    def remove(self, labels: Iterable[int]) -> None:
        with self._lock:
            index = self._index
            if index is None:
                return
            for label in labels:
                try:
                    index.mark_deleted(int(label))
                    self._live -= 1
                    self.dirty = True
                except RuntimeError:
                    pass  # not in the index (never embedded, or already deleted)

    def rebuild(self, rows: Iterable[tuple[np.ndarray, np.ndarray]], total: int) -> None:
        """Replace the index with vectors streamed from SQLite in chunks."""
        with self._lock:
            self._index = self._new_index(max(self._initial_capacity, total + 1)) if total else None
            self._live = 0
            self.high_water = 0
            for labels, vectors in rows:
                self.add(labels, vectors)
            self.dirty = True

    def adopt(self, other: "VectorIndex") -> None:
        """Serve from ``other``'s graph from now on (a compacted copy built beside this one)."""
        with self._lock, other._lock:
            self._index, self._live, self.high_water = other._index, other._live, other.high_water
            self.dirty = True

    # -- querying -------------------------------------------------------
    def __len__(self) -> int:
        return self._live

    def labels(self) -> np.ndarray:
        """Every label the index holds (deleted ones included: hnswlib keeps them listed)."""
        with self._lock:
            if self._index is None:
                return np.empty(0, np.int64)
            return np.asarray(self._index.get_ids_list(), dtype=np.int64)

    def vectors_of(self, labels: np.ndarray) -> np.ndarray:
        """The vectors the index holds for ``labels`` (unit length: cosine space normalises them)."""
        with self._lock:
            if self._index is None:
                if len(labels):
                    raise RuntimeError("Label not found")  # as hnswlib says
                return np.empty((0, self.dim), np.float32)
            return np.asarray(self._index.get_items(np.asarray(labels, dtype=np.int64)), dtype=np.float32)

    def held_vectors(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``labels`` the index holds (not deleted), and their vectors (unit length), in order."""
        labels = np.asarray(labels, dtype=np.int64)
        with self._lock:
            index = self._index
            if index is None:
                return np.zeros(len(labels), dtype=bool), np.empty((0, self.dim), np.float32)
            try:
                return np.ones(len(labels), dtype=bool), self.vectors_of(labels)
            except RuntimeError:  # some label is missing or deleted: ask one by one
                held = np.zeros(len(labels), dtype=bool)
                out = np.zeros((len(labels), self.dim), dtype=np.float32)
                for i, label in enumerate(labels.tolist()):
                    try:
                        out[i] = np.asarray(index.get_items([label]), dtype=np.float32)[0]
                        held[i] = True
                    except RuntimeError:
                        pass
                return held, out[held]

    def search(
        self,
        vector: np.ndarray,
        k: int,
        allowed: Optional[Callable[[int], bool]] = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Labels and cosine similarities of the k nearest, best first."""
        with self._lock:
            live, index = self._live, self._index
            if index is None or live == 0 or k <= 0:
                return np.empty(0, np.int64), np.empty(0, np.float32)
            k = min(k, live)
            index.set_ef(max(self._ef_search, k))
            try:
                labels, distances = index.knn_query(
                    np.asarray(vector, np.float32).reshape(1, -1), k=k, filter=allowed, num_threads=1
                )
            except RuntimeError:
                # hnswlib raises when fewer than k elements pass the filter.
                return self._search_fewer(index, vector, k, allowed)
        return labels[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)

    @staticmethod
    def _search_fewer(index: hnswlib.Index, vector: np.ndarray, k: int,
                      allowed: Optional[Callable[[int], bool]]) -> tuple[np.ndarray, np.ndarray]:
        while k > 1:
            k //= 2
            try:
                labels, distances = index.knn_query(
                    np.asarray(vector, np.float32).reshape(1, -1), k=k, filter=allowed, num_threads=1
                )
                return labels[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)
            except RuntimeError:
                continue
        return np.empty(0, np.int64), np.empty(0, np.float32)

    # -- persistence ----------------------------------------------------
    def save(self, folder: Path) -> None:
        with self._lock:
            index = self._index
            if index is None or (not self.dirty and list_snapshots(folder, self.name, "hnsw")):
                return  # (no graph: nothing to save, and the next open expects none)
            write_snapshot(folder, self.name, self.high_water, "hnsw", index.save_index)
            self.dirty = False

    def load(self, folder: Path, expected_max: int) -> bool:
        """Load the newest readable snapshot; False when none could be used (or none is needed)."""
        if expected_max <= 0:
            return False
        for mark, path in list_snapshots(folder, self.name, "hnsw"):
            if mark > expected_max:
                log.warning("%s: snapshot %s is ahead of the database; ignoring it", self.name, path.name)
                continue
            index = hnswlib.Index(space="cosine", dim=self.dim)
            try:
                index.load_index(str(path), max_elements=0, allow_replace_deleted=self._reuse)
            except Exception as exc:  # hnswlib raises RuntimeError, or worse, on a bad file
                log.warning("%s: snapshot %s is unreadable (%s); rebuilding", self.name, path.name, exc)
                continue
            if index.dim != self.dim:
                log.warning("%s: snapshot %s has dim %d, expected %d", self.name, path.name, index.dim, self.dim)
                continue
            index.set_ef(self._ef_search)
            index.set_num_threads(1)
            with self._lock:
                self._index = index
                self._live = index.get_current_count()  # deleted ones too, until reconcile drops them
                self.high_water = mark
                self.dirty = False
            return True
        return False

    def reconcile(
        self, expected: np.ndarray, fetch: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[int, int]:
        """Make the index hold exactly ``expected`` labels: add missing, drop extra.

        Deleted labels stay listed by hnswlib, so a label that is both listed and
        expected but deleted is restored through ``fetch`` as well.
        """
        with self._lock:
            listed = self.labels()
            expected = np.asarray(expected, dtype=np.int64)
            if len(listed) == len(expected) and self._live == len(listed):
                # The usual open: the snapshot is in step. One sort and compare instead of two set differences.
                listed.sort()
                if np.array_equal(listed, np.sort(expected)):
                    if len(expected):
                        self.high_water = max(self.high_water, int(listed[-1]))
                    return 0, 0
            extra = np.setdiff1d(listed, expected, assume_unique=False)
            missing = np.setdiff1d(expected, listed, assume_unique=False)
            for label in extra:
                try:
                    self._index.mark_deleted(int(label))  # type: ignore[union-attr]  # extra: it is there
                except RuntimeError:
                    pass
            self._live = len(listed) - len(extra)
            if len(missing):
                for start in range(0, len(missing), 4096):
                    chunk = missing[start : start + 4096]
                    self.add(chunk, fetch(chunk))
            if len(extra):
                self.dirty = True
            if len(expected):
                self.high_water = max(self.high_water, int(expected.max()))
        return len(missing), len(extra)

