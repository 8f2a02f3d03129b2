"""3-D R-tree (libspatialindex through ``rtree``) over *places*.

A place is one text seen in one grid cell; its box is the cell. A robot that
sees the same chair ten thousand times from one spot adds one entry, not ten
thousand, so the tree stays small and a radius query returns few candidates.

The entries live in sorted numpy columns (ids, boxes): they are what is saved,
loaded and reconciled against SQLite, with no Python object per entry. The
R-tree itself is built from them when a query needs it: new entries wait in
a pending list and go in on the next query, by bulk load when they are many
(libspatialindex bulk-loads several times faster than it inserts one by one),
so the ingest path never pays for tree insertions. After an open, ``warm``
builds the tree on a background thread, so neither the open nor the first
spatial query waits for it.

Deleting is a tombstone: the ids go into a sorted "dead" list that every
query filters out, which costs a binary search per deletion, so a writer
(archival, forget) never rewrites the columns or walks the tree under its
lock. When the dead are many (``COMPACT_MIN``, or a 32nd of the entries), a
background thread copies the columns without them and bulk-loads a new
tree, then swaps it in under the index lock, keeping whatever was inserted
or deleted meanwhile. Tombstones are never saved (snapshots hold the live
entries only) and a crash loses nothing: the index is a cache of SQLite,
reconciled on open (``DerivedIndexesMixin``).
"""

from __future__ import annotations

import io
import logging
import threading
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from rtree import index as rtree_index

from emem_ros.indexes.snapshots import list_snapshots, write_snapshot

log = logging.getLogger(__name__)

Box = tuple[float, float, float, float, float, float]

BULK_MIN = 4096
"""Pending entries from which the tree is rebuilt by bulk load rather than inserted into."""
COMPACT_MIN = 4096
"""Tombstones from which a background compaction drops them (also when they are a 32nd of the entries)."""


def _in_sorted(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Which ``values`` are in the ascending ``table`` (binary search, no sort of ``values``)."""
    if not len(table) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(table, values), len(table) - 1)
    return np.asarray(table[at] == values)


def _properties() -> rtree_index.Property:
    props = rtree_index.Property()
    props.dimension = 3
    return props


def _bulk_tree(ids: np.ndarray, boxes: np.ndarray) -> rtree_index.Index:
    if not len(ids):
        return rtree_index.Index(properties=_properties(), interleaved=True)
    return rtree_index.Index(
        (np.ascontiguousarray(ids, dtype=np.int64), np.ascontiguousarray(boxes[:, :3], dtype=np.float64),
         np.ascontiguousarray(boxes[:, 3:], dtype=np.float64)),
        properties=_properties(), interleaved=True,
    )


class SpatialIndex:
    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.RLock()
        self._built = threading.Condition(self._lock)
        self._id_buf = np.empty(0, np.int64)  # ids ascending, no duplicates, in [:_n]
        self._box_buf = np.empty((0, 6), np.float64)
        self._n = 0
        self._tree: Optional[rtree_index.Index] = _bulk_tree(self._ids, self._boxes)
        self._tree_size = 0
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        """Entries held in the columns but not yet in the tree (while a tree exists or is being built)."""
        self._building = False
        self._build_spoiled = False
        self._dead = np.empty(0, np.int64)
        """Tombstoned ids, ascending: still in the columns and the tree, filtered from every answer."""
        self._dead_boxes = np.empty((0, 6), np.float64)
        self._generation = 0
        """Bumped whenever the columns are rebuilt (not appended to): a compaction started before abandons."""
        self._compacting = False
        self.compactions = 0
        self.high_water = 0
        self.dirty = False

    def __len__(self) -> int:
        return self._n - len(self._dead)

    @property
    def tombstones(self) -> int:
        """Entries deleted but not yet dropped from the columns and the tree (``compact``)."""
        return len(self._dead)

    @property
    def _ids(self) -> np.ndarray:
        return self._id_buf[:self._n]

    @property
    def _boxes(self) -> np.ndarray:
        return self._box_buf[:self._n]

    def _append(self, ids: np.ndarray, boxes: np.ndarray) -> None:
        """Add entries above every id held; earlier views of the columns stay as they were."""
        n, k = self._n, len(ids)
        if n + k > len(self._id_buf):
            capacity = max(1024, 2 * (n + k))
            id_buf, box_buf = np.empty(capacity, np.int64), np.empty((capacity, 6), np.float64)
            id_buf[:n], box_buf[:n] = self._id_buf[:n], self._box_buf[:n]
            self._id_buf, self._box_buf = id_buf, box_buf
        self._id_buf[n:n + k] = ids
        self._box_buf[n:n + k] = boxes
        self._n = n + k

    def _replace(self, ids: np.ndarray, boxes: np.ndarray) -> None:
        """New columns (sorted ids); views handed out before keep the old ones."""
        self._id_buf = np.array(ids, dtype=np.int64)
        self._box_buf = np.array(boxes, dtype=np.float64).reshape(-1, 6)
        self._n = len(self._id_buf)
        self._generation += 1

    def _set_dead(self, dead: np.ndarray) -> None:
        """Tombstones (ascending, all held) and their boxes, looked up in the columns."""
        self._dead = dead
        if len(dead):
            self._dead_boxes = self._boxes[np.searchsorted(self._ids, dead)]
        else:
            self._dead_boxes = np.empty((0, 6), np.float64)

    # -- changes ----------------------------------------------------------
    def insert(self, ids: np.ndarray, boxes: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 6)
        if not len(ids):
            return
        with self._lock:
            held = self._ids
            if len(held) and int(ids.min()) <= int(held[-1]):  # not the usual append of new ids: drop known ones
                at = np.minimum(np.searchsorted(held, ids), len(held) - 1)
                fresh = held[at] != ids
                revived = ids[~fresh][_in_sorted(ids[~fresh], self._dead)]
                if len(revived):  # stored again (a reconcile): the entry is there, only the tombstone goes
                    self._set_dead(np.setdiff1d(self._dead, revived, assume_unique=True))
                    self.dirty = True
                ids, boxes = ids[fresh], boxes[fresh]
            if len(ids):
                ids, first = np.unique(ids, return_index=True)
                boxes = boxes[first]
                if len(held) and int(ids[0]) <= int(held[-1]):  # ids below the top (a reconcile): merge
                    merged = np.concatenate([held, ids])
                    order = np.argsort(merged, kind="stable")
                    self._replace(merged[order], np.concatenate([self._boxes, boxes])[order])
                else:
                    self._append(ids, boxes)
                if self._tree is not None or self._building:
                    self._pending.append((ids, boxes))
                self.high_water = max(self.high_water, int(ids[-1]))
            self.dirty = True

    def delete(self, ids: list[int]) -> None:
        """Tombstone the entries (a binary search each); a background ``compact`` drops them later."""
        gone = np.unique(np.asarray(list(ids), dtype=np.int64))
        with self._lock:
            held = self._ids
            if not len(gone) or not len(held):
                return
            gone = gone[_in_sorted(gone, held)]
            if len(self._dead):
                gone = gone[~_in_sorted(gone, self._dead)]
            if not len(gone):
                return
            self._set_dead(np.union1d(self._dead, gone))
            self.dirty = True
            if len(self._dead) >= max(COMPACT_MIN, self._n // 32):
                self.compact(wait=False)

    def compact(self, wait: bool = True) -> bool:
        """Drop the tombstoned entries: new columns and a bulk-loaded tree, built off the lock, then swapped in.

        Inserts and deletes made while it builds are kept (appended entries go
        in as pending, later tombstones stay). Gives up, to be retried by the
        next delete, if the columns were rebuilt meanwhile. ``wait``: in this
        thread (tests, close); else on a background thread. Returns whether it swapped.
        """
        with self._lock:
            if self._compacting or self._building or not len(self._dead):
                return False
            self._compacting = True
            ids, boxes, dead, generation, n = self._ids, self._boxes, self._dead, self._generation, self._n

        def build() -> bool:
            swapped = False
            try:
                keep = np.ones(len(ids), dtype=bool)
                keep[np.searchsorted(ids, dead)] = False
                live_ids, live_boxes = ids[keep], boxes[keep]
                tree = _bulk_tree(live_ids, live_boxes)
                with self._lock:
                    if self._generation == generation and not self._building:
                        added_ids = self._id_buf[n:self._n].copy()
                        added_boxes = self._box_buf[n:self._n].copy()
                        later = np.setdiff1d(self._dead, dead, assume_unique=True)
                        self._replace(np.concatenate([live_ids, added_ids]),
                                      np.concatenate([live_boxes, added_boxes]))
                        self._tree, self._tree_size = tree, len(live_ids)
                        self._pending = [(added_ids, added_boxes)] if len(added_ids) else []
                        self._set_dead(later)
                        self.compactions += 1
                        swapped = True
            except Exception:  # the tombstones stay; the next delete tries again
                log.exception("%s: compacting the R-tree failed", self.name)
            finally:
                with self._lock:
                    self._compacting = False
                    self._built.notify_all()
            return swapped

        if wait:
            return build()
        threading.Thread(target=build, name=f"emem-{self.name}-compact", daemon=True).start()
        return False

    # -- the tree ---------------------------------------------------------
    def _ready_tree(self) -> rtree_index.Index:
        """The tree with every entry in it (caller holds the lock)."""
        while self._building:
            self._built.wait()
        if self._tree is None:
            self._tree, self._tree_size = _bulk_tree(self._ids, self._boxes), len(self._ids)
            self._pending = []
        else:
            self._apply_pending()
        return self._tree

    def _apply_pending(self) -> None:
        if not self._pending:
            return
        waiting = sum(len(ids) for ids, _ in self._pending)
        if waiting >= BULK_MIN and waiting * 4 >= self._tree_size:
            self._tree, self._tree_size = _bulk_tree(self._ids, self._boxes), len(self._ids)
        else:
            tree = self._tree
            assert tree is not None  # built on first use (``_ready``) before pending boxes apply
            for ids, boxes in self._pending:
                for place_id, box in zip(ids.tolist(), boxes.tolist()):
                    tree.insert(place_id, box)
            self._tree_size += waiting
        self._pending = []

    def warm(self) -> Optional[threading.Thread]:
        """Build the tree on a background thread (after an open); queries wait for it if they come first."""
        with self._lock:
            if self._tree is not None or self._building:
                return None
            self._building, self._build_spoiled, self._pending = True, False, []
            ids, boxes = self._ids, self._boxes  # views: later inserts and deletes never change them

        def build() -> None:
            tree = None
            try:
                tree = _bulk_tree(ids, boxes)
            except Exception:  # the next query builds it in the foreground
                log.exception("%s: building the R-tree in the background failed", self.name)
            with self._lock:
                self._building = False
                if tree is not None and not self._build_spoiled and self._tree is None:
                    self._tree, self._tree_size = tree, len(ids)  # pending: what was inserted meanwhile
                else:
                    self._pending = []
                self._built.notify_all()

        thread = threading.Thread(target=build, name=f"emem-{self.name}-rtree", daemon=True)
        thread.start()
        return thread

    # -- queries ----------------------------------------------------------
    def _live(self, found: np.ndarray) -> np.ndarray:
        return found[~_in_sorted(found, self._dead)] if len(self._dead) else found

    def intersection(self, box: Box) -> np.ndarray:
        with self._lock:
            if not len(self._ids):
                return np.empty(0, np.int64)
            return self._live(np.fromiter(self._ready_tree().intersection(box), dtype=np.int64))

    def nearest(self, box: Box, k: int) -> np.ndarray:
        """Ids of the k entries nearest to ``box`` (ties may add a few; not sorted).

        With tombstones, asks the tree for more until k live ones (or all) are found.
        """
        k = int(k)
        with self._lock:
            if not len(self._ids) or k <= 0:
                return np.empty(0, np.int64)
            tree = self._ready_tree()
            found = np.fromiter(tree.nearest(box, k), dtype=np.int64)
            if not len(self._dead):
                return found
            ask = k
            while True:
                live = self._live(found)
                if len(live) >= k or len(found) < ask or ask >= self._n:
                    break
                ask = min(self._n, ask + 2 * (k - len(live)) + len(found) - len(live))
                found = np.fromiter(tree.nearest(box, ask), dtype=np.int64)
            if len(live) <= k:
                return live
            # As the tree without the tombstones answers: the k nearest and those tied with the k-th,
            # by libspatialindex's own distance (Region::getMinimumDistance).
            entries = self._boxes[np.searchsorted(self._ids, live)]
            low, high = np.asarray(box[:3], np.float64), np.asarray(box[3:], np.float64)
            gap = np.where(high < entries[:, :3], entries[:, :3] - high,
                           np.where(low > entries[:, 3:], low - entries[:, 3:], 0.0))
            distance = np.sqrt((gap * gap).sum(axis=1))
            kth = np.partition(distance, k - 1)[k - 1]
            nearest: np.ndarray = live[distance <= kth]
            return nearest

    def count(self, box: Box) -> int:
        """How many entries intersect ``box``, without listing them."""
        with self._lock:
            if not len(self._ids):
                return 0
            total = int(self._ready_tree().count(box))
            if len(self._dead):
                low, high = np.asarray(box[:3], np.float64), np.asarray(box[3:], np.float64)
                dead = self._dead_boxes
                total -= int(((dead[:, :3] <= high) & (dead[:, 3:] >= low)).all(axis=1).sum())
            return total

    def ids(self) -> np.ndarray:
        """Every live id held, ascending."""
        with self._lock:
            return self._live(self._ids)

    def _set(self, ids: np.ndarray, boxes: np.ndarray, tree_now: bool) -> None:
        with self._lock:
            while self._building:
                self._built.wait()
            order = np.argsort(ids, kind="stable")
            self._replace(ids[order], boxes[order])
            self._set_dead(np.empty(0, np.int64))
            self._pending = []
            self._tree, self._tree_size = (_bulk_tree(self._ids, self._boxes), len(self._ids)) if tree_now else (None, 0)
            self.high_water = int(self._ids[-1]) if len(self._ids) else 0

    def rebuild(self, ids: np.ndarray, boxes: np.ndarray) -> None:
        self._set(np.asarray(ids, dtype=np.int64), np.asarray(boxes, dtype=np.float64).reshape(-1, 6), True)
        self.dirty = True

    # -- persistence ----------------------------------------------------
    def save(self, folder: Path) -> None:
        with self._lock:
            if not self.dirty and list_snapshots(folder, self.name, "npz"):
                return
            ids, boxes, mark, dead = self._ids, self._boxes, self.high_water, self._dead

            def writer(path: str) -> None:
                keep = ~_in_sorted(ids, dead)  # tombstones are not saved: the snapshot holds live entries
                buffer = io.BytesIO()
                np.savez(buffer, ids=ids[keep], boxes=boxes[keep])
                with open(path, "wb") as handle:
                    handle.write(buffer.getvalue())

            write_snapshot(folder, self.name, mark, "npz", writer)
            self.dirty = False

    def load(self, folder: Path, expected_max: int) -> bool:
        """Load the newest usable snapshot's entries; the tree is built later (``warm`` or a query)."""
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
            if len(ids) > 1 and not (np.diff(ids) > 0).all():  # written by an older version: sort, dedupe
                ids, first = np.unique(ids, return_index=True)
                boxes = boxes[first]
            self._set(ids, boxes, False)
            self.high_water = mark
            self.dirty = False
            return True
        return False

    def reconcile(self, expected: np.ndarray, fetch: Callable[[np.ndarray], np.ndarray]) -> tuple[int, int]:
        """Make the index hold exactly ``expected`` ids; ``fetch`` gives boxes of missing ones."""
        expected = np.asarray(expected, dtype=np.int64)
        with self._lock:
            listed = self._live(self._ids)
            extra = np.setdiff1d(listed, expected, assume_unique=True)
            missing = np.setdiff1d(expected, listed, assume_unique=True)
            if len(extra):
                self.delete(extra.tolist())
            if len(missing):
                self.insert(missing, fetch(missing))
            if len(expected):
                self.high_water = max(self.high_water, int(np.max(expected)))
        return len(missing), len(extra)
