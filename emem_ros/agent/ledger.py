"""The experience ledger: what a planner meant, did, got and learned.

Records are immutable and content-addressed: the id is the SHA-256 of the
record's canonical JSON, so the same experience has the same id in any
process, and recording it twice is a no-op. A correction is a new record
that ``supersedes`` the old one; SQLite triggers refuse updates and deletes.
The vector is derived (not part of the content) and is filled in by a
background embedder, so recording costs one small transaction.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from emem_ros.agent.content_ids import canonical_content, record_content, sha256_hex
from emem_ros.core.errors import InvalidInputError, UnknownNodeError
from emem_ros.core.periodic import PeriodicThread
from emem_ros.core.types import NodeKind, Position, finite_position, make_id
from emem_ros.storage import codec
from emem_ros.storage.sqlutil import chunked, marks
from emem_ros.tools.hybrid import KeywordIndex, rrf

if TYPE_CHECKING:
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)

MAX_FIELD = 8192
APPLY_BATCH = 512
"""Logged records applied to SQLite together (sooner if anything reads or writes)."""

# The row is made from the canonical content itself (the very text the id hashes):
# the log holds [id, content] and SQLite does the column mapping, so a record
# costs one small log append at the caller.
_INSERT_SQL = (
    "INSERT INTO experiences(id, goal, action, result, reflection, success, tags, metadata,"
    " stamp, episode_id, x, y, z, supersedes)"
    " SELECT ?, json_extract(c, '$.goal'), json_extract(c, '$.action'), json_extract(c, '$.result'),"
    " json_extract(c, '$.reflection'), json_extract(c, '$.success'), json_extract(c, '$.tags'),"
    " NULLIF(json_extract(c, '$.metadata'), '{}'), json_extract(c, '$.stamp'),"
    " CAST(substr(json_extract(c, '$.episode'), 4) AS INTEGER), json_extract(c, '$.position[0]'),"
    " json_extract(c, '$.position[1]'), json_extract(c, '$.position[2]'), json_extract(c, '$.supersedes')"
    " FROM (SELECT ? AS c) WHERE true"
    " ON CONFLICT(id) DO NOTHING"
)
# Index the record only if the INSERT just before added it: changes() is the row
# count of the last completed INSERT, so a record recorded twice is indexed once
# (external-content FTS5 cannot be asked: it answers rowid lookups from the content table).
_FTS_SQL = (
    "INSERT INTO experiences_fts(rowid, goal, action, result, reflection, tags)"
    " SELECT n, goal, action, result, reflection, tags FROM experiences WHERE id=? AND changes() = 1"
)


@dataclass(frozen=True)
class Experience:
    id: str
    goal: str
    action: str = ""
    result: str = ""
    reflection: str = ""
    success: Optional[bool] = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    stamp: float = 0.0
    episode_id: Optional[str] = None
    position: Optional[Position] = None
    supersedes: Optional[str] = None


_KEYWORDS = KeywordIndex("experiences_fts")
"""The keyword lane of ``find``: the same BM25 planning as the tools' (``tools/hybrid.py``)."""
_COLUMNS = "n, id, goal, action, result, reflection, success, tags, metadata, stamp, episode_id, x, y, z, supersedes"


def _from_row(row: Sequence[Any]) -> Experience:
    (_, eid, goal, action, result, reflection, success, tags, metadata, stamp, episode, x, y, z,
     supersedes) = row
    return Experience(
        id=eid, goal=goal, action=action, result=result, reflection=reflection,
        success=None if success is None else bool(success), tags=tuple(json.loads(tags)),
        metadata=codec.loads(metadata), stamp=stamp,
        episode_id=make_id(NodeKind.EPISODE, episode) if episode is not None else None,
        position=(x, y, z) if x is not None else None, supersedes=supersedes,
    )


class ExperienceLedger:
    def __init__(self, engine: "Engine", embed_interval: float = 0.5) -> None:
        self._engine = engine
        self._store = engine.store
        self._embed_lock = threading.Lock()
        self._embedder: Optional[PeriodicThread] = None
        self._unembedded = 1  # unknown at open: the first search or background pass looks
        self._embedded_upto = 0  # records are embedded in order: those after this may lack a vector
        self._repair_keyword_index()
        if embed_interval > 0:
            self._embedder = PeriodicThread("emem-ledger-embed", embed_interval, self.embed_pending).start()

    def _repair_keyword_index(self) -> None:
        """Index records a file written by an earlier version left out of the keyword index."""
        conn = self._store.reader()
        rows = conn.execute("SELECT COUNT(*) FROM experiences").fetchone()[0]
        if rows and rows != conn.execute("SELECT COUNT(*) FROM experiences_fts_docsize").fetchone()[0]:
            log.warning("rebuilding the keyword index of %d experience record(s)", rows)
            with self._store.write() as wconn:
                wconn.execute("INSERT INTO experiences_fts(experiences_fts) VALUES('rebuild')")

    # -- writing ---------------------------------------------------------
    def record(
        self,
        goal: str,
        action: str = "",
        result: str = "",
        reflection: str = "",
        success: Optional[bool] = None,
        tags: Sequence[str] = (),
        metadata: Optional[dict[str, Any]] = None,
        timestamp: Optional[float] = None,
        episode_id: Optional[str] = None,
        x: Optional[float] = None,
        y: Optional[float] = None,
        z: Optional[float] = 0.0,
        supersedes: Optional[str] = None,
    ) -> str:
        """Append a record; returns its content id (the same id if it already exists)."""
        goal = _text("goal", goal, required=True)
        fields = {
            "goal": goal,
            "action": _text("action", action),
            "result": _text("result", result),
            "reflection": _text("reflection", reflection),
            "success": _success(success),
            "tags": _tags(tags),
            "metadata": _metadata(metadata),
            "stamp": _stamp(timestamp, self._engine.now() if timestamp is None else 0.0),
            "episode": (self._episode(episode_id) if episode_id
                        else self._engine.active_episode_id),
            "position": _position_list(x, y, z),
            "supersedes": self._existing(supersedes) if supersedes else None,
        }
        content = record_content(fields)  # metadata was checked by _metadata above
        record_id = sha256_hex(content)
        # Log-first: durable in the operation log when this returns; SQLite applies
        # it with the next write or read (see MemoryStore.write_deferred).
        waiting = self._store.write_deferred([(_INSERT_SQL, [record_id, content], False),
                                              (_FTS_SQL, [record_id], False)])
        self._unembedded += 1
        if waiting >= APPLY_BATCH:
            self._store.apply_deferred()
            if self._embedder is not None:
                self._embedder.poke()
        return record_id

    def correct(self, record_id: str, **changes: Any) -> str:
        """A new record that supersedes ``record_id``, with the given fields changed."""
        old = self.get(record_id)
        values: dict[str, Any] = {
            "goal": old.goal, "action": old.action, "result": old.result, "reflection": old.reflection,
            "success": old.success, "tags": old.tags, "metadata": old.metadata, "episode_id": old.episode_id,
        }
        if old.position is not None:
            values.update(x=old.position[0], y=old.position[1], z=old.position[2])
        unknown = set(changes) - set(values) - {"x", "y", "z", "timestamp"}
        if unknown:
            raise InvalidInputError(f"cannot correct unknown field(s): {', '.join(sorted(unknown))}")
        values.update(changes)
        return self.record(**values, supersedes=record_id)

    def embed_pending(self, batch: int = 256) -> int:
        """Give vectors to records that lack one (background; never on the caller's path)."""
        done = 0
        self._store.apply_deferred()
        with self._embed_lock:
            pending_before = self._unembedded
            after = self._embedded_upto  # walk the key from there: "IS NULL" alone rescans the table
            while True:
                rows = self._store.reader().execute(
                    "SELECT n, goal || ' ' || action || ' ' || result || ' ' || reflection FROM experiences"
                    " WHERE n > ? AND embedding IS NULL ORDER BY n LIMIT ?", (after, batch)).fetchall()
                if not rows:
                    self._unembedded = max(0, self._unembedded - pending_before)
                    self._embedded_upto = after
                    return done
                after = rows[-1][0]
                vectors = self._engine.embed_texts([r[1] for r in rows])
                with self._store.write() as conn:
                    conn.executemany("UPDATE experiences SET embedding=? WHERE n=?",
                                     [(codec.vector_to_blob(v), r[0]) for v, r in zip(vectors, rows)])
                self._store.vectors["experiences"].add(np.array([r[0] for r in rows]), vectors)
                done += len(rows)

    # -- reading ---------------------------------------------------------
    def get(self, record_id: str) -> Experience:
        self._store.apply_deferred()
        row = self._store.reader().execute(
            f"SELECT {_COLUMNS} FROM experiences WHERE id=?", (str(record_id),)).fetchone()
        if row is None:
            raise UnknownNodeError(f"no experience {record_id} in this memory")
        return _from_row(row)

    def find(
        self,
        query: Optional[str] = None,
        success: Optional[bool] = None,
        tags: Sequence[str] = (),
        time_after: Any = None,
        time_before: Any = None,
        episode_id: Optional[str] = None,
        near_x: Optional[float] = None,
        near_y: Optional[float] = None,
        radius: Optional[float] = None,
        n_results: int = 10,
        include_superseded: bool = False,
    ) -> list[tuple[Experience, float]]:
        """Filter in SQL, then rank by meaning (vector + keyword, fused) if a query is given."""
        self._store.apply_deferred()
        where, params = ["1"], list[object]()
        if success is not None:
            where.append("e.success = ?")
            params.append(int(bool(_success(success))))
        for tag in _tag_list(tags):
            where.append("EXISTS (SELECT 1 FROM json_each(e.tags) WHERE json_each.value = ?)")
            params.append(_tag(tag))
        after, before = self._engine.resolve_time(time_after), self._engine.resolve_time(time_before)
        if after is not None:
            where.append("e.stamp >= ?")
            params.append(after)
        if before is not None:
            where.append("e.stamp <= ?")
            params.append(before)
        if episode_id:
            where.append("e.episode_id = ?")
            params.append(int(str(self._episode(episode_id)).split("-")[1]))
        if near_x is not None or near_y is not None:
            center = finite_position(near_x, near_y, 0.0)
            assert center is not None  # near_x or near_y given: finite_position raises unless both are
            r = float(radius if radius is not None else 5.0)
            where.append("e.x BETWEEN ? AND ? AND e.y BETWEEN ? AND ?"
                         " AND (e.x - ?) * (e.x - ?) + (e.y - ?) * (e.y - ?) <= ?")
            params += [center[0] - r, center[0] + r, center[1] - r, center[1] + r,
                       center[0], center[0], center[1], center[1], r * r]
        if not include_superseded:
            where.append("NOT EXISTS (SELECT 1 FROM experiences c WHERE c.supersedes = e.id)")
        condition = " AND ".join(where)
        n_results = max(1, int(n_results))
        conn = self._store.reader()
        if not query:
            rows = conn.execute(f"SELECT {_prefixed()} FROM experiences e WHERE {condition}"
                                " ORDER BY e.stamp DESC LIMIT ?", (*params, n_results)).fetchall()
            return [(_from_row(r), 1.0) for r in rows]
        filtered = len(where) > (1 if include_superseded else 2)  # beyond "1" and "not superseded"
        return self._rank(query, condition, params, n_results, filtered)

    def _rank(self, query: str, condition: str, params: list[Any], n: int,
              filtered: bool = True) -> list[tuple[Experience, float]]:
        """Vector and keyword hits fused by reciprocal rank.

        Without filters (the common "have I done this before?") nothing scans the
        ledger: the vector index gives candidates and the condition (not
        superseded) is checked on those only. The keyword lane searches only
        the query's rare words (a word in most records says little and would
        make the full-text ranking score them all); the vector lane covers the rest.
        """
        conn = self._store.reader()
        if self._unembedded:
            self.embed_pending()  # what was just recorded is found by meaning too
        vector = self._engine.embed_query(query)
        index = self._store.vectors["experiences"]
        if filtered:
            allowed = np.array([r[0] for r in conn.execute(
                f"SELECT e.n FROM experiences e WHERE {condition}", params)], dtype=np.int64)
            if len(allowed) == 0:
                return []
            if len(allowed) <= 4096:
                vectors = _stored_vectors(conn, allowed, self._store.dim)
                sims = vectors @ vector
                order = np.argsort(-sims)[: n * 4]
                vector_hits = [(int(allowed[i]), float(sims[i])) for i in order if sims[i] > 0]
            else:
                allowed_set = set(allowed.tolist())
                labels, sims = index.search(vector, n * 4, allowed=lambda label: label in allowed_set)
                vector_hits = list(zip(labels.tolist(), sims.tolist()))
        else:
            labels, sims = index.search(vector, n * 4)
            keep = _satisfying(conn, labels.tolist(), condition, params)
            vector_hits = [(label, sim) for label, sim in zip(labels.tolist(), sims.tolist()) if label in keep]
        floor = self._engine.config.similarity_floor
        keyword = _KEYWORDS.search(conn, query, n * 4, where=f"rowid IN (SELECT e.n FROM experiences e WHERE {condition})",
                                   params=params)
        fused = rrf([h for h in vector_hits if h[1] >= floor], keyword)
        best = sorted(fused.values(), key=lambda item: -item.score)[:n]
        if not best:
            return []
        rows = {r[0]: r for r in conn.execute(
            f"SELECT {_COLUMNS} FROM experiences WHERE n IN ({marks(len(best))})", [b.key for b in best])}
        return [(_from_row(rows[item.key]), item.score) for item in best if item.key in rows]

    def count(self) -> int:
        self._store.apply_deferred()
        count: int = self._store.reader().execute("SELECT COUNT(*) FROM experiences").fetchone()[0]
        return count

    def success_rate(self) -> Optional[float]:
        self._store.apply_deferred()
        row = self._store.reader().execute(
            "SELECT AVG(success) FROM experiences WHERE success IS NOT NULL").fetchone()
        return None if row[0] is None else float(row[0])

    def close(self) -> None:
        if self._embedder is not None:
            self._embedder.stop()
            self._embedder = None
        try:
            self.embed_pending()
        except Exception:
            log.exception("could not embed pending experiences at close; they are embedded next time")

    # -- helpers -----------------------------------------------------------
    def _episode(self, episode_id: Optional[str]) -> Optional[str]:
        if not episode_id:
            return self._engine.active_episode_id
        number = self._engine.episode_number(episode_id)
        self._store.get_episode(number)
        return make_id(NodeKind.EPISODE, number)

    def _existing(self, record_id: str) -> str:
        self.get(record_id)
        return str(record_id)


def _prefixed() -> str:
    return ", ".join(f"e.{c.strip()}" for c in _COLUMNS.split(","))


def _stored_vectors(conn: sqlite3.Connection, labels: np.ndarray, dim: int) -> np.ndarray:
    out = np.zeros((len(labels), dim), dtype=np.float32)
    position = {int(n): i for i, n in enumerate(labels.tolist())}
    for chunk in chunked(list(position)):
        for n, blob in conn.execute(f"SELECT n, embedding FROM experiences WHERE n IN ({marks(len(chunk))})"
                                    " AND embedding IS NOT NULL", chunk):
            out[position[n]] = np.frombuffer(blob, dtype=np.float32)
    return out


def _position_list(x: Any, y: Any, z: Any) -> Optional[list[float]]:
    position = finite_position(x, y, z)
    return list(position) if position is not None else None


def _satisfying(conn: sqlite3.Connection, labels: list[int], condition: str, params: list[object]) -> set[int]:
    """Which of these records meet the condition (checked on them only)."""
    if not labels:
        return set()
    return {r[0] for r in conn.execute(
        f"SELECT e.n FROM experiences e WHERE e.n IN ({marks(len(labels))}) AND {condition}", [*labels, *params])}


def _text(name: str, value: Any, required: bool = False) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    value = value.strip()
    if required and not value:
        raise InvalidInputError(f"an experience needs a {name}")
    if len(value) > MAX_FIELD:
        raise InvalidInputError(f"{name} is {len(value)} characters, over the limit of {MAX_FIELD}")
    text: str = value
    return text


def _success(value: Any) -> Optional[bool]:
    if value is None or isinstance(value, bool):
        return value
    if value in (0, 1):
        return bool(value)
    raise InvalidInputError(f"success must be true, false or unset, got {value!r}")


def _tag_list(tags: Any) -> list[Any]:
    if tags is None:
        return []
    if isinstance(tags, str):
        return [tags]
    if not isinstance(tags, (list, tuple, set, frozenset)):
        raise InvalidInputError(f"tags must be a list of strings, got {type(tags).__name__}")
    return list(tags)


def _tags(tags: Any) -> list[str]:
    """Tags as stored and hashed: stripped, lower-case, unique, sorted."""
    if type(tags) is list and all(type(t) is str for t in tags):  # the usual call: skip the copies
        cleaned = {t.strip().lower() for t in tags}
        if "" not in cleaned:
            return sorted(cleaned)
    return sorted({_tag(t) for t in _tag_list(tags)})


def _tag(tag: Any) -> str:
    if not isinstance(tag, str) or not tag.strip():
        raise InvalidInputError(f"each tag must be a non-empty string, got {tag!r}")
    return tag.strip().lower()


def _metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}")
    try:
        canonical_content(metadata)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"metadata must be plain JSON (no NaN): {exc}") from exc
    return metadata


def _stamp(timestamp: Any, now: float) -> float:
    if timestamp is None:
        return now
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or not math.isfinite(timestamp):
        raise InvalidInputError(f"timestamp must be finite epoch seconds, got {timestamp!r}")
    return float(timestamp)
