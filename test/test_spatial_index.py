"""The places R-tree: entries in columns, the tree built lazily (pending inserts, background warm-up)."""

from __future__ import annotations

import numpy as np

from emem_ros.indexes.snapshots import write_snapshot
from emem_ros.indexes.spatial_index import BULK_MIN, SpatialIndex


def cells(ids: np.ndarray) -> np.ndarray:
    """A 0.5 m cell per id, spread over a 40 x 40 m floor."""
    x, y = (ids % 80) * 0.5, (ids // 80 % 80) * 0.5
    return np.stack([x, y, np.zeros_like(x), x + 0.5, y + 0.5, np.full_like(x, 0.5)], axis=1).astype(np.float64)


def inside(ids: np.ndarray, box) -> set[int]:
    b = cells(ids)
    hit = (b[:, 0] <= box[3]) & (b[:, 3] >= box[0]) & (b[:, 1] <= box[4]) & (b[:, 4] >= box[1]) \
        & (b[:, 2] <= box[5]) & (b[:, 5] >= box[2])
    return set(ids[hit].tolist())


BOX = (3.2, 0.2, 0.0, 9.9, 12.3, 1.0)


def test_inserts_wait_for_the_next_query_and_are_never_missed():
    index = SpatialIndex("places")
    few = np.arange(1, 50, dtype=np.int64)
    index.insert(few, cells(few))
    assert index.intersection(BOX).tolist() and set(index.intersection(BOX).tolist()) == inside(few, BOX)
    many = np.arange(50, 50 + 2 * BULK_MIN, dtype=np.int64)  # enough to be bulk-loaded
    index.insert(many, cells(many))
    index.insert(many[:10], cells(many[:10]))  # known ids are not added twice
    every = np.concatenate([few, many])
    assert len(index) == len(every)
    assert set(index.intersection(BOX).tolist()) == inside(every, BOX)
    assert index.count(BOX) == len(inside(every, BOX))
    index.delete(many[:100].tolist())
    assert set(index.intersection(BOX).tolist()) == inside(np.setdiff1d(every, many[:100]), BOX)
    assert index.high_water == int(many[-1])


def test_warm_up_in_the_background_keeps_changes_made_meanwhile(tmp_path):
    ids = np.arange(1, 20_001, dtype=np.int64)
    source = SpatialIndex("places")
    source.insert(ids, cells(ids))
    source.save(tmp_path)

    opened = SpatialIndex("places")
    assert opened.load(tmp_path, expected_max=int(ids[-1]))
    thread = opened.warm()
    assert thread is not None
    later = np.arange(20_001, 20_101, dtype=np.int64)
    opened.insert(later, cells(later))  # during or after the build: either way it must be found
    thread.join(30)
    every = np.concatenate([ids, later])
    assert set(opened.intersection(BOX).tolist()) == inside(every, BOX)

    again = SpatialIndex("places")
    again.load(tmp_path, expected_max=int(ids[-1]))
    again.warm()
    gone = [int(i) for i in ids[:5000]]
    again.delete(gone)  # a delete racing the build spoils it: the query builds again, without them
    assert set(again.intersection(BOX).tolist()) == inside(ids[5000:], BOX)
    assert len(again) == len(ids) - 5000


def test_snapshot_of_unsorted_entries_loads_sorted_and_reconciles(tmp_path):
    ids = np.array([7, 3, 9, 3, 1], dtype=np.int64)  # as an older version could write them

    def writer(path: str) -> None:
        with open(path, "wb") as handle:
            np.savez(handle, ids=ids, boxes=cells(ids))

    write_snapshot(tmp_path, "places", 9, "npz", writer)
    index = SpatialIndex("places")
    assert index.load(tmp_path, expected_max=9)
    assert index.ids().tolist() == [1, 3, 7, 9]
    missing, extra = index.reconcile(np.array([1, 3, 9, 12], dtype=np.int64), cells)
    assert (missing, extra) == (1, 1)
    assert index.ids().tolist() == [1, 3, 9, 12]
    assert set(index.intersection((-1, -1, -1, 100, 100, 1)).tolist()) == {1, 3, 9, 12}
    assert index.nearest((6.0, 0.0, 0.0, 6.0, 0.0, 0.0), 1).tolist() == [12]


def test_a_delete_with_many_pending_entries_rebuilds_the_tree_instead_of_inserting_them_one_by_one():
    index = SpatialIndex("places")
    n = BULK_MIN + 100
    ids = np.arange(1, n + 1, dtype=np.int64)
    boxes = np.array([(i, 0.0, 0.0, i + 0.5, 0.5, 0.5) for i in range(n)], dtype=np.float64)
    index.insert(ids, boxes)  # pending: the tree has not seen them
    index.delete([1, 2, 3])
    assert sorted(index.intersection((0.0, 0.0, 0.0, 3.9, 0.5, 0.5)).tolist()) == [4]
    assert len(index) == n - 3 and index.count((0.0, 0.0, 0.0, float(n), 1.0, 1.0)) == n - 3
