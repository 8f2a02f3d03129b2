"""Export a memory (or a time range / an episode of it) to a JSON-lines file.

Reads the memory file directly, in one read transaction (a consistent
picture while a robot keeps writing), so exporting needs no embedding model.
Archived observations keep their raw text from the cold store.

What a partial export holds
- observations: stamp within [since, until], and/or in the episode or one of
  its subtasks;
- episodes: those the exported observations, gists and experiences belong
  to, those overlapping the time range, and the chosen episode's subtree;
- gists: those overlapping the range or belonging to the episodes, plus
  every gist summarising an exported observation;
- entities: those with an OBSERVED_IN edge to an exported observation, and
  (time range) those seen within it; edges whose both ends are exported;
- experiences: stamp within the range and/or of the episodes.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from emem_ros.agent.transfer_format import RecordWriter, TransferError, vector_text
from emem_ros.consolidation.coldstore import ColdStore
from emem_ros.consolidation.state import CONSOLIDATION_MARKS, ENTITY_MARKS, EPISODES
from emem_ros.core.errors import StoreError
from emem_ros.core.types import NodeKind, SourceType, Tier, make_id
from emem_ros.memfs.transfer import export_nodes
from emem_ros.storage.sqlutil import marks

CHUNK = 900
PLACE_CELL = 0.5
"""Metres: ``MemoryStore.cell_size``, the grid of the places table."""
_BODY = SourceType.INTEROCEPTION.value


@dataclass(frozen=True)
class Selection:
    since: Optional[float] = None
    until: Optional[float] = None
    episode: Optional[int] = None

    @property
    def everything(self) -> bool:
        return self.since is None and self.until is None and self.episode is None

    def describe(self) -> dict[str, Any]:
        return {"since": self.since, "until": self.until,
                "episode": make_id(NodeKind.EPISODE, self.episode) if self.episode is not None else None}


@dataclass(frozen=True)
class ExportReport:
    path: Path
    counts: dict[str, int]
    bytes: int
    seconds: float

    def __str__(self) -> str:
        parts = ", ".join(f"{n} {kind}" for kind, n in self.counts.items() if n)
        return f"Exported {parts or 'nothing'} to {self.path} ({self.bytes} bytes, {self.seconds:.2f} s)."


def export_file(db_path: str | Path, out_path: str | Path, since: Optional[float] = None,
                until: Optional[float] = None, episode: Optional[int] = None) -> ExportReport:
    """Export the memory file ``db_path`` (times in epoch seconds; ``episode`` a row number)."""
    started = time.perf_counter()
    db_path, out_path = Path(db_path), Path(out_path)
    if since is not None and until is not None and since > until:
        raise TransferError("--since is later than --until; swap them")
    if not db_path.is_file():
        raise StoreError(f"no memory file at {db_path}")
    if not out_path.parent.is_dir():
        raise TransferError(f"cannot write {out_path}: folder {out_path.parent} does not exist")
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        conn.execute("BEGIN")
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if "embedding_model" not in meta:
            raise StoreError(f"{db_path} records no embedding model: is it an emem_ros memory file?")
        selection = Selection(since, until, episode)
        if episode is not None and not conn.execute("SELECT 1 FROM episodes WHERE id=?", (episode,)).fetchone():
            raise TransferError(f"no episode {make_id(NodeKind.EPISODE, episode)} in {db_path}")
        writer = RecordWriter(out_path, {
            "embedding_model": meta["embedding_model"], "embedding_dim": int(meta.get("embedding_dim", 0)),
            "schema_version": int(meta.get("schema_version", 0)), "exported_at": time.time(),
            "source": db_path.name, "selection": selection.describe()})
        try:
            _Exporter(conn, writer, selection, db_path, meta).run()
            size = writer.finish()
        except BaseException:
            writer.abort()
            raise
        conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read {db_path}: {exc}") from exc
    finally:
        conn.close()
    return ExportReport(out_path, dict(writer.counts), size, time.perf_counter() - started)


class _Exporter:
    def __init__(self, conn: sqlite3.Connection, writer: RecordWriter, selection: Selection, db_path: Path,
                 meta: dict[str, str]) -> None:
        self.conn = conn
        self.writer = writer
        self.sel = selection
        self.db_path = db_path
        self.meta = meta
        self.episodes: set[int] = set()
        self.gists: set[int] = set()
        self.entities: set[int] = set()
        self.texts: set[int] = set()

    # ------------------------------------------------------------------ selection
    def _obs_where(self, alias: str = "o") -> tuple[str, list[Any]]:
        where, params = ["1"], []
        if self.sel.since is not None:
            where.append(f"{alias}.stamp >= ?")
            params.append(self.sel.since)
        if self.sel.until is not None:
            where.append(f"{alias}.stamp <= ?")
            params.append(self.sel.until)
        if self.sel.episode is not None:
            slots = marks(len(self.subtree))
            where.append(f"{alias}.episode_id IN ({slots})")
            params += sorted(self.subtree)
        return " AND ".join(where), params

    def _subtree(self, root: int) -> set[int]:
        found, frontier = {root}, [root]
        while frontier:
            slots = marks(len(frontier))
            frontier = [r[0] for r in self.conn.execute(
                f"SELECT id FROM episodes WHERE parent_id IN ({slots})", frontier) if r[0] not in found]
            found.update(frontier)
        return found

    def _select(self) -> None:
        conn, sel = self.conn, self.sel
        self.subtree = self._subtree(sel.episode) if sel.episode is not None else set()
        if sel.everything:
            self.episodes = {r[0] for r in conn.execute("SELECT id FROM episodes")}
            self.gists = {r[0] for r in conn.execute("SELECT id FROM gists")}
            self.entities = {r[0] for r in conn.execute("SELECT id FROM entities")}
            return
        where, params = self._obs_where()
        self.episodes = set(self.subtree)
        self.episodes |= {r[0] for r in conn.execute(
            f"SELECT DISTINCT o.episode_id FROM observations o WHERE {where} AND o.episode_id IS NOT NULL", params)}
        self.gists = {r[0] for r in conn.execute(
            f"SELECT DISTINCT o.gist_id FROM observations o WHERE {where} AND o.gist_id IS NOT NULL", params)}
        if sel.episode is not None:
            self.gists |= set(self._ids_in("SELECT id FROM gists WHERE episode_id IN ({})", self.subtree))
        else:
            lo = sel.since if sel.since is not None else float("-inf")
            hi = sel.until if sel.until is not None else float("inf")
            self.episodes |= {r[0] for r in conn.execute(
                "SELECT id FROM episodes WHERE start <= ? AND (end IS NULL OR end >= ?)", (hi, lo))}
            self.gists |= {r[0] for r in conn.execute(
                "SELECT id FROM gists WHERE time_start <= ? AND time_end >= ?", (hi, lo))}
            self.entities |= {r[0] for r in conn.execute(
                "SELECT id FROM entities WHERE first_seen <= ? AND last_seen >= ?", (hi, lo))}
        self.entities |= {int(r[0][4:]) for r in conn.execute(
            f"SELECT DISTINCT e.src FROM edges e JOIN observations o ON e.dst = 'obs-' || o.id"
            f" WHERE e.kind = 'OBSERVED_IN' AND {where}", params)}
        exp_where, exp_params = self._experience_where()
        self.episodes |= {r[0] for r in conn.execute(
            f"SELECT DISTINCT episode_id FROM experiences WHERE {exp_where} AND episode_id IS NOT NULL", exp_params)}
        self.episodes |= set(self._ids_in("SELECT episode_id FROM gists WHERE id IN ({}) AND episode_id IS NOT NULL",
                                          self.gists))

    def _experience_where(self) -> tuple[str, list[Any]]:
        where, params = ["1"], []
        if self.sel.since is not None:
            where.append("stamp >= ?")
            params.append(self.sel.since)
        if self.sel.until is not None:
            where.append("stamp <= ?")
            params.append(self.sel.until)
        if self.sel.episode is not None:
            where.append(f"episode_id IN ({marks(len(self.subtree))})")
            params += sorted(self.subtree)
        return " AND ".join(where), params

    def _ids_in(self, sql: str, ids: Iterable[int]) -> list[int]:
        ids = sorted(ids)
        out: list[int] = []
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            out += [r[0] for r in self.conn.execute(sql.format(marks(len(chunk))), chunk)]
        return out

    def _rows(self, sql: str, ids: Iterable[int]) -> Iterator[tuple[Any, ...]]:
        """Rows of ``sql`` (with one ``IN ({})``) for ``ids``, in id order."""
        ids = sorted(ids)
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            yield from self.conn.execute(sql.format(marks(len(chunk))), chunk)

    # ------------------------------------------------------------------ writing
    def run(self) -> None:
        self._select()
        self._episodes()
        self._gists()
        exported_obs = self._observations()
        self._entities()
        self._edges(exported_obs)
        self._experiences()
        self._marks()
        if self.sel.episode is None:  # notes belong to no episode: a time range or everything carries them
            export_nodes(self.conn, self.writer.write, self.sel.since, self.sel.until)

    def _episode_key(self, number: Optional[int]) -> Optional[dict[str, Any]]:
        if number is None:
            return None
        row = self.conn.execute("SELECT name, start FROM episodes WHERE id=?", (number,)).fetchone()
        return {"name": row[0], "start": row[1]} if row else None

    def _episodes(self) -> None:
        for row in self._rows(
                "SELECT id, name, start, end, status, parent_id, previous_id, summary, goal, action, result,"
                " reflection, success, consolidated, metadata, embedding FROM episodes WHERE id IN ({}) ORDER BY id",
                self.episodes):
            (eid, name, start, end, status, parent, previous, summary, goal, action, result, reflection, success,
             consolidated, metadata, embedding) = row
            self.writer.write({
                "t": "episode", "ref": eid, "name": name, "start": start, "end": end, "status": status,
                "parent": self._episode_key(parent), "previous": self._episode_key(previous),
                "summary": summary or "", "goal": goal, "action": action, "result": result,
                "reflection": reflection, "success": success, "consolidated": consolidated, "metadata": metadata,
                "vec": vector_text(embedding)})

    def _gists(self) -> None:
        for row in self._rows(
                "SELECT id, text, cx, cy, cz, radius, time_start, time_end, source_count, layers, episode_id,"
                " created_at, metadata, embedding FROM gists WHERE id IN ({}) ORDER BY id", self.gists):
            (gid, text, cx, cy, cz, radius, t0, t1, count, layers, episode, created, metadata, embedding) = row
            self.writer.write({
                "t": "gist", "ref": gid, "text": text, "cx": cx, "cy": cy, "cz": cz, "radius": radius,
                "time_start": t0, "time_end": t1, "source_count": count, "layers": layers or "[]",
                "episode": episode if episode in self.episodes else None, "created_at": created,
                "metadata": metadata, "vec": vector_text(embedding)})

    def _observations(self) -> set[int]:
        where, params = self._obs_where()
        cold = self._cold_records(where, params)
        placed = self._placed_archived(cold, where, params)
        exported: set[int] = set()
        cursor = self.conn.execute(
            "SELECT o.id, o.text_id, o.stamp, o.layer, o.source_type, o.x, o.y, o.z, o.frame_id, o.confidence,"
            f" o.episode_id, o.gist_id, o.tier, o.tier_since, o.value, o.metadata FROM observations o WHERE {where}"
            " ORDER BY o.id", params)
        while True:
            rows = cursor.fetchmany(2048)
            if not rows:
                break
            new_texts = {r[1] for r in rows if r[1] is not None and r[1] not in self.texts}
            texts = {tid: (text, blob) for tid, text, blob in self._rows(
                "SELECT id, text, embedding FROM texts WHERE id IN ({})", new_texts)}
            for (oid, text_id, stamp, layer, source, x, y, z, frame, confidence, episode, gist, tier, since,
                 value, metadata) in rows:
                if text_id is not None and text_id not in self.texts:
                    text, blob = texts[text_id]
                    self.writer.write({"t": "text", "ref": text_id, "text": text, "vec": vector_text(blob)})
                    self.texts.add(text_id)
                record = {
                    "t": "obs", "ref": oid, "text": text_id, "stamp": stamp, "layer": layer, "source_type": source,
                    "x": x, "y": y, "z": z, "frame_id": frame, "confidence": confidence,
                    "episode": episode if episode in self.episodes else None,
                    "gist": gist if gist in self.gists else None, "tier": tier, "tier_since": since,
                    "value": value, "metadata": metadata}
                if tier == Tier.ARCHIVED.value:
                    kept = cold.get(make_id(NodeKind.OBSERVATION, oid))
                    if kept is not None:
                        record["cold"] = {"text": kept.get("text"), "metadata": kept.get("metadata"),
                                          "placed": oid in placed}
                self.writer.write(record)
                exported.add(oid)
        return exported

    def _cold_records(self, where: str, params: list[Any]) -> dict[str, dict[str, Any]]:
        """Raw text of the archived observations in the selection (one pass over the cold store)."""
        archived = self.conn.execute(
            f"SELECT COUNT(*) FROM observations o WHERE {where} AND o.tier = ?", [*params, Tier.ARCHIVED.value]
        ).fetchone()[0]
        if not archived:
            return {}
        wanted = {make_id(NodeKind.OBSERVATION, r[0]) for r in self.conn.execute(
            f"SELECT o.id FROM observations o WHERE {where} AND o.tier = ?", [*params, Tier.ARCHIVED.value])}
        store = ColdStore(self.db_path.with_name(self.db_path.name + ".cold"))
        return {r["id"]: r for r in store.iter_records(wanted)}

    def _placed_archived(self, cold: dict[str, dict[str, Any]], where: str, params: list[Any]) -> set[int]:
        """Archived rows that still count in their text's places (archived while the text lived on).

        Archival leaves a place's count alone unless the text dies (then the place
        goes). A place's count minus its hot rows is how many archived sightings
        it still holds; they are the latest ones (largest ids) of that text,
        layer and cell: older ones belonged to a text row that died since.
        """
        if not cold:
            return set()
        candidates: dict[tuple[Any, ...], list[int]] = {}
        rows = self.conn.execute(
            f"SELECT o.id, o.layer, o.x, o.y, o.z FROM observations o WHERE {where} AND o.tier = ?"
            " AND o.x IS NOT NULL AND o.source_type != ?", [*params, Tier.ARCHIVED.value, _BODY]).fetchall()
        texts = {oid: cold[make_id(NodeKind.OBSERVATION, oid)].get("text") for oid, *_ in rows
                 if make_id(NodeKind.OBSERVATION, oid) in cold}
        alive = dict(self._rows("SELECT text, id FROM texts WHERE text IN ({})", {t for t in texts.values() if t}))
        for oid, layer, x, y, z in rows:
            text_id = alive.get(texts.get(oid))
            if text_id is not None:
                candidates.setdefault((text_id, layer, *_cell(x, y, z)), []).append(oid)
        placed: set[int] = set()
        hot: dict[tuple[int, str], dict[tuple[Any, ...], int]] = {}
        for key, ids in candidates.items():
            text_id, layer, cell = key[0], key[1], key[2:]
            row = self.conn.execute("SELECT count FROM places WHERE text_id=? AND layer=? AND cx=? AND cy=? AND cz=?",
                                    key).fetchone()
            if row is None:
                continue
            if (text_id, layer) not in hot:
                cells: dict[tuple[Any, ...], int] = {}
                for hx, hy, hz in self.conn.execute(
                        "SELECT x, y, z FROM observations WHERE text_id=? AND layer=? AND x IS NOT NULL"
                        " AND source_type != ?", (text_id, layer, _BODY)):
                    c = _cell(hx, hy, hz)
                    cells[c] = cells.get(c, 0) + 1
                hot[(text_id, layer)] = cells
            extra = row[0] - hot[(text_id, layer)].get(tuple(cell), 0)
            if extra > 0:
                placed.update(sorted(ids)[-extra:])
        return placed

    def _entities(self) -> None:
        for row in self._rows(
                "SELECT id, name, entity_type, x, y, z, spread, first_seen, last_seen, sightings, confidence, layer,"
                " metadata, embedding FROM entities WHERE id IN ({}) ORDER BY id", self.entities):
            (eid, name, etype, x, y, z, spread, first, last, sightings, confidence, layer, metadata, embedding) = row
            self.writer.write({
                "t": "entity", "ref": eid, "name": name, "entity_type": etype, "x": x, "y": y, "z": z,
                "spread": spread, "first_seen": first, "last_seen": last, "sightings": sightings,
                "confidence": confidence, "layer": layer, "metadata": metadata, "vec": vector_text(embedding)})

    def _edges(self, observations: set[int]) -> None:
        exported = {"obs": observations, "ep": self.episodes, "gist": self.gists, "ent": self.entities}
        for kind, src, dst, weight, updated in self.conn.execute(
                "SELECT kind, src, dst, weight, updated FROM edges ORDER BY kind, src, dst"):
            if _inside(src, exported) and _inside(dst, exported):
                self.writer.write({"t": "edge", "kind": kind, "src": src, "dst": dst, "weight": weight,
                                   "updated": updated})

    def _experiences(self) -> None:
        where, params = self._experience_where()
        for row in self.conn.execute(
                "SELECT id, goal, action, result, reflection, success, tags, metadata, stamp, episode_id, x, y, z,"
                f" supersedes, embedding FROM experiences WHERE {where} ORDER BY n", params):
            (xid, goal, action, result, reflection, success, tags, metadata, stamp, episode, x, y, z, supersedes,
             embedding) = row
            self.writer.write({
                "t": "experience", "id": xid, "goal": goal, "action": action, "result": result,
                "reflection": reflection, "success": success, "tags": tags, "metadata": metadata, "stamp": stamp,
                "episode": episode if episode in self.episodes else None, "x": x, "y": y, "z": z,
                "supersedes": supersedes, "vec": vector_text(embedding)})

    def _marks(self) -> None:
        """Consolidation progress, so a whole copy does not consolidate again what the original had."""
        if not self.sel.everything:
            return
        values = {}
        for key in (CONSOLIDATION_MARKS, ENTITY_MARKS, EPISODES):
            if key in self.meta:
                try:
                    values[key] = json.loads(self.meta[key])
                except ValueError:
                    continue
        if values:
            self.writer.write({"t": "marks", "values": values})


def _cell(x: float, y: float, z: Optional[float]) -> tuple[int, int, int]:
    """The places grid cell of a position (``MemoryStore.cell_of``)."""
    return (math.floor(x / PLACE_CELL), math.floor(y / PLACE_CELL), math.floor((z or 0.0) / PLACE_CELL))


def _inside(node: str, exported: dict[str, set[int]]) -> bool:
    prefix, _, digits = node.partition("-")
    return digits.isdigit() and int(digits) in exported.get(prefix, ())
