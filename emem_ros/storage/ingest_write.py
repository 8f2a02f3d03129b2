"""The ingest write path: intern texts, embed only unseen ones, store a batch in one transaction.

A robot repeats itself, so a text is stored (and embedded, and put in the
vector index) once; observations point at it, and ``places`` aggregates
the observations of one text in one grid cell (the R-tree holds places).
"""

from __future__ import annotations

import functools
import logging
import math
import sqlite3
import time
from typing import Any, Optional, Sequence

import numpy as np

from emem_ros.core.types import Tier
from emem_ros.storage import codec
from emem_ros.storage.base import StoreBase
from emem_ros.storage.records import _INTEROCEPTION, EmbedFn, NewObservation, WriteReport
from emem_ros.storage.sqlutil import chunked, marks

log = logging.getLogger(__name__)


class IngestWriteMixin(StoreBase):
    """``MemoryStore.write_observations`` and what it needs; ``backfill_vectors`` after an outage."""

    # ------------------------------------------------------------------ ingest
    def forget_texts(self, texts: Sequence[str]) -> None:
        """Drop texts from the text cache (their rows were deleted: archival)."""
        for text in texts:
            self.state.text_cache.discard(text)

    def allocate_observation_id(self) -> int:
        return self.state.ids.allocate()

    def write_observations(self, batch: Sequence[NewObservation], embed: EmbedFn, *,
                           defer_vectors: bool = False) -> WriteReport:
        """Store a batch: intern texts, embed only unseen ones, one transaction.

        Raises (and writes nothing) when embedding or SQLite fails, so the caller
        can keep the batch and retry. Once committed it never raises: derived
        indexes that fail are repaired from SQLite (``_update_index``), and
        observations already stored (a retried batch) are skipped.

        ``defer_vectors``: when ``embed`` fails, store the texts without the
        vectors they need (the last resort of a close while the embedder is
        down); ``backfill_vectors`` embeds them later.
        """
        started = time.perf_counter()
        if not batch:
            return WriteReport()
        with self.state.write_lock:
            fresh = self._not_yet_stored(batch)
            report = WriteReport(observations=len(fresh), skipped=len(batch) - len(fresh))
            batch = fresh
            if not batch:
                return report
            known = self._lookup_texts({o.text for o in batch})
            vectors = self._vectors_for(batch, known, embed, report if defer_vectors else None)
            now = time.time()
            max_place = self.state.conn.execute("SELECT COALESCE(MAX(id), 0) FROM places").fetchone()[0]
            with self.write() as conn:
                text_ids, new_vector_ids = self._store_texts(conn, batch, known, vectors, report)
                conn.executemany(
                    "INSERT INTO observations(id, text_id, stamp, layer, source_type, x, y, z, frame_id,"
                    " confidence, episode_id, tier, tier_since, value, metadata)"
                    " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            o.id, text_ids[o.text], o.stamp, o.layer, o.source_type,
                            *(o.position if o.position is not None else (None, None, None)),
                            o.frame_id, o.confidence, o.episode_id, o.tier or Tier.SHORT_TERM.value,
                            now if o.tier_since is None else o.tier_since, o.value,
                            o.metadata_json if o.metadata_json is not None else codec.dumps(o.metadata),
                        )
                        for o in batch
                    ],
                )
                linked = [(o.gist_id, o.id) for o in batch if o.gist_id is not None]
                if linked:  # only imports carry SUMMARIZES links
                    conn.executemany("UPDATE observations SET gist_id=? WHERE id=?", linked)
                refs: dict[int, int] = {}
                for o in batch:
                    refs[text_ids[o.text]] = refs.get(text_ids[o.text], 0) + 1
                conn.executemany("UPDATE texts SET refs = refs + ? WHERE id = ?",
                                 [(n, tid) for tid, n in refs.items()])
                self.upsert_places(conn, batch, text_ids)
                new_places = conn.execute(
                    "SELECT id, cx, cy, cz FROM places WHERE id > ?", (max_place,)
                ).fetchall()
                if report.deferred_vectors:
                    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('vectors_pending', '1')")
            # Committed. From here nothing may raise: the caller would retry a
            # write that succeeded. Derived indexes that fail are repaired from
            # SQLite (a crash here is repaired by reconcile on the next open).
            self.state.ids.stored(max(o.id for o in batch))
            if report.deferred_vectors:
                self.vectors_pending = True
            for text, (text_id, has_vector) in known.items():
                self.state.text_cache.put(text, text_id, has_vector)
            if new_vector_ids:
                ids = np.array([tid for tid, _ in new_vector_ids], dtype=np.int64)
                self.update_index("texts", lambda: self.vectors["texts"].add(
                    ids, np.stack([v for _, v in new_vector_ids]), parallel=True))
            if new_places:
                self.update_index("places", lambda: self.places.insert(
                    np.array([p[0] for p in new_places], dtype=np.int64),
                    np.array([self.cell_box(*p[1:]) for p in new_places], dtype=np.float64)))
            elif self.state.stale:
                self.repair_stale()
            report.new_places = len(new_places)
        report.seconds = time.perf_counter() - started
        return report

    def _not_yet_stored(self, batch: Sequence[NewObservation]) -> list[NewObservation]:
        """The batch minus observations already in SQLite (a batch retried after its commit).

        Ids only grow, so a fresh batch is recognised without a query.
        """
        if min(o.id for o in batch) > self.state.ids.max_stored:
            return list(batch)
        low = [o.id for o in batch if o.id <= self.state.ids.max_stored]
        stored: set[int] = set()
        for chunk in chunked(low):
            stored.update(r[0] for r in self.state.conn.execute(
                f"SELECT id FROM observations WHERE id IN ({marks(len(chunk))})", chunk))
        if stored:
            log.warning("skipping %d observation(s) that are already stored (a retried batch)", len(stored))
        return [o for o in batch if o.id not in stored]

    def backfill_vectors(self, embed: EmbedFn, batch: int = 512) -> int:
        """Embed texts stored without the vector they need (stored while the embedder was down).

        Runs only while ``vectors_pending`` is set; clears it when every such
        text has its vector. Raises what ``embed`` raises (the flag stays).
        """
        if not self.vectors_pending:
            return 0
        done = 0
        with self.state.write_lock:
            rows = self.state.conn.execute(
                "SELECT t.id, t.text FROM texts t WHERE t.embedding IS NULL AND EXISTS"
                " (SELECT 1 FROM observations o WHERE o.text_id = t.id AND o.source_type != ?) ORDER BY t.id",
                (_INTEROCEPTION,),
            ).fetchall()
            for chunk in chunked(rows, batch):
                vectors = np.asarray(embed([r[1] for r in chunk]), dtype=np.float32)
                with self.write() as conn:
                    conn.executemany("UPDATE texts SET embedding=? WHERE id=? AND embedding IS NULL",
                                     [(codec.vector_to_blob(v), r[0]) for v, r in zip(vectors, chunk)])
                ids = np.array([r[0] for r in chunk], dtype=np.int64)
                self.update_index("texts", functools.partial(self.vectors["texts"].add, ids, vectors))
                for text_id, text in chunk:
                    self.state.text_cache.put(text, text_id, True)
                done += len(chunk)
            with self.write() as conn:
                conn.execute("DELETE FROM meta WHERE key='vectors_pending'")
            self.vectors_pending = False
        if done:
            log.warning("embedded %d text(s) that were stored without a vector while the embedder was down", done)
        return done

    def _lookup_texts(self, texts: set[str]) -> dict[str, tuple[int, bool]]:
        known: dict[str, tuple[int, bool]] = {}
        misses = []
        for text in texts:
            hit = self.state.text_cache.get(text)
            if hit is None:
                misses.append(text)
            else:
                known[text] = hit
        for chunk in chunked(misses):
            for text_id, text, has_vector in self.state.conn.execute(
                f"SELECT id, text, embedding IS NOT NULL FROM texts WHERE text IN ({marks(len(chunk))})", chunk
            ):
                known[text] = (text_id, bool(has_vector))
        return known

    def _vectors_for(
        self, batch: Sequence[NewObservation], known: dict[str, tuple[int, bool]], embed: EmbedFn,
        defer_into: Optional[WriteReport] = None,
    ) -> dict[str, np.ndarray]:
        """Vectors for texts that need one and lack one; given embeddings first.

        With ``defer_into``, a failing ``embed`` is logged and counted there
        instead of raised: those texts are stored without a vector for now.
        """
        vectors: dict[str, np.ndarray] = {}
        wanted: list[str] = []
        for o in batch:
            if not o.wants_vector or o.text in vectors:
                continue
            hit = known.get(o.text)
            if hit is not None and hit[1]:
                continue
            if o.embedding is not None:
                vectors[o.text] = o.embedding
            elif o.text not in wanted:
                wanted.append(o.text)
        wanted = [t for t in wanted if t not in vectors]
        if wanted:
            try:
                embedded = embed(wanted)
            except Exception as exc:
                if defer_into is None:
                    raise
                log.warning("embedding failed (%s); storing %d text(s) without a vector, to be embedded later",
                            exc, len(wanted))
                defer_into.deferred_vectors = len(wanted)
                return vectors
            for text, vector in zip(wanted, embedded):
                vectors[text] = vector
        return vectors

    def _store_texts(self, conn: sqlite3.Connection, batch: Sequence[NewObservation],
                     known: dict[str, tuple[int, bool]], vectors: dict[str, np.ndarray],
                     report: WriteReport) -> tuple[dict[str, int], list[tuple[int, np.ndarray]]]:
        """Insert the batch's new texts (two statements for all of them) and set vectors of known ones."""
        text_ids: dict[str, int] = {t: v[0] for t, v in known.items()}
        new_vector_ids: list[tuple[int, np.ndarray]] = []
        fresh = [t for t in dict.fromkeys(o.text for o in batch) if t not in text_ids]  # first-seen order
        if fresh:
            # New ids lie above every id now in the table (AUTOINCREMENT), so one range read finds them all.
            top = conn.execute("SELECT COALESCE(MAX(id), 0) FROM texts").fetchone()[0]
            to_blob = codec.vector_to_blob
            conn.executemany("INSERT INTO texts(text, embedding) VALUES(?, ?)",
                             [(t, to_blob(vectors[t]) if t in vectors else None) for t in fresh])
            rows = conn.execute("SELECT id, text FROM texts WHERE id > ? ORDER BY id", (top,)).fetchall()
            conn.executemany("INSERT INTO texts_fts(rowid, text) VALUES(?, ?)", rows)
            for text_id, text in rows:
                vector = vectors.get(text)
                text_ids[text] = text_id
                known[text] = (text_id, vector is not None)
                if vector is not None:
                    new_vector_ids.append((text_id, vector))
            report.new_texts += len(rows)
        for text, vector in vectors.items():
            text_id, has_vector = known[text]
            if not has_vector:  # known text, first seen by a layer that wants meaning
                conn.execute("UPDATE texts SET embedding=? WHERE id=?", (codec.vector_to_blob(vector), text_id))
                known[text] = (text_id, True)
                new_vector_ids.append((text_id, vector))
        report.embedded = len(vectors)
        return text_ids, new_vector_ids

    def upsert_places(self, conn: sqlite3.Connection, batch: Sequence[NewObservation],
                      text_ids: dict[str, int]) -> None:
        groups: dict[tuple[int, str, int, int, int], list[Any]] = {}
        size, floor, body = self.cell_size, math.floor, _INTEROCEPTION
        for o in batch:
            position = o.position
            if position is None or o.source_type == body:  # body readings have no place (see wants_vector)
                continue
            x, y, z = position
            key = (text_ids[o.text], o.layer, floor(x / size), floor(y / size), floor(z / size))  # cell_of, inlined
            g = groups.get(key)
            if g is None:
                groups[key] = [1, x, y, z, o.stamp, o.stamp, o.id]
            else:
                g[0] += 1
                g[1] += x
                g[2] += y
                g[3] += z
                stamp = o.stamp
                if stamp < g[4]:
                    g[4] = stamp
                if stamp >= g[5]:
                    g[5], g[6] = stamp, o.id
        conn.executemany(
            "INSERT INTO places(text_id, layer, cx, cy, cz, count, sx, sy, sz, first_stamp, last_stamp,"
            " last_obs_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT(text_id, layer, cx, cy, cz) DO UPDATE SET"
            " count = count + excluded.count, sx = sx + excluded.sx, sy = sy + excluded.sy,"
            " sz = sz + excluded.sz, first_stamp = MIN(first_stamp, excluded.first_stamp),"
            " last_obs_id = CASE WHEN excluded.last_stamp >= last_stamp"
            "   THEN excluded.last_obs_id ELSE last_obs_id END,"
            " last_stamp = MAX(last_stamp, excluded.last_stamp)",
            [(*key, *g) for key, g in groups.items()],
        )
        self.state.announced.touched_places.extend(groups)
