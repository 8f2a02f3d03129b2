"""A read-side mirror of the places table in numpy columns, kept exact by the writer's change log.

The spatial tools read places around a point hundreds at a time; from
SQLite each row costs more to turn into Python objects than the query costs
to find it. The places table holds one row per text per 0.5 m cell (a few
tens of thousands for a building, however long the robot runs), so it is
mirrored whole: read once, then only the cells a commit touched are read
again, before the next query answers, and rows a commit deleted (archival,
forget) are dropped from the columns, not read again.

Exactness: every writer that upserts places goes through
``MemoryStore.upsert_places``, whose keys are recorded in ``PlaceChanges``
after the transaction commits. A reader takes the change sequence before
it reads rows, so a commit racing with the read is re-read later, never
missed. Deleted places are recorded as ``(place_id,)`` entries in the same
log; a cache that fell behind the bounded change log reads everything again. A table too
big to mirror (``MAX_ROWS``) is queried in SQLite instead, with the same
results.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from emem_ros.storage.events import Commit, PlaceKey
from emem_ros.storage.place_grid import CellGrid
from emem_ros.storage.sqlutil import chunked, marks

log = logging.getLogger(__name__)

Key = PlaceKey
Change = tuple[Any, ...]
"""A place key (upserted row) or ``(place_id,)`` (deleted row)."""
Reader = Callable[[], sqlite3.Connection]

COLUMNS = "id, text_id, layer, count, sx, sy, sz, first_stamp, last_stamp, last_obs_id, cx, cy, cz"
MAX_ROWS = 1_000_000
"""Places mirrored at most (~110 B each); a bigger table (a stream of unique texts makes one place per
observation) is queried in SQLite instead."""
MAX_CHANGES = 100_000
"""Changed keys remembered for a cache nobody asks (about 10 MB); a cache further behind reads everything
again (one pass over the places table, which is small)."""


class PlaceChanges:
    """Keys of place rows written by committed transactions, in commit order (bounded)."""

    def __init__(self, capacity: int = MAX_CHANGES) -> None:
        self._lock = threading.Lock()
        self._capacity = capacity
        self._keys: deque[Change] = deque()
        self._first = 0  # sequence number of self._keys[0]
        self.seq = 0
        """Keys recorded so far (grows by one per key)."""
        self.epoch = 0
        """Bumped by ``reset``: rows were deleted, every cache must read again."""

    def record(self, keys: Sequence[Change]) -> None:
        with self._lock:
            self._keys.extend(keys)
            self.seq += len(keys)
            while len(self._keys) > self._capacity:
                self._keys.popleft()
                self._first += 1

    def reset(self) -> None:
        with self._lock:
            self.epoch += 1

    def since(self, seq: int, epoch: int) -> tuple[Optional[list[Change]], int, int]:
        """(keys recorded after ``seq`` or None when they are no longer known, seq, epoch).

        The log has one reader (its cache), which asks again only with the seq returned here: keys
        handed out are dropped, so the log holds what happened since the last question, not the
        history (it held every key of a day's commits before: RSS that grew with the memory)."""
        with self._lock:
            if epoch != self.epoch or seq < self._first:
                keys: Optional[list[Change]] = None
            else:
                start = seq - self._first
                keys = [self._keys[i] for i in range(start, len(self._keys))] if start < len(self._keys) else []
            self._keys.clear()
            self._first = self.seq
            return keys, self.seq, self.epoch


@dataclass
class PlaceArrays:
    """Place rows as columns (the places table's, with centroid sums as stored)."""

    id: np.ndarray
    text_id: np.ndarray
    layer: np.ndarray  # object array of str
    count: np.ndarray  # float64 (exact for counts below 2**53)
    sx: np.ndarray
    sy: np.ndarray
    sz: np.ndarray
    first: np.ndarray
    last: np.ndarray
    last_obs: np.ndarray
    cx: np.ndarray
    cy: np.ndarray
    cz: np.ndarray

    FIELDS = ("id", "text_id", "layer", "count", "sx", "sy", "sz", "first", "last", "last_obs", "cx", "cy", "cz")

    def __len__(self) -> int:
        return len(self.id)

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, ...]]) -> "PlaceArrays":
        if not rows:
            return cls.empty()
        cols = list(zip(*rows))
        return cls(np.asarray(cols[0], np.int64), np.asarray(cols[1], np.int64), np.asarray(cols[2], object),
                   np.asarray(cols[3], np.float64), np.asarray(cols[4], np.float64), np.asarray(cols[5], np.float64),
                   np.asarray(cols[6], np.float64), np.asarray(cols[7], np.float64), np.asarray(cols[8], np.float64),
                   np.asarray(cols[9], np.int64), np.asarray(cols[10], np.int64), np.asarray(cols[11], np.int64),
                   np.asarray(cols[12], np.int64))

    @classmethod
    def empty(cls) -> "PlaceArrays":
        return cls(*(np.empty(0, object if f == "layer" else np.int64 if f in ("id", "text_id", "last_obs", "cx", "cy",
                                                                               "cz") else np.float64)
                     for f in cls.FIELDS))

    def take(self, index: np.ndarray) -> "PlaceArrays":
        return PlaceArrays(*(getattr(self, f)[index] for f in self.FIELDS))

    @classmethod
    def concat(cls, parts: Sequence["PlaceArrays"]) -> "PlaceArrays":
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.FIELDS))

    def rows(self) -> list[tuple[Any, ...]]:
        """As the tuples ``SELECT id, text_id, layer, count, sx, sy, sz, first, last, last_obs`` gives."""
        count = [int(c) for c in self.count.tolist()]
        return list(zip(self.id.tolist(), self.text_id.tolist(), self.layer.tolist(), count, self.sx.tolist(),
                        self.sy.tolist(), self.sz.tolist(), self.first.tolist(), self.last.tolist(),
                        self.last_obs.tolist()))


class PlaceCache:
    """Every place row in numpy columns (sorted by id), with per-text row lists, kept exact incrementally.

    Loaded on first use (one pass over the places table, which holds one row
    per text per 0.5 m cell, not one per observation); afterwards a query
    first applies the cells committed since (re-read by key), so it costs
    a few array operations instead of materialising rows from SQLite.
    """

    def __init__(self, reader: Reader, cell_size: float, max_rows: int = MAX_ROWS) -> None:
        self._reader = reader
        self._cell_size = cell_size
        self.changes = PlaceChanges()
        self._lock = threading.RLock()
        self._max_rows = max_rows
        self._seq = 0
        self._epoch = 0
        self._loaded = False
        self._n = 0
        self._cols: dict[str, np.ndarray] = {}
        self._layer_names: list[str] = []
        self._layer_code: dict[str, int] = {}
        self._by_text: dict[int, np.ndarray] = {}
        self._by_text_cell: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        """Per text, its rows in (layer name, cx, cy, cz) order: ``near``'s order without a sort per query."""
        self._grid: Optional[CellGrid] = None
        """Rows per cell for ``nearest``: built on first use, extended by appends."""
        self.enabled = True
        """False when the places table is too big to mirror: queries go to SQLite instead."""

    # ------------------------------------------------------------------ freshness
    def on_commit(self, commit: Commit) -> None:
        """The store committed: remember the cells it wrote; deleted rows mean reading everything again."""
        try:
            if commit.removed_places:  # first: a key touched in the same commit belongs to a surviving row
                self.changes.record([(int(place_id),) for place_id in commit.removed_places])
            if commit.touched_places:
                self.changes.record(commit.touched_places)
        except Exception:  # committed: a failing cache must not make the caller retry the write
            log.exception("the place cache could not record a commit; clearing it")
            self.clear()

    def clear(self) -> None:
        with self._lock:
            self._loaded = False
            self._cols, self._by_text, self._n = {}, {}, 0
            self._by_text_cell = {}
            self._grid = None

    def _ensure(self) -> None:
        keys, seq, epoch = self.changes.since(self._seq, self._epoch)
        self._seq, self._epoch = seq, epoch  # before reading rows: a commit racing the read is re-read later
        if not self._loaded or keys is None:
            self._load_all()
        elif keys and self.enabled:
            self._apply(keys)

    def _load_all(self) -> None:
        conn = self._reader()
        self._cols, self._by_text, self._n = {}, {}, 0
        self._by_text_cell = {}
        self._grid = None
        self._layer_names, self._layer_code = [], {}
        self.enabled = conn.execute("SELECT COUNT(*) FROM places").fetchone()[0] <= self._max_rows
        if self.enabled:
            self._append(conn.execute(f"SELECT {COLUMNS} FROM places ORDER BY id").fetchall())
        self._loaded = True

    def _append(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Add rows with ids above every id held (AUTOINCREMENT: new places only ever get larger ids)."""
        if not rows:
            return
        n, k = self._n, len(rows)
        cols = list(zip(*rows))
        codes = [self._code(layer) for layer in cols[2]]
        fresh = {"id": np.asarray(cols[0], np.int64), "text_id": np.asarray(cols[1], np.int64),
                 "layer": np.asarray(cols[2], object), "layer_code": np.asarray(codes, np.int64),
                 "count": np.asarray(cols[3], np.float64), "sx": np.asarray(cols[4], np.float64),
                 "sy": np.asarray(cols[5], np.float64), "sz": np.asarray(cols[6], np.float64),
                 "first": np.asarray(cols[7], np.float64), "last": np.asarray(cols[8], np.float64),
                 "last_obs": np.asarray(cols[9], np.int64), "cx": np.asarray(cols[10], np.int64),
                 "cy": np.asarray(cols[11], np.int64), "cz": np.asarray(cols[12], np.int64)}
        for name, values in fresh.items():
            column = self._cols.get(name)
            if column is None or len(column) < n + k:
                grown = np.empty(max(2 * (n + k), 1024), dtype=values.dtype)
                if column is not None:
                    grown[:n] = column[:n]
                self._cols[name] = column = grown
            column[n:n + k] = values
        added: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            if row[1] in self._by_text:
                added.setdefault(row[1], []).append(n + i)
        for text_id, positions in added.items():
            self._by_text[text_id] = np.concatenate([self._by_text[text_id], np.asarray(positions, np.int64)])
        for text_id in {row[1] for row in rows} & self._by_text_cell.keys():
            del self._by_text_cell[text_id]
        if self._grid is not None:
            self._grid.add(np.arange(n, n + k, dtype=np.int64), fresh["cx"], fresh["cy"])
        self._n = n + k

    def _code(self, layer: str) -> int:
        code = self._layer_code.get(layer)
        if code is None:
            code = self._layer_code[layer] = len(self._layer_names)
            self._layer_names.append(layer)
        return code

    def _remove(self, place_ids: list[int]) -> None:
        """Drop deleted rows from the columns (ids never come back: AUTOINCREMENT); per-text views rebuild."""
        if not self._n:
            return
        held = self._cols["id"][:self._n]
        gone = np.unique(np.asarray(place_ids, dtype=np.int64))
        at = np.minimum(np.searchsorted(held, gone), self._n - 1)
        at = at[held[at] == gone]
        if not len(at):
            return
        keep = np.ones(self._n, dtype=bool)
        keep[at] = False
        n = int(keep.sum())
        for column in self._cols.values():
            column[:n] = column[:self._n][keep]
        self._n = n
        self._by_text, self._by_text_cell, self._grid = {}, {}, None

    def _apply(self, changes: list[Change]) -> None:
        removed = [key[0] for key in changes if len(key) == 1]
        if removed:
            self._remove(removed)
        keys: list[Key] = [key for key in changes if len(key) != 1]
        if not keys:
            return
        unique = list(dict.fromkeys(keys))
        found: list[tuple[Any, ...]] = []
        conn = self._reader()
        for chunk in chunked(unique, 150):
            values = ",".join("(?,?,?,?,?)" for _ in chunk)
            found += conn.execute(
                f"WITH k(t, l, x, y, z) AS (VALUES {values}) SELECT {', '.join('p.' + c for c in COLUMNS.split(', '))}"
                " FROM k JOIN places p ON p.text_id = k.t AND p.layer = k.l AND p.cx = k.x AND p.cy = k.y"
                " AND p.cz = k.z", [v for key in chunk for v in key]).fetchall()
        if len(found) < len(unique):  # a changed cell's row is gone: only a full read is sure to be right
            self._load_all()
            return
        cols = self._cols
        held = cols["id"][:self._n] if self._n else np.empty(0, np.int64)
        top = int(held[-1]) if self._n else 0
        # A place keeps its id for life and new ones get larger ids (AUTOINCREMENT): rows up to the
        # highest id held are updates, found by id in the sorted column; the rest are appended.
        old = [row for row in found if row[0] <= top]
        new = sorted((row for row in found if row[0] > top), key=lambda row: row[0])
        if old:
            ids = np.fromiter((row[0] for row in old), np.int64, len(old))
            at = np.searchsorted(held, ids)
            if not np.array_equal(held[np.minimum(at, len(held) - 1)], ids):  # an id we never saw: read everything
                self._load_all()
                return
            fresh = list(zip(*old))
            for name, i in (("count", 3), ("sx", 4), ("sy", 5), ("sz", 6), ("first", 7), ("last", 8),
                            ("last_obs", 9)):
                cols[name][at] = fresh[i]
        self._append(new)
        if self._n > self._max_rows:  # too big to mirror: SQLite answers from now on
            self._cols, self._by_text, self._n = {}, {}, 0
            self._by_text_cell = {}
            self._grid = None
            self.enabled = False

    def _positions(self, text_id: int) -> np.ndarray:
        positions = self._by_text.get(text_id)
        if positions is None:
            positions = np.nonzero(self._cols["text_id"][:self._n] == text_id)[0] if self._n else np.empty(0, np.int64)
            self._by_text[text_id] = positions
        return positions

    def _cell_ordered(self, text_id: int) -> tuple[np.ndarray, np.ndarray]:
        """The text's rows by (layer name, cx, cy, cz), the unique index's order, and their keys (rows cx,
        cy, cz, layer code) side by side: a place never changes its key, so both hold until the text gets
        new rows (``_append`` drops them then). The keys are kept contiguous because ``near`` filters
        every row of its texts by them, and gathering them from the full columns costs a cache miss each."""
        held = self._by_text_cell.get(text_id)
        if held is None:
            positions = self._positions(text_id)
            cols = self._cols
            if len(positions) > 1:
                name_rank = np.argsort(np.argsort(np.asarray(self._layer_names, dtype=object)))
                positions = positions[np.lexsort((cols["cz"][positions], cols["cy"][positions],
                                                  cols["cx"][positions], name_rank[cols["layer_code"][positions]]))]
            keys = np.stack([cols[name][positions] for name in ("cx", "cy", "cz", "layer_code")]) \
                if len(positions) else np.empty((4, 0), np.int64)
            held = self._by_text_cell[text_id] = (positions, keys)
        return held

    def _take(self, positions: np.ndarray) -> PlaceArrays:
        cols = self._cols
        if not self._n or not len(positions):
            return PlaceArrays.empty()
        return PlaceArrays(*(cols[f][positions] for f in PlaceArrays.FIELDS))

    # ------------------------------------------------------------------ reading
    def by_id(self, ids: Sequence[int]) -> PlaceArrays:
        """Rows of these place ids in ascending id order (missing ids skipped), like ``WHERE id IN (..)``."""
        wanted = np.unique(np.asarray(ids, dtype=np.int64))
        with self._lock:
            self._ensure()
            if not self.enabled:
                return self._by_id_sql(wanted.tolist())
            if not self._n or not len(wanted):
                return PlaceArrays.empty()
            held = self._cols["id"][:self._n]
            at = np.searchsorted(held, wanted)
            ok = at < self._n
            ok[ok] = held[at[ok]] == wanted[ok]
            return self._take(at[ok])

    def nearest(self, center: tuple[float, float, float], k: int) -> Optional[PlaceArrays]:
        """The rows ``by_id(store.place_ids_nearest(center, k))`` gives (horizontal distance), from the
        cells around the point (``place_grid``); None when the R-tree must answer (see ``CellGrid.nearest``)."""
        with self._lock:
            self._ensure()
            if not self.enabled or not self._n:
                return None
            if self._grid is None:
                self._grid = CellGrid(self._cols["cx"][:self._n], self._cols["cy"][:self._n])
            positions = self._grid.nearest(center[0], center[1], k, self._cell_size)
            return None if positions is None else self._take(positions)

    def near(self, text_ids: Sequence[int], center: tuple[float, float, float], radius: float,
             layers: Sequence[str], three_d: bool = False) -> PlaceArrays:
        """Places of the texts whose cell range and centroid fall in the circle (sphere), in the order of
        ``SELECT ... WHERE text_id IN (..) AND layer IN (..) AND cx BETWEEN .. AND cy BETWEEN ..`` on the
        unique (text_id, layer, cx, cy, cz) index, then ``within``."""
        cell = self._cell_size
        cx, cy, cz = center
        x0, x1 = math.floor((cx - radius) / cell), math.floor((cx + radius) / cell)
        y0, y1 = math.floor((cy - radius) / cell), math.floor((cy + radius) / cell)
        z0, z1 = (math.floor((cz - radius) / cell), math.floor((cz + radius) / cell)) if three_d else (0, 0)
        r2 = radius * radius
        with self._lock:
            self._ensure()
            if not self.enabled:
                return self._near_sql(text_ids, layers, (x0, x1, y0, y1, z0, z1), center, radius, three_d)
            if not self._n:
                return PlaceArrays.empty()
            cols = self._cols
            names = sorted(set(layers))
            rank = np.full(len(self._layer_names) + 1, -1, dtype=np.int64)  # layer code -> sort rank (-1: not asked)
            for i, name in enumerate(names):
                code = self._layer_code.get(name)
                if code is not None:
                    rank[code] = i
            # All the texts' rows at once, each text's already in (layer name, cx, cy, cz) order: the
            # filters keep that order, which is the SQL's (text, layer, cx, cy, cz).
            wanted = sorted(set(int(t) for t in text_ids))
            parts = [self._cell_ordered(t) for t in wanted]
            pos = np.concatenate([p for p, _ in parts]) if parts else np.empty(0, np.int64)
            if not len(pos):
                return PlaceArrays.empty()
            keys = np.concatenate([k for _, k in parts], axis=1)
            px, py = keys[0], keys[1]
            code = rank[keys[3]]
            keep = (px >= x0) & (px <= x1) & (py >= y0) & (py <= y1) & (code >= 0)
            if three_d:
                pz = keys[2]
                keep &= (pz >= z0) & (pz <= z1)
            pos = pos[keep]
            count = cols["count"][pos]
            d2 = (cols["sx"][pos] / count - cx) ** 2 + (cols["sy"][pos] / count - cy) ** 2
            if three_d:
                d2 = d2 + (cols["sz"][pos] / count - cz) ** 2
            return self._take(pos[d2 <= r2])

    def of_texts(self, text_ids: Sequence[int], layer: Optional[str] = None, after: Optional[float] = None,
                 before: Optional[float] = None) -> PlaceArrays:
        """Places of the texts (seen in ``layer``, overlapping [after, before]), in the order of
        ``SELECT ... WHERE text_id IN (..) [AND layer = ?] [AND last_stamp >= ?] [AND first_stamp <= ?]``:
        by text, then by id (the places_text index) or, with a layer, by cell (the unique index)."""
        with self._lock:
            self._ensure()
            if not self.enabled:
                return self._of_texts_sql(text_ids, layer, after, before)
            cols = self._cols
            code = self._layer_code.get(layer) if layer else None
            if layer and code is None:
                return PlaceArrays.empty()
            parts = []
            for text_id in sorted(set(int(t) for t in text_ids)):
                pos = self._positions(text_id)
                if layer:
                    pos = pos[cols["layer_code"][pos] == code]
                if after is not None:
                    pos = pos[cols["last"][pos] >= after]
                if before is not None:
                    pos = pos[cols["first"][pos] <= before]
                if layer and len(pos) > 1:
                    pos = pos[np.lexsort((cols["cz"][pos], cols["cy"][pos], cols["cx"][pos]))]
                parts.append(pos)
            return self._take(np.concatenate(parts) if parts else np.empty(0, np.int64))

    def in_box(self, layers: Sequence[str], lo: tuple[float, float], hi: tuple[float, float]) -> PlaceArrays:
        """Every text's places in these layers whose cell lies in the box (the robot's perceptions around a
        spot: ``tools.pose_places``), like ``SELECT ... WHERE layer IN (..) AND cx BETWEEN .. AND cy BETWEEN ..``."""
        cell = self._cell_size
        x0, x1 = math.floor(lo[0] / cell), math.floor(hi[0] / cell)
        y0, y1 = math.floor(lo[1] / cell), math.floor(hi[1] / cell)
        with self._lock:
            self._ensure()
            if not self.enabled:
                rows = self._reader().execute(
                    f"SELECT {COLUMNS} FROM places WHERE layer IN ({marks(len(layers))}) AND cx BETWEEN ? AND ?"
                    " AND cy BETWEEN ? AND ? ORDER BY id", [*layers, x0, x1, y0, y1]).fetchall()
                return PlaceArrays.from_rows(rows)
            if not self._n:
                return PlaceArrays.empty()
            cols, n = self._cols, self._n
            codes = [self._layer_code[name] for name in set(layers) if name in self._layer_code]
            if not codes:
                return PlaceArrays.empty()
            cx, cy = cols["cx"][:n], cols["cy"][:n]
            keep = (cx >= x0) & (cx <= x1) & (cy >= y0) & (cy <= y1) & np.isin(cols["layer_code"][:n], codes)
            return self._take(np.nonzero(keep)[0])

    # ------------------------------------------------------------------ too big to mirror: SQLite
    def _by_id_sql(self, ids: list[int]) -> PlaceArrays:
        rows: list[tuple[Any, ...]] = []
        for chunk in chunked(ids):
            rows += self._reader().execute(
                f"SELECT {COLUMNS} FROM places WHERE id IN ({marks(len(chunk))}) ORDER BY id", chunk).fetchall()
        return PlaceArrays.from_rows(rows)

    def _near_sql(self, text_ids: Sequence[int], layers: Sequence[str], cells: tuple[int, ...],
                  center: tuple[float, float, float], radius: float, three_d: bool) -> PlaceArrays:
        x0, x1, y0, y1, z0, z1 = cells
        where = f"layer IN ({marks(len(layers))}) AND cx BETWEEN ? AND ? AND cy BETWEEN ? AND ?"
        bounds: list[Any] = [*layers, x0, x1, y0, y1]
        if three_d:
            where += " AND cz BETWEEN ? AND ?"
            bounds += [z0, z1]
        ids = sorted(set(int(t) for t in text_ids))
        rows: list[tuple[Any, ...]] = []
        for chunk in chunked(ids, 500):
            rows += self._reader().execute(
                f"SELECT {COLUMNS} FROM places WHERE text_id IN ({marks(len(chunk))}) AND {where}"
                " ORDER BY text_id, layer, cx, cy, cz", [*chunk, *bounds]).fetchall()
        return PlaceArrays.from_rows(rows_within(rows, center, radius, three_d))

    def _of_texts_sql(self, text_ids: Sequence[int], layer: Optional[str], after: Optional[float],
                      before: Optional[float]) -> PlaceArrays:
        ids = sorted(set(int(t) for t in text_ids))
        extra, params = "", list[object]()
        if layer:
            extra += " AND layer = ?"
            params.append(layer)
        if after is not None:
            extra += " AND last_stamp >= ?"
            params.append(after)
        if before is not None:
            extra += " AND first_stamp <= ?"
            params.append(before)
        order = "text_id, cx, cy, cz" if layer else "text_id, id"
        rows: list[tuple[Any, ...]] = []
        for chunk in chunked(ids):
            rows += self._reader().execute(
                f"SELECT {COLUMNS} FROM places WHERE text_id IN ({marks(len(chunk))}){extra}"
                f" ORDER BY {order}", [*chunk, *params]).fetchall()
        return PlaceArrays.from_rows(rows)


def rows_within(rows: list[tuple[Any, ...]], center: tuple[float, float, float], radius: float,
                three_d: bool = False) -> list[tuple[Any, ...]]:
    """Raw place rows whose centroid (sum / count) lies within ``radius`` of ``center``."""
    cx, cy, cz = center
    r2 = radius * radius
    out = []
    for row in rows:
        count = row[3]
        d2 = (row[4] / count - cx) ** 2 + (row[5] / count - cy) ** 2
        if three_d:
            d2 += (row[6] / count - cz) ** 2
        if d2 <= r2:
            out.append(row)
    return out
