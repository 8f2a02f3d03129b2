"""Usage statistics and patterns of a memory: what it holds, what recurs, how it is used.

Everything is read from SQLite with one read transaction (a consistent
picture while ingest goes on) plus file sizes, so ``emem stats`` works on a
file without loading the embedding model. The running memory adds what only
it knows: the query cache's counters.

"Most seen concepts" are the texts with the most hot observations
(``texts.refs``; archived sightings no longer count) among texts that carry
a vector, i.e. perception and notes, not body readings. Co-occurrence
patterns are entity pairs whose COOCCURS_WITH weight (visits in which both
were seen) reaches ``min_support``.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from emem_ros.core.types import EdgeKind, SourceType
from emem_ros.tools.results import fmt_clock, quoted

_BODY = SourceType.INTEROCEPTION.value


@dataclass(frozen=True)
class NamedCount:
    name: str
    count: int
    id: Optional[str] = None
    kind: Optional[str] = None


@dataclass(frozen=True)
class Pattern:
    """Two entities seen together in ``support`` visits."""

    a: str
    b: str
    a_id: str
    b_id: str
    support: float


@dataclass
class MemoryStats:
    counts: dict[str, int]
    tiers: dict[str, int]
    layers: dict[str, dict[str, Any]]
    """layer -> {"observations": n, "body": bool}."""
    episodes: dict[str, int]
    """status -> count."""
    edges: dict[str, int]
    top_entities: list[NamedCount]
    top_concepts: list[NamedCount]
    patterns: list[Pattern]
    min_support: float
    experiences: dict[str, Any]
    disk: dict[str, int]
    time_span: Optional[tuple[float, float]] = None
    cache: Optional[dict[str, Any]] = None
    indexes: Optional[dict[str, int]] = None
    """Entries per derived index (only from a running memory)."""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "counts": self.counts, "tiers": self.tiers, "layers": self.layers, "episodes": self.episodes,
            "edges": self.edges,
            "top_entities": [vars(n) for n in self.top_entities],
            "top_concepts": [{"text": n.name, "count": n.count} for n in self.top_concepts],
            "patterns": [{"a": p.a, "b": p.b, "a_id": p.a_id, "b_id": p.b_id, "support": p.support}
                         for p in self.patterns],
            "min_support": self.min_support,
            "experiences": self.experiences,
            "cache": self.cache,
            "indexes": self.indexes,
            "disk": self.disk,
            "time_span": list(self.time_span) if self.time_span else None,
        }

    def __str__(self) -> str:
        c = self.counts
        lines = [f"Memory: {c['observations']} observations ("
                 + ", ".join(f"{n} {t}" for t, n in sorted(self.tiers.items())) + f"), {c['texts']} distinct texts,"
                 f" {c['episodes']} episodes, {c['gists']} gists, {c['entities']} entities,"
                 f" {c['experiences']} experiences."]
        if self.time_span:
            lines.append(f"Time span: {fmt_clock(self.time_span[0])} to {fmt_clock(self.time_span[1])}.")
        if self.layers:
            lines.append("Layers: " + ", ".join(
                f"{name} {info['observations']}{' (body)' if info['body'] else ''}"
                for name, info in sorted(self.layers.items(), key=lambda item: -item[1]["observations"])))
        if self.episodes:
            lines.append("Episodes: " + ", ".join(f"{n} {s}" for s, n in sorted(self.episodes.items())))
        if self.top_concepts:
            lines.append("Most seen: " + ", ".join(f"{quoted(n.name, 60)} ×{n.count}" for n in self.top_concepts))
        if self.top_entities:
            lines.append("Top entities: " + ", ".join(
                f"{quoted(n.name, 60)}{' (' + n.kind + ')' if n.kind else ''} ×{n.count} {n.id}"
                for n in self.top_entities))
        if self.patterns:
            lines.append(f"Seen together (support ≥ {self.min_support:g}): " + ", ".join(
                f"{quoted(p.a, 40)} + {quoted(p.b, 40)} ×{p.support:g}" for p in self.patterns))
        elif c["entities"]:
            lines.append(f"No entity pair was seen together {self.min_support:g} times or more.")
        e = self.experiences
        if e["total"]:
            rate = f"{e['success_rate'] * 100:.0f}%" if e["success_rate"] is not None else "unknown"
            lines.append(f"Experiences: {e['current']} current ({e['superseded']} corrected), success rate {rate}"
                         f" ({e['succeeded']} succeeded, {e['failed']} failed, {e['unknown']} unknown).")
        if self.cache is not None:
            k = self.cache
            if k.get("enabled"):
                rate = f"{k['hit_rate'] * 100:.0f}%" if k["hit_rate"] is not None else "n/a"
                lines.append(f"Query cache: {k['hits']} hits, {k['misses']} misses (hit rate {rate}),"
                             f" {k['entries']} answers held, {k['stale']} dropped as stale.")
            else:
                lines.append("Query cache: off.")
        if self.indexes:
            lines.append("Indexes: " + ", ".join(f"{name} {n}" for name, n in self.indexes.items()) + ".")
        lines.append("Disk: " + ", ".join(f"{name} {_size(n)}" for name, n in self.disk.items() if n) +
                     f" (total {_size(sum(self.disk.values()))}).")
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def disk_usage(db_path: Path) -> dict[str, int]:
    """Bytes of the file, its SQLite sidecars, the index snapshots, the operation log and the cold store."""
    db_path = Path(db_path)

    def file(path: Path) -> int:
        try:
            return path.stat().st_size
        except OSError:
            return 0

    def folder(path: Path) -> int:
        total = 0
        if path.is_dir():
            for root, _, names in os.walk(path):
                total += sum(file(Path(root) / name) for name in names)
        return total

    return {
        "db": file(db_path),
        "wal": file(Path(f"{db_path}-wal")) + file(Path(f"{db_path}-shm")),
        "indexes": folder(db_path.with_name(db_path.name + ".idx")),
        "log": folder(db_path.with_name(db_path.name + ".log")),
        "cold": folder(db_path.with_name(db_path.name + ".cold")),
    }


def collect_stats(conn: sqlite3.Connection, db_path: Path, top_n: int = 5, min_support: float = 2.0,
                  cache: Optional[dict[str, Any]] = None) -> MemoryStats:
    """Statistics of the memory behind ``conn`` (any connection to it; read in one transaction)."""
    top_n = max(1, int(top_n))
    owns_transaction = not conn.in_transaction
    if owns_transaction:
        conn.execute("BEGIN")
    try:
        return _collect(conn, Path(db_path), top_n, float(min_support), cache)
    finally:
        if owns_transaction:
            conn.execute("COMMIT")


def _collect(conn: sqlite3.Connection, db_path: Path, top_n: int, min_support: float,
             cache: Optional[dict[str, Any]]) -> MemoryStats:
    def one(sql: str) -> int:
        return int(conn.execute(sql).fetchone()[0])

    tiers = dict(conn.execute("SELECT tier, COUNT(*) FROM observations GROUP BY tier").fetchall())
    layers: dict[str, dict[str, Any]] = {}
    for layer, source_type, n in conn.execute(
            "SELECT layer, source_type = ?, COUNT(*) FROM observations GROUP BY layer, source_type = ?",
            (_BODY, _BODY)):
        info = layers.setdefault(layer, {"observations": 0, "body": False})
        info["observations"] += n
        info["body"] = info["body"] or bool(source_type)
    edges = dict(conn.execute("SELECT kind, COUNT(*) FROM edges GROUP BY kind").fetchall())
    counts = {
        "observations": sum(tiers.values()),
        "texts": one("SELECT COUNT(*) FROM texts"),
        "places": one("SELECT COUNT(*) FROM places"),
        "episodes": one("SELECT COUNT(*) FROM episodes"),
        "gists": one("SELECT COUNT(*) FROM gists"),
        "entities": one("SELECT COUNT(*) FROM entities"),
        "edges": sum(edges.values()),
        "experiences": one("SELECT COUNT(*) FROM experiences"),
    }
    span = conn.execute("SELECT MIN(stamp), MAX(stamp) FROM observations").fetchone()
    top_entities = [
        NamedCount(name, int(n), f"ent-{eid}", etype) for eid, name, etype, n in conn.execute(
            "SELECT id, name, entity_type, sightings FROM entities ORDER BY sightings DESC, last_seen DESC, id"
            " LIMIT ?", (top_n,))]
    top_concepts = [
        NamedCount(text, int(n)) for text, n in conn.execute(
            "SELECT text, refs FROM texts WHERE embedding IS NOT NULL AND refs > 0 ORDER BY refs DESC, id LIMIT ?",
            (top_n,))]
    patterns = [
        Pattern(a or src, b or dst, src, dst, float(weight)) for src, dst, weight, a, b in conn.execute(
            "SELECT e.src, e.dst, e.weight, ea.name, eb.name FROM edges e"
            " LEFT JOIN entities ea ON ea.id = CAST(substr(e.src, 5) AS INTEGER)"
            " LEFT JOIN entities eb ON eb.id = CAST(substr(e.dst, 5) AS INTEGER)"
            " WHERE e.kind = ? AND e.weight >= ? ORDER BY e.weight DESC, e.src, e.dst LIMIT ?",
            (EdgeKind.COOCCURS_WITH.value, min_support, top_n))]
    return MemoryStats(
        counts=counts, tiers=tiers, layers=layers,
        episodes=dict(conn.execute("SELECT status, COUNT(*) FROM episodes GROUP BY status").fetchall()),
        edges=edges, top_entities=top_entities, top_concepts=top_concepts, patterns=patterns,
        min_support=min_support, experiences=_experiences(conn), disk=disk_usage(db_path),
        time_span=(float(span[0]), float(span[1])) if span[0] is not None else None, cache=cache,
    )


def _experiences(conn: sqlite3.Connection) -> dict[str, Any]:
    """Outcomes of the current records: a corrected record counts through its correction only."""
    total, current, succeeded, failed = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(cur), 0), COALESCE(SUM(cur AND success = 1), 0),"
        " COALESCE(SUM(cur AND success = 0), 0) FROM (SELECT e.success,"
        " NOT EXISTS (SELECT 1 FROM experiences c WHERE c.supersedes = e.id) AS cur FROM experiences e)"
    ).fetchone()
    known = succeeded + failed
    return {
        "total": total, "current": current, "superseded": total - current, "succeeded": succeeded,
        "failed": failed, "unknown": current - known,
        "success_rate": succeeded / known if known else None,
    }


def stats_of_file(db_path: str | os.PathLike[str], top_n: int = 5, min_support: float = 2.0) -> MemoryStats:
    """Statistics of a memory file without opening the memory (no model, no background threads)."""
    from emem_ros.core.errors import StoreError

    path = Path(db_path)
    if not path.is_file():
        raise StoreError(f"no memory file at {path}")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path}: {exc}") from exc
    try:
        return collect_stats(conn, path, top_n, min_support)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a readable emem_ros memory file: {exc}") from exc
    finally:
        conn.close()
