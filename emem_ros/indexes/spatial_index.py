"""3-D R-tree (libspatialindex through ``rtree``) over *places*.

A place is one text seen in one grid cell; its box is the cell. A robot that
sees the same chair ten thousand times from one spot adds one entry, not ten
thousand, so the tree stays small and a radius query returns few candidates.
"""

from __future__ import annotations

import io
import logging
import threading
from pathlib import Path
from typing import Callable

import numpy as np
from rtree import index as rtree_index

from emem_ros.indexes.snapshots import list_snapshots, write_snapshot

log = logging.getLogger(__name__)

Box = tuple[float, float, float, float, float, float]


def _properties() -> rtree_index.Property:
    props = rtree_index.Property()
    props.dimension = 3
    return props


class SpatialIndex:
    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.RLock()
        self._tree = rtree_index.Index(properties=_properties(), interleaved=True)
        self._boxes: dict[int, Box] = {}
        self.high_water = 0
        self.dirty = False

    def __len__(self) -> int:
        return len(self._boxes)

    def insert(self, ids: np.ndarray, boxes: np.ndarray) -> None:
        with self._lock:
            for place_id, box in zip(ids.tolist(), boxes.tolist()):
                if place_id in self._boxes:
                    continue
                self._tree.insert(place_id, box)
                self._boxes[place_id] = tuple(box)
                self.high_water = max(self.high_water, place_id)
            self.dirty = True

    def delete(self, ids: list[int]) -> None:
        with self._lock:
            for place_id in ids:
                box = self._boxes.pop(int(place_id), None)
                if box is not None:
                    self._tree.delete(int(place_id), box)
                    self.dirty = True

    def intersection(self, box: Box) -> np.ndarray:
        with self._lock:
            if not self._boxes:
                return np.empty(0, np.int64)
            return np.fromiter(self._tree.intersection(box), dtype=np.int64)

    def _bulk(self, ids: np.ndarray, boxes: np.ndarray) -> None:
        with self._lock:
            if len(ids):
                mins = np.ascontiguousarray(boxes[:, :3], dtype=np.float64)
                maxs = np.ascontiguousarray(boxes[:, 3:], dtype=np.float64)
                self._tree = rtree_index.Index(
                    (np.ascontiguousarray(ids, dtype=np.int64), mins, maxs),
                    properties=_properties(), interleaved=True,
                )
            else:
                self._tree = rtree_index.Index(properties=_properties(), interleaved=True)
            self._boxes = {int(i): tuple(b) for i, b in zip(ids.tolist(), boxes.tolist())}
            self.high_water = int(ids.max()) if len(ids) else 0

    def rebuild(self, ids: np.ndarray, boxes: np.ndarray) -> None:
        self._bulk(ids, boxes)
        self.dirty = True

    # -- persistence ----------------------------------------------------
    def save(self, folder: Path) -> None:
        with self._lock:
            if not self.dirty and list_snapshots(folder, self.name, "npz"):
                return
            ids = np.fromiter(self._boxes.keys(), dtype=np.int64, count=len(self._boxes))
            boxes = np.array(list(self._boxes.values()), dtype=np.float64).reshape(-1, 6)

            def writer(path: str) -> None:
                buffer = io.BytesIO()
                np.savez(buffer, ids=ids, boxes=boxes)
                with open(path, "wb") as handle:
                    handle.write(buffer.getvalue())

            write_snapshot(folder, self.name, self.high_water, "npz", writer)
            self.dirty = False

    def load(self, folder: Path, expected_max: int) -> bool:
        for mark, path in list_snapshots(folder, self.name, "npz"):
            if mark > expected_max:
                log.warning("%s: snapshot %s is ahead of the database; ignoring it", self.name, path.name)
                continue
            try:
                with np.load(path) as data:
                    ids, boxes = data["ids"].astype(np.int64), data["boxes"].astype(np.float64)
                if boxes.shape != (len(ids), 6) or not np.isfinite(boxes).all():
                    raise ValueError(f"bad shape {boxes.shape}")
            except Exception as exc:
                log.warning("%s: snapshot %s is unreadable (%s); rebuilding", self.name, path.name, exc)
                continue
            self._bulk(ids, boxes)
            self.high_water = mark
            self.dirty = False
            return True
        return False

    def reconcile(self, expected: np.ndarray, fetch: Callable[[np.ndarray], np.ndarray]) -> tuple[int, int]:
        """Make the tree hold exactly ``expected`` ids; ``fetch`` gives boxes of missing ones."""
        with self._lock:
            listed = np.fromiter(self._boxes.keys(), dtype=np.int64, count=len(self._boxes))
            extra = np.setdiff1d(listed, expected)
            missing = np.setdiff1d(expected, listed)
            self.delete(extra.tolist())
            if len(missing):
                self.insert(missing, fetch(missing))
            if len(expected):
                self.high_water = max(self.high_water, int(np.max(expected)))
        return len(missing), len(extra)
