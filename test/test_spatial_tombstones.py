"""R-tree deletes are tombstones: answers exclude them at once, compaction drops them, nothing is lost."""

from __future__ import annotations

import time

import numpy as np

from emem_ros.indexes import spatial_index
from emem_ros.indexes.spatial_index import SpatialIndex


def _grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.arange(1, n + 1, dtype=np.int64)
    x = (ids % 50).astype(np.float64) * 0.5
    y = (ids // 50).astype(np.float64) * 0.5
    boxes = np.column_stack([x, y, np.zeros(n), x + 0.5, y + 0.5, np.full(n, 0.5)])
    return ids, boxes


def _answers(index: SpatialIndex) -> tuple:
    box = (2.0, 2.0, -1.0, 9.0, 7.0, 1.0)
    near = (5.2, 5.2, 0.0, 5.2, 5.2, 0.0)
    return (sorted(index.intersection(box).tolist()), sorted(index.nearest(near, 25).tolist()),
            index.count(box), index.ids().tolist(), len(index))


def _fresh(ids: np.ndarray, boxes: np.ndarray, gone: set[int]) -> SpatialIndex:
    keep = np.array([i not in gone for i in ids.tolist()])
    index = SpatialIndex("fresh")
    index.insert(ids[keep], boxes[keep])
    return index


def test_deleted_entries_vanish_from_every_answer_before_and_after_compaction():
    ids, boxes = _grid(2000)
    index = SpatialIndex("places")
    index.insert(ids, boxes)
    index.intersection((0, 0, 0, 1, 1, 1))  # the tree exists: deletes would have walked it
    gone = set(range(300, 700))  # a dense block around the nearest query's point
    index.delete(sorted(gone))
    assert index.tombstones == len(gone)
    expected = _answers(_fresh(ids, boxes, gone))
    assert _answers(index) == expected
    assert not set(index.nearest((5.2, 5.2, 0.0, 5.2, 5.2, 0.0), 25).tolist()) & gone
    assert index.compact(wait=True)
    assert index.tombstones == 0 and index.compactions == 1
    assert _answers(index) == expected


def test_a_deleted_id_stored_again_is_revived_and_unknown_ids_are_ignored():
    ids, boxes = _grid(100)
    index = SpatialIndex("places")
    index.insert(ids, boxes)
    index.delete([5, 6, 999])
    assert len(index) == 98 and index.tombstones == 2
    index.insert(np.array([5]), boxes[4:5])  # a reconcile found it in SQLite
    assert 5 in index.ids().tolist() and 6 not in index.ids().tolist()
    index.reconcile(ids[ids != 7], lambda missing: boxes[missing - 1])
    assert index.ids().tolist() == [i for i in range(1, 101) if i != 7]


def test_compaction_keeps_what_was_inserted_and_deleted_while_it_built(monkeypatch):
    ids, boxes = _grid(1000)
    index = SpatialIndex("places")
    index.insert(ids[:900], boxes[:900])
    index.delete(list(range(1, 101)))
    real = spatial_index._bulk_tree

    def meanwhile(build_ids, build_boxes):
        monkeypatch.setattr(spatial_index, "_bulk_tree", real)
        index.insert(ids[900:], boxes[900:])  # new places arrive while the tree is built
        index.delete([200, 950])
        return real(build_ids, build_boxes)

    monkeypatch.setattr(spatial_index, "_bulk_tree", meanwhile)
    assert index.compact(wait=True)
    assert index.tombstones == 2  # the later deletes stay tombstones; the first hundred are gone
    assert _answers(index) == _answers(_fresh(ids, boxes, set(range(1, 101)) | {200, 950}))


def test_a_snapshot_holds_live_entries_only(tmp_path):
    ids, boxes = _grid(500)
    index = SpatialIndex("places")
    index.insert(ids, boxes)
    index.delete(list(range(10, 60)))
    index.save(tmp_path)
    loaded = SpatialIndex("places")
    assert loaded.load(tmp_path, 500)
    assert loaded.tombstones == 0
    assert _answers(loaded) == _answers(index)


def test_many_deletes_compact_on_a_background_thread():
    ids, boxes = _grid(spatial_index.COMPACT_MIN * 2)
    index = SpatialIndex("places")
    index.insert(ids, boxes)
    index.delete(ids[:spatial_index.COMPACT_MIN].tolist())
    for _ in range(200):  # the swap happens under the index lock; wait for it without timing anything
        with index._lock:
            if not index._compacting:
                break
        time.sleep(0.05)
    assert index.compactions == 1 and index.tombstones == 0
    assert index.ids().tolist() == ids[spatial_index.COMPACT_MIN:].tolist()
