"""Deleting selected rows from SQLite, in short write transactions, and what derives from them.

Each batch is one ``store.write()``: observation rows go, their texts lose
references (a text nothing refers to goes with its FTS entry and places),
the places they counted shrink, their edges go. What the transaction
removed is announced, so after COMMIT the store drops it from its vector
index, R-tree and caches (``storage/events.py``). A batch is small enough
to hold the writer lock for milliseconds: ingest flushes and questions
interleave with a long forget.

Gists, entities and episodes are handled after the observations: a gist is
re-summarised from its remaining sources (no LLM: the plain digest, so a
forget never waits on a model) or removed when none remain; an entity whose
last sighting went is removed; text derived from forgotten content that
no row links (an LLM summary quoting it, an episode summary) is found by
the words and scrubbed.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

import numpy as np

from emem_ros.consolidation.gists import draft_gist
from emem_ros.consolidation.rows import classify_layers, fetch_rows
from emem_ros.consolidation.summaries import SummaryWriter
from emem_ros.core.types import EdgeKind
from emem_ros.storage import codec
from emem_ros.storage.budget import TransactionBudget
from emem_ros.storage.sqlutil import chunked, marks

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.consolidation.coldstore import ColdStore
    from emem_ros.engine import Engine
    from emem_ros.forgetting.selector import Selector

log = logging.getLogger(__name__)

SCRUBBED = "[forgotten]"
TARGET_LOCK = 0.025
"""Seconds of writer lock a deletion batch aims at (well under the 100 ms a flush or question may wait)."""
GIST_PLAN = 256
"""Gists planned together (rows read, summaries drafted and embedded) before their writes."""
FIRST_BATCH = 32
MIN_BATCH = 16
"""Below this many rows, shrinking a transaction further only multiplies its fixed cost (commit, log append).
(Removed places are tombstones in the R-tree, ``SpatialIndex.delete``: no tree walk nor column rewrite.)"""


@dataclass
class Erased:
    observations: int = 0
    texts: int = 0
    places_removed: int = 0
    places_updated: int = 0
    edges: int = 0
    gists_removed: int = 0
    gists_resummarised: int = 0
    entities_removed: int = 0
    entities_updated: int = 0
    episodes_scrubbed: int = 0
    experiences_redacted: int = 0
    transactions: int = 0
    longest_lock: float = 0.0
    longest_what: str = ""
    """Which kind of batch held the lock longest (rows, gists, entities, ...)."""
    gists: set[int] = field(default_factory=set)
    entities: set[int] = field(default_factory=set)
    removed_text_strings: list[str] = field(default_factory=list)
    episodes: set[int] = field(default_factory=set)
    """Episodes whose texts were scrubbed (forgetting/episodes.py summarises them again)."""


@dataclass
class Plan:
    """One deletion batch as read before its transaction (``Eraser._plan``)."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    cells: dict[tuple[int, str, int, int, int], list[float]] = field(default_factory=dict)
    """Per place key: removed count, sums of x/y/z, earliest and latest stamp, highest id."""
    ends: dict[tuple[int, str, int, int, int], tuple[tuple[Any, ...], tuple[Any, ...]]] = field(default_factory=dict)
    """Per place losing an end: (first, last, newest id) as read, and as they will be without the batch."""


def _inside(ends: Sequence[Any], low: float, high: float, top: float) -> bool:
    """No removed row was the place's first, last or newest (``ends``: first_stamp, last_stamp, last_obs_id)."""
    return (ends[0] is not None and ends[1] is not None and ends[2] is not None
            and ends[0] < low and high < ends[1] and top < ends[2])


class Eraser:
    def __init__(self, engine: "Engine", erased: Erased, cold: Optional["ColdStore"] = None) -> None:
        self.engine = engine
        self.store = engine.store
        self.erased = erased
        self.cold = cold
        self._kinds: Optional[list[str]] = None

    @contextmanager
    def _write(self, what: str) -> Iterator[Any]:
        """One short write transaction, timed from lock to commit (the longest, and of what, is reported)."""
        with self.store.write_lock:
            started = time.perf_counter()
            with self.store.write() as conn:
                yield conn
            held = time.perf_counter() - started
        self.erased.transactions += 1
        if held > self.erased.longest_lock:
            self.erased.longest_lock, self.erased.longest_what = held, what

    # ------------------------------------------------------------------ observations
    def observations(self, ids: Sequence[int], batch: int, target: float = TARGET_LOCK) -> None:
        """In transactions sized so each holds the writer lock about ``target`` seconds (at most ``batch`` rows).

        The cost per row varies (a text shared by many observations, places to
        shrink), so the size adapts to what was measured. What can be read
        before is read on a reader with no lock held (``_plan``): the rows, and
        the new first/last stamps of places that lose theirs (a scan of the
        text's rows in the cell: 30k rows for a common text at 1M).
        """
        size, start = min(batch, FIRST_BATCH), 0
        while start < len(ids):
            part = list(ids[start:start + size])
            plan = self._plan(part)
            began = time.perf_counter()
            with self._write("rows") as conn:
                self._observation_batch(conn, plan)
            held = time.perf_counter() - began
            start += len(part)
            if held > target and size > MIN_BATCH:
                size = max(MIN_BATCH, int(size * target / held))
            elif held < target / 2:
                size = min(batch, size * 2)

    def _plan(self, ids: list[int]) -> "Plan":
        """The batch's rows, what each place loses, and the new ends of places that lose their first/last row."""
        reader = self.store.reader()
        plan = Plan()
        for chunk in chunked(ids):
            plan.rows += reader.execute(
                "SELECT id, text_id, gist_id, layer, source_type, x, y, z, stamp, episode_id FROM observations"
                f" WHERE id IN ({marks(len(chunk))})", chunk).fetchall()
        size = self.store.cell_size
        members: dict[tuple[int, str, int, int, int], list[int]] = defaultdict(list)
        for obs_id, text_id, _gist, layer, source, x, y, z, stamp, _episode in plan.rows:
            if text_id is None or x is None or y is None or source == "interoception":
                continue
            zz = z if z is not None else 0.0
            key = (text_id, layer, math.floor(x / size), math.floor(y / size), math.floor(zz / size))
            cell = plan.cells.setdefault(key, [0, 0.0, 0.0, 0.0, math.inf, -math.inf, 0])
            cell[0] += 1
            cell[1] += x
            cell[2] += y
            cell[3] += zz
            cell[4] = min(cell[4], stamp)  # the removed rows' earliest and latest stamps, highest id
            cell[5] = max(cell[5], stamp)
            cell[6] = max(cell[6], obs_id)
            members[key].append(obs_id)
        for key, (n, _sx, _sy, _sz, low, high, top) in plan.cells.items():
            row = reader.execute("SELECT count, first_stamp, last_stamp, last_obs_id FROM places"
                                 " WHERE text_id=? AND layer=? AND cx=? AND cy=? AND cz=?", key).fetchone()
            if row is None or row[0] <= n or _inside(row[1:], low, high, top):
                continue
            plan.ends[key] = (tuple(row[1:]), self._cell_ends(reader, key, members[key]))
        return plan

    def _observation_batch(self, conn: Any, plan: "Plan") -> None:
        rows = []
        for chunk in chunked([r[0] for r in plan.rows]):  # still there (nothing else deletes them; checked)
            rows += conn.execute(
                "SELECT id, text_id, gist_id, layer, source_type, x, y, z, stamp, episode_id FROM observations"
                f" WHERE id IN ({marks(len(chunk))})", chunk).fetchall()
        if not rows:
            return
        refs: dict[int, int] = defaultdict(int)
        for row in rows:
            text_id, gist_id = row[1], row[2]
            if gist_id is not None:
                self.erased.gists.add(gist_id)
            if text_id is not None:
                refs[text_id] += 1
        cells = plan.cells if len(rows) == len(plan.rows) else self._plan([r[0] for r in rows]).cells
        found = [r[0] for r in rows]
        for chunk in chunked(found):
            conn.execute(f"DELETE FROM observations WHERE id IN ({marks(len(chunk))})", chunk)
        conn.executemany("UPDATE texts SET refs = refs - ? WHERE id = ?", [(n, t) for t, n in refs.items()])
        self.erased.observations += len(found)
        self._edges(conn, [f"obs-{i}" for i in found])
        dead = self._dead_texts(conn, list(refs))
        dead_ids = {d[0] for d in dead}
        removed_places = self._remove_texts(conn, dead)
        touched, gone = self._shrink_places(conn, {k: v for k, v in cells.items() if k[0] not in dead_ids},
                                            plan.ends)
        self.store.announce(removed_texts=dead, removed_places=removed_places + gone, reshaped=True, described=True,
                            removed_observations=[(r[0], r[1], r[3], r[9], r[4], r[8]) for r in rows])
        self.store.state.announced.touched_places.extend(touched)

    def _dead_texts(self, conn: Any, text_ids: list[int]) -> list[tuple[int, str]]:
        dead: list[tuple[int, str]] = []
        for chunk in chunked(text_ids):
            dead += conn.execute(f"SELECT id, text FROM texts WHERE id IN ({marks(len(chunk))}) AND refs <= 0",
                                 chunk).fetchall()
        return dead

    def _remove_texts(self, conn: Any, dead: list[tuple[int, str]]) -> list[int]:
        """Text rows with their FTS entries and places; returns the place ids removed."""
        if not dead:
            return []
        conn.executemany("INSERT INTO texts_fts(texts_fts, rowid, text) VALUES('delete', ?, ?)", dead)
        place_ids: list[int] = []
        for chunk in chunked([d[0] for d in dead]):
            place_ids += [r[0] for r in conn.execute(
                f"SELECT id FROM places WHERE text_id IN ({marks(len(chunk))})", chunk)]
            conn.execute(f"DELETE FROM places WHERE text_id IN ({marks(len(chunk))})", chunk)
            conn.execute(f"DELETE FROM texts WHERE id IN ({marks(len(chunk))})", chunk)
        self.erased.texts += len(dead)
        self.erased.places_removed += len(place_ids)
        self.erased.removed_text_strings += [d[1] for d in dead]
        return place_ids

    def _shrink_places(self, conn: Any, cells: dict[tuple[int, str, int, int, int], list[float]],
                       ends: dict[tuple[int, str, int, int, int], tuple[tuple[Any, ...], tuple[Any, ...]]]
                       ) -> tuple[list[tuple[int, str, int, int, int]], list[int]]:
        """Places of surviving texts count fewer observations; an emptied place goes.

        First/last stamp and newest id change only when a removed row was one
        of them; their new values were read before the lock (``_plan``) and
        hold unless ingest moved them meanwhile (then ingest's newer value
        stays). A place the plan did not foresee is read here (rare).
        """
        touched, gone = [], []
        for key, (n, sx, sy, sz, low, high, top) in cells.items():
            row = conn.execute("SELECT id, count, first_stamp, last_stamp, last_obs_id FROM places"
                               " WHERE text_id=? AND layer=? AND cx=? AND cy=? AND cz=?", key).fetchone()
            if row is None:
                continue
            if row[1] <= n:
                conn.execute("DELETE FROM places WHERE id=?", (row[0],))
                gone.append(row[0])
                self.erased.places_removed += 1
                continue
            touched.append(key)
            self.erased.places_updated += 1
            if _inside(row[2:], low, high, top):  # no removed row was the first, last or newest: those stay
                conn.execute("UPDATE places SET count = count - ?, sx = sx - ?, sy = sy - ?, sz = sz - ? WHERE id = ?",
                             (n, sx, sy, sz, row[0]))
                continue
            planned = ends.get(key)
            if planned is not None:
                before, after = planned
                first, last, last_id = (new if now == old else now for now, old, new in zip(row[2:], before, after))
            else:
                first, last, last_id = self._cell_ends(conn, key, [])
            conn.execute("UPDATE places SET count = count - ?, sx = sx - ?, sy = sy - ?, sz = sz - ?,"
                         " first_stamp = COALESCE(?, first_stamp), last_stamp = COALESCE(?, last_stamp),"
                         " last_obs_id = COALESCE(?, last_obs_id) WHERE id = ?",
                         (n, sx, sy, sz, first, last, last_id, row[0]))
        return touched, gone

    def _cell_ends(self, conn: Any, key: tuple[int, str, int, int, int], without: list[int]
                   ) -> tuple[Optional[float], Optional[float], Optional[int]]:
        """First stamp, last stamp and the id of the last row of a place's rows (``without`` those ids).

        As ingest keeps them (``upsert_places``: the newest id is the last
        row's). Walked on the (text, stamp) index from each end until a row
        in the cell: a few rows, where MIN/MAX over the text scanned all of
        its rows (30k for a common text at 1M).
        """
        s = self.store.cell_size
        where = ("FROM observations WHERE text_id=? AND layer=? AND x >= ? AND x < ? AND y >= ? AND y < ?"
                 + (f" AND id NOT IN ({marks(len(without))})" if without else ""))
        params = (key[0], key[1], key[2] * s, (key[2] + 1) * s, key[3] * s, (key[3] + 1) * s, *without)
        first = conn.execute(f"SELECT stamp {where} ORDER BY stamp, id LIMIT 1", params).fetchone()
        last = conn.execute(f"SELECT stamp, id {where} ORDER BY stamp DESC, id DESC LIMIT 1", params).fetchone()
        return (first[0] if first else None, last[0] if last else None, last[1] if last else None)

    def _edge_kinds(self) -> list[str]:
        """Every edge kind in the table (read once per forget) and every kind the code knows."""
        if self._kinds is None:
            found = {r[0] for r in self.store.reader().execute("SELECT DISTINCT kind FROM edges")}
            self._kinds = sorted(found | {k.value for k in EdgeKind})
        return self._kinds

    def _edges(self, conn: Any, nodes: list[str]) -> None:
        """Edges to or from the nodes; entities lose the sightings (OBSERVED_IN) that went."""
        for chunk in chunked(nodes):
            for (src,) in conn.execute(f"SELECT src FROM edges WHERE kind=? AND dst IN ({marks(len(chunk))})",
                                       [EdgeKind.OBSERVED_IN.value, *chunk]):
                if src.startswith("ent-"):
                    self.erased.entities.add(int(src[4:]))
            kinds = self._edge_kinds()
            # with the kind named, both deletes are index searches (edges_dst, the primary key), not scans
            self.erased.edges += conn.execute(
                f"DELETE FROM edges WHERE kind IN ({marks(len(kinds))}) AND dst IN ({marks(len(chunk))})",
                [*kinds, *chunk]).rowcount
            self.erased.edges += conn.execute(
                f"DELETE FROM edges WHERE kind IN ({marks(len(kinds))}) AND src IN ({marks(len(chunk))})",
                [*kinds, *chunk]).rowcount

    # ------------------------------------------------------------------ texts nothing refers to
    def orphan_texts(self, text_ids: Sequence[int]) -> None:
        """Named texts no observation refers to any more (archived away earlier, or never linked)."""
        for chunk in chunked(list(text_ids), 500):
            with self._write("orphan texts") as conn:
                dead = conn.execute(
                    f"SELECT id, text FROM texts WHERE id IN ({marks(len(chunk))}) AND NOT EXISTS"
                    " (SELECT 1 FROM observations o WHERE o.text_id = texts.id)", list(chunk)).fetchall()
                removed = self._remove_texts(conn, dead)
                self.store.announce(removed_texts=dead, removed_places=removed, reshaped=bool(dead), described=True)

    # ------------------------------------------------------------------ gists
    def gists(self, selector: Optional["Selector"], touched_only: bool = False) -> None:
        """Re-summarise touched gists from what remains, remove empty ones, and ones still quoting the words.

        ``touched_only``: the gists the deleted rows fed were handled already (an earlier selector of the run).
        A forget spread over a large memory touches thousands of gists: they are planned ``GIST_PLAN`` at a
        time (rows read in one query, summaries drafted and embedded together, no lock held), and only
        the writes take the lock, several gists per transaction (``TransactionBudget``).
        """
        touched = set() if touched_only else set(self.erased.gists)
        if selector is not None and selector.words_only:
            touched |= self._quoting("gists", "text", selector, "time_start", "time_end")
        words = selector if selector is not None and selector.words_only else None
        pattern = self._scrub_pattern(words)
        budget = TransactionBudget(first=8, least=1)
        ordered = sorted(touched)
        for start in range(0, len(ordered), GIST_PLAN):
            self._gist_part(ordered[start:start + GIST_PLAN], words, pattern, budget)

    def _gist_part(self, part: list[int], words: Optional["Selector"], pattern: Optional[re.Pattern[str]],
                   budget: TransactionBudget) -> None:
        reader = self.store.reader()
        rows_of: dict[int, list[Any]] = {g: [] for g in part}
        for chunk in chunked(part):
            for row in fetch_rows(reader, f"o.gist_id IN ({marks(len(chunk))})", chunk):
                rows_of.setdefault(row.gist_id or 0, []).append(row)
        self._archived_texts([r for rows in rows_of.values() for r in rows])
        olds: dict[int, tuple[str, Optional[str]]] = {}
        for chunk in chunked(part):
            olds.update((r[0], (r[1], r[2])) for r in reader.execute(
                f"SELECT id, text, metadata FROM gists WHERE id IN ({marks(len(chunk))})", chunk))
        writer = SummaryWriter(None)
        removals: list[tuple[int, str]] = []
        updates: list[tuple[int, str, str, Any, dict[str, Any]]] = []
        for gist_id in part:
            time.sleep(0)  # let a thread waiting for the interpreter (a flush holding the writer lock) run now
            old = olds.get(gist_id)
            if old is None:
                continue
            rows = rows_of[gist_id]
            perceived = [r for r in rows if r.source_type != "interoception"]
            if not perceived:
                removals.append((gist_id, old[0]))
                continue
            metadata = json.loads(old[1]) if old[1] else {}
            draft = draft_gist(rows, classify_layers(rows), writer, str(metadata.get("kind", "time_window")))
            text = pattern.sub(SCRUBBED, draft.text) if pattern is not None and draft.text else draft.text
            if words is not None and words.matches(text):
                removals.append((gist_id, old[0]))
                continue
            metadata.update(draft.metadata)
            metadata["resummarised"] = "forget"
            updates.append((gist_id, old[0], text, draft, metadata))
        embedded = [u for u in updates if u[2]]
        vectors: dict[int, Any] = {}
        if embedded:
            vectors = dict(zip((u[0] for u in embedded), self.engine.embed_texts([u[2] for u in embedded])))
        writes: list[tuple[str, Any]] = [("remove", r) for r in removals] + [("update", u) for u in updates]
        done = 0
        while done < len(writes):
            batch = writes[done:done + budget.size]
            began = time.perf_counter()
            with self._write("gists") as conn:
                for kind, item in batch:
                    if kind == "remove":
                        self._remove_gist_row(conn, *item)
                    else:
                        self._update_gist_row(conn, item, vectors.get(item[0]))
                self.store.announce(reshaped=True, rewritten=True, described=True)
            budget.took(len(batch), time.perf_counter() - began)
            done += len(batch)
            gone = [item[0] for kind, item in batch]
            self.store.update_index("gists", functools.partial(self.store.vectors["gists"].remove, gone))
            for kind, item in batch:
                if kind == "remove":
                    self.erased.gists_removed += 1
                else:
                    self.store.index_gist(item[0], vectors.get(item[0]))
                    self.erased.gists_resummarised += 1

    def _update_gist_row(self, conn: Any, item: tuple[int, str, str, Any, dict[str, Any]],
                         vector: Optional[np.ndarray]) -> None:
        gist_id, old_text, text, draft, metadata = item
        cx, cy, cz = draft.centroid if draft.centroid is not None else (None, None, None)
        conn.execute("INSERT INTO gists_fts(gists_fts, rowid, text) VALUES('delete', ?, ?)", (gist_id, old_text))
        conn.execute("UPDATE gists SET text=?, cx=?, cy=?, cz=?, radius=?, time_start=?, time_end=?,"
                     " source_count=?, layers=?, metadata=?, embedding=? WHERE id=?",
                     (text, cx, cy, cz, draft.radius, draft.time_start, draft.time_end,
                      len(draft.observation_ids), json.dumps(draft.layers), codec.dumps(metadata),
                      codec.vector_to_blob(vector) if vector is not None else None, gist_id))
        conn.execute("INSERT INTO gists_fts(rowid, text) VALUES(?, ?)", (gist_id, text))

    def _archived_texts(self, rows: list[Any]) -> None:
        """Archived sources keep their text in the cold store only: a re-summary reads it from there."""
        wanted = {f"obs-{r.id}": r for r in rows if r.text_id is None and not r.text}
        if not wanted or self.cold is None:
            return
        for record in self.cold.iter_records(list(wanted)):
            row = wanted.get(str(record.get("id")))
            if row is not None and record.get("text"):
                row.text = str(record["text"])

    def _remove_gist_row(self, conn: Any, gist_id: int, text: str) -> None:
        conn.execute("INSERT INTO gists_fts(gists_fts, rowid, text) VALUES('delete', ?, ?)", (gist_id, text))
        conn.execute("UPDATE observations SET gist_id = NULL WHERE gist_id = ?", (gist_id,))
        conn.execute("DELETE FROM gists WHERE id = ?", (gist_id,))
        self._edges(conn, [f"gist-{gist_id}"])

    # ------------------------------------------------------------------ entities
    def entities(self, named: set[int], selector: Optional["Selector"]) -> None:
        """Named entities go; touched ones lose sightings and go when none is left."""
        candidates = set(named) | self.erased.entities
        if selector is not None and selector.words_only:
            quoting = self._quoting("entities", "name", selector, "first_seen", "last_seen")
            candidates |= quoting
            named = named | quoting
        reader = self.store.reader()
        for number in sorted(candidates):
            node = f"ent-{number}"
            left = reader.execute("SELECT COUNT(*), COALESCE(SUM(weight), 0) FROM edges WHERE kind=? AND src=?",
                                  (EdgeKind.OBSERVED_IN.value, node)).fetchone()
            with self._write("entities") as conn:
                if number in named or left[0] == 0:
                    if conn.execute("DELETE FROM entities WHERE id=?", (number,)).rowcount:
                        self.erased.entities_removed += 1
                    self._edges(conn, [node])
                    self.store.announce(rewritten=True)
                    removed = True
                else:
                    conn.execute("UPDATE entities SET sightings = MAX(1, ?) WHERE id=?", (int(left[1]), number))
                    self.erased.entities_updated += 1
                    removed = False
            if removed:
                self._drop_vector("entities", number)

    # ------------------------------------------------------------------ episodes: scrub the words
    def episodes(self, selector: Optional["Selector"]) -> None:
        """Episode texts quoting the words or a removed text get the quote replaced (the episode stays)."""
        pattern = self._scrub_pattern(selector if selector is not None and selector.words_only else None)
        if pattern is None:
            return
        columns = ("name", "summary", "goal", "action", "result", "reflection")
        where, params = ["1"], []
        if selector is not None and selector.words_only and selector.until is not None:
            where.append("COALESCE(end, start) <= ?")
            params.append(selector.until)
        reader = self.store.reader()
        for row in reader.execute(f"SELECT id, {', '.join(columns)} FROM episodes WHERE {' AND '.join(where)}",
                                  params).fetchall():
            number, values = row[0], row[1:]
            new = [pattern.sub(SCRUBBED, v) if isinstance(v, str) else v for v in values]
            if new == list(values):
                continue
            text = new[1] or new[0]
            vector = self.engine.embed_texts([text])[0] if text else None
            with self._write("episodes") as conn:
                conn.execute(f"UPDATE episodes SET {', '.join(c + '=?' for c in columns)}, embedding=? WHERE id=?",
                             (*new, codec.vector_to_blob(vector) if vector is not None else None, number))
                self.store.announce(rewritten=True)
            self._drop_vector("episodes", number)
            if vector is not None:
                index, row = self.store.vectors["episodes"], vector.reshape(1, -1)
                self.store.update_index("episodes", functools.partial(index.add, np.array([number]), row))
            self.erased.episodes_scrubbed += 1
            self.erased.episodes.add(number)

    def _drop_vector(self, name: str, label: int) -> None:
        self.store.update_index(name, functools.partial(self.store.vectors[name].remove, [label]))

    def _quoting(self, table: str, column: str, selector: "Selector", start: str, end: str) -> set[int]:
        """Rows of ``table`` whose ``column`` holds the words, within the selector's time range if any."""
        words = (selector.match or "").split()
        if not words:
            return set()
        where = [f"{column} LIKE ?" for _ in words]
        params: list[Any] = [f"%{w}%" for w in words]
        if selector.since is not None:
            where.append(f"{start} >= ?")
            params.append(selector.since)
        if selector.until is not None:
            where.append(f"{end} <= ?")
            params.append(selector.until)
        rows = self.store.reader().execute(f"SELECT id, {column} FROM {table} WHERE {' AND '.join(where)}",
                                           params).fetchall()
        return {i for i, text in rows if selector.matches(text)}

    def _scrub_pattern(self, selector: Optional["Selector"]) -> Optional[re.Pattern[str]]:
        parts = [r"(?<!\w)" + re.escape(t) + r"(?!\w)" for t in self.erased.removed_text_strings if len(t) >= 4]
        if selector is not None and selector.pattern is not None:
            parts.append(selector.pattern.pattern)
        if not parts:
            return None
        return re.compile("|".join(f"(?:{p})" for p in parts[:2000]), re.IGNORECASE)

    def _scrub(self, text: str, selector: Optional["Selector"]) -> str:
        pattern = self._scrub_pattern(selector)
        return pattern.sub(SCRUBBED, text) if pattern is not None and text else text
