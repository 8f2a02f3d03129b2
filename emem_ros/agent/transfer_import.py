"""Import an export file into a memory, merging without duplicates.

The whole file is checked first (``transfer_format.verify``: header, model,
every record, references, count and checksum); a truncated, damaged or
foreign file is refused before anything is written. Then records are
written in batches through the store's write path (``MemoryStore.write`` and
``write_observations``), so the operation log records every row and the
derived indexes follow.

Content keys (what makes an import idempotent; ids are remapped)
- observation: (layer, source_type, stamp, text, x, y, z), with multiset
  semantics: the target ends with at least as many copies as the file holds.
  Archived rows have no text in the hot tables; they match on the rest, and
  a hot row matches a row the target already archived. Only rows present
  before this import count, so exact repeats inside one file stay repeats;
- text: the string itself (interned; an existing text keeps its vector);
- episode: (name, start); an episode that has ended since an earlier import
  gets its end, outcome and summary;
- gist: (text, time_start, time_end);
- entity: (name, entity_type, first_seen); a newer export of the same
  entity (later last_seen) replaces its running statistics;
- edge: (kind, src, dst) after remapping, weight = the larger one;
- experience: its id, already the SHA-256 of its content. The id is kept
  even when the episode number it names changes with the import.

Into an empty memory, a gap-free source keeps its ids, active episodes stay
active and consolidation progress is restored, so the copy answers every
query exactly like the original. Into a memory that holds data, an active
episode arrives as 'abandoned' (it would otherwise capture this robot's
observations after a restart), and consolidation progress is not merged:
imported short-term observations are consolidated here like late arrivals.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from emem_ros.agent.transfer_format import (
    Verified,
    parse_line,
    read_lines,
    vector_blob,
    vector_of,
    verify,
)
from emem_ros.consolidation.coldstore import ColdStore
from emem_ros.consolidation.state import CONSOLIDATION_MARKS, ENTITY_MARKS, EPISODES
from emem_ros.core.types import EpisodeStatus, NodeKind, SourceType, Tier, make_id
from emem_ros.memfs.transfer import import_nodes
from emem_ros.storage.sqlutil import chunked, inserted_id, marks
from emem_ros.storage.store import NewObservation

if TYPE_CHECKING:
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)

BATCH = 2000
_PREFIX_KIND = {"obs": "obs", "ep": "episode", "gist": "gist", "ent": "entity"}


@dataclass
class ImportReport:
    path: Path
    added: Counter[str] = field(default_factory=Counter)
    existing: Counter[str] = field(default_factory=Counter)
    updated: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        kinds = sorted(set(self.added) | set(self.existing) | set(self.updated))
        parts = [f"{kind}: {self.added[kind]} added" + (f", {self.existing[kind]} already there" if
                                                         self.existing[kind] else "")
                 + (f", {self.updated[kind]} updated" if self.updated[kind] else "") for kind in kinds]
        lines = [f"Imported {self.path} in {self.seconds:.2f} s" + (": " + "; ".join(parts) if parts else
                                                                    ": it holds no records") + "."]
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


def import_file(engine: "Engine", path: str | Path, batch: int = BATCH,
                cold: Optional[ColdStore] = None) -> ImportReport:
    """Check the file whole, then merge it into the memory; returns what was added and what was there.

    ``cold``: the memory's open cold store, if it has one (archived records of the export go there).
    """
    started = time.perf_counter()
    path = Path(path)
    store = engine.store
    verified = verify(path, store.model_name, store.dim)
    engine.flush()
    report = _Importer(engine, path, verified, max(1, int(batch)), cold).run()
    report.seconds = time.perf_counter() - started
    return report


class _Importer:
    def __init__(self, engine: "Engine", path: Path, verified: Verified, batch: int,
                 cold: Optional[ColdStore] = None) -> None:
        self.engine = engine
        self.store = engine.store
        self.path = path
        self.verified = verified
        self.batch = batch
        self.report = ImportReport(path)
        conn = self.store.reader()
        self.fresh = not any(conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() for table in (
            "observations", "episodes", "gists", "entities", "experiences"))
        self.obs_before = conn.execute("SELECT COALESCE(MAX(id), 0) FROM observations").fetchone()[0]
        self.episodes: dict[int, int] = {}
        self.gists: dict[int, int] = {}
        self.entities: dict[int, int] = {}
        self.observations: dict[int, int] = {}
        self.texts: dict[int, list[Any]] = {}
        """ref -> [text, vector or None (dropped once the text is stored)]."""
        self.source_ids = array("q")
        self.target_ids = array("q")
        self.archived_places: list[NewObservation] = []
        self.matched: set[int] = set()
        """Target rows already matched by a record of this import (each counts once)."""
        self.demoted = 0
        self._cold = cold

    # ------------------------------------------------------------------ driving
    def run(self) -> ImportReport:
        kind: Optional[str] = None
        pending: list[dict[str, Any]] = []
        for number, line in read_lines(self.path):
            record = parse_line(self.path, number, line)
            t = record["t"]
            if t in ("header", "end"):
                continue
            if t == "text":
                self.texts[record["ref"]] = [record["text"], record.get("vec")]
                continue
            if t != kind or len(pending) >= self.batch:
                self._flush(kind, pending)
                kind, pending = t, []
            pending.append(record)
        self._flush(kind, pending)
        self._restore_archived_places()
        if self.demoted:
            self.report.notes.append(
                f"{self.demoted} episode(s) active in the export were stored as 'abandoned': this memory already "
                f"held data, and an active foreign episode would capture its observations after a restart")
        with self.store.write():  # rows arrived out of order: per-text views rebuild (storage/events.py)
            self.store.announce(reshaped=True)
        return self.report

    def _flush(self, kind: Optional[str], records: list[dict[str, Any]]) -> None:
        if not records or kind is None:
            return
        handler = {"episode": self._episodes, "gist": self._gists, "obs": self._observations,
                   "entity": self._entities, "edge": self._edges, "experience": self._experiences,
                   "marks": self._marks, "fsnode": self._fs_nodes}[kind]
        handler(records)

    # ------------------------------------------------------------------ episodes and gists
    def _episodes(self, records: list[dict[str, Any]]) -> None:
        vectors: list[tuple[int, np.ndarray]] = []
        with self.store.write() as conn:
            for r in records:
                row = conn.execute("SELECT id, end FROM episodes WHERE name=? AND start=? ORDER BY id LIMIT 1",
                                   (r["name"], r["start"])).fetchone()
                if row is not None:
                    self.episodes[r["ref"]] = row[0]
                    if row[1] is None and r["end"] is not None:
                        conn.execute(
                            "UPDATE episodes SET end=?, status=?, summary=?, action=?, result=?, reflection=?,"
                            " success=?, consolidated=?, embedding=COALESCE(?, embedding) WHERE id=?",
                            (r["end"], r["status"], r["summary"], r["action"], r["result"], r["reflection"],
                             r["success"], r["consolidated"], vector_blob(r.get("vec")), row[0]))
                        self.report.updated["episodes"] += 1
                        if r.get("vec"):
                            vectors.append((row[0], vector_of(r["vec"], self.store.dim)))
                    else:
                        self.report.existing["episodes"] += 1
                    continue
                status = r["status"]
                if status == EpisodeStatus.ACTIVE.value and not self.fresh:
                    status = EpisodeStatus.ABANDONED.value
                    self.demoted += 1
                cursor = conn.execute(
                    "INSERT INTO episodes(name, start, end, status, parent_id, previous_id, summary, goal, action,"
                    " result, reflection, success, consolidated, metadata, embedding)"
                    " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (r["name"], r["start"], r["end"], status, self._episode_by_key(conn, r.get("parent")),
                     self._episode_by_key(conn, r.get("previous")), r["summary"], r["goal"], r["action"],
                     r["result"], r["reflection"], r["success"], r["consolidated"], r["metadata"],
                     vector_blob(r.get("vec"))))
                self._added("episodes", cursor, r, vectors, self.episodes)
        self._index("episodes", vectors)

    def _added(self, table: str, cursor: Any, r: dict[str, Any], vectors: list[tuple[int, np.ndarray]],
               refs: Optional[dict[int, int]] = None) -> int:
        """Book a row just inserted from record ``r``: its new id (under the export's ``ref`` in ``refs``),
        the report's count, and its vector for the index; returns the new id."""
        number = inserted_id(cursor)
        if refs is not None:
            refs[r["ref"]] = number
        self.report.added[table] += 1
        if r.get("vec"):
            vectors.append((number, vector_of(r["vec"], self.store.dim)))
        return number

    @staticmethod
    def _episode_by_key(conn: Any, key: Optional[dict[str, Any]]) -> Optional[int]:
        if not key:
            return None
        row = conn.execute("SELECT id FROM episodes WHERE name=? AND start=? ORDER BY id LIMIT 1",
                           (key.get("name"), key.get("start"))).fetchone()
        return int(row[0]) if row else None

    def _gists(self, records: list[dict[str, Any]]) -> None:
        vectors: list[tuple[int, np.ndarray]] = []
        with self.store.write() as conn:
            for r in records:
                row = conn.execute("SELECT id FROM gists WHERE time_end=? AND time_start=? AND text=? ORDER BY id"
                                   " LIMIT 1", (r["time_end"], r["time_start"], r["text"])).fetchone()
                if row is not None:
                    self.gists[r["ref"]] = row[0]
                    self.report.existing["gists"] += 1
                    continue
                cursor = conn.execute(
                    "INSERT INTO gists(text, cx, cy, cz, radius, time_start, time_end, source_count, layers,"
                    " episode_id, created_at, metadata, embedding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (r["text"], r["cx"], r["cy"], r["cz"], r["radius"], r["time_start"], r["time_end"],
                     r["source_count"], r["layers"], self.episodes.get(r["episode"]) if r["episode"] is not None
                     else None, r["created_at"], r["metadata"], vector_blob(r.get("vec"))))
                number = self._added("gists", cursor, r, vectors, self.gists)
                conn.execute("INSERT INTO gists_fts(rowid, text) VALUES(?, ?)", (number, r["text"]))
        self._index("gists", vectors)

    # ------------------------------------------------------------------ observations
    def _observations(self, records: list[dict[str, Any]]) -> None:
        available, archived_slots = self._present(records)
        used = self.matched
        hot: list[NewObservation] = []
        skeletons: list[tuple[dict[str, Any], int]] = []
        for r in records:
            text = self.texts[r["text"]][0] if r["text"] is not None else None
            slot = (r["layer"], r["source_type"], r["stamp"], r["x"], r["y"], r["z"])
            match = _take(available.get((*slot, text)), used)
            if match is None and text is not None:
                match = _take(archived_slots.get(slot), used)
            if match is not None:
                self._mapped(r["ref"], match)
                self.report.existing["observations"] += 1
                continue
            number = self.store.allocate_observation_id()
            self._mapped(r["ref"], number)
            if text is None:
                skeletons.append((r, number))
            else:
                hot.append(self._new_observation(r, number, text))
        if hot:
            self.store.write_observations(hot, self.engine.embed_texts)
            for r in records:
                if r["text"] is not None:
                    self.texts[r["text"]][1] = None  # stored now: the target keeps the vector
            self.report.added["observations"] += len(hot)
        if skeletons:
            self._write_skeletons(skeletons)

    def _present(self, records: list[dict[str, Any]]
                 ) -> tuple[dict[tuple[Any, ...], list[int]], dict[tuple[Any, ...], list[int]]]:
        """Rows the target held before this import at the batch's stamps, by content key and by slot."""
        stamps = sorted({r["stamp"] for r in records})
        available: dict[tuple[Any, ...], list[int]] = {}
        archived: dict[tuple[Any, ...], list[int]] = {}
        conn = self.store.reader()
        for chunk in chunked(stamps):
            for oid, layer, source, stamp, text, x, y, z, tier in conn.execute(
                    "SELECT o.id, o.layer, o.source_type, o.stamp, t.text, o.x, o.y, o.z, o.tier FROM observations o"
                    f" LEFT JOIN texts t ON t.id = o.text_id WHERE o.stamp IN ({marks(len(chunk))})"
                    " AND o.id <= ? ORDER BY o.id DESC", [*chunk, self.obs_before]):
                slot = (layer, source, stamp, x, y, z)
                available.setdefault((*slot, text if tier != Tier.ARCHIVED.value else None), []).append(oid)
                if tier == Tier.ARCHIVED.value:
                    archived.setdefault(slot, []).append(oid)
        return available, archived

    def _mapped(self, ref: int, number: int) -> None:
        if ref in self.verified.edge_observations:
            self.observations[ref] = number
        if self.fresh:
            self.source_ids.append(ref)
            self.target_ids.append(number)

    def _new_observation(self, r: dict[str, Any], number: int, text: str) -> NewObservation:
        vector = self.texts[r["text"]][1]
        return NewObservation(
            id=number, text=text, stamp=float(r["stamp"]), layer=r["layer"], source_type=r["source_type"],
            position=(float(r["x"]), float(r["y"]), float(r["z"] or 0.0)) if r["x"] is not None else None,
            frame_id=r["frame_id"], confidence=float(r["confidence"]),
            episode_id=self.episodes.get(r["episode"]) if r["episode"] is not None else None,
            value=r["value"], metadata=json.loads(r["metadata"]) if r["metadata"] else None,
            embedding=vector_of(vector, self.store.dim) if vector is not None else None,
            tier=r["tier"], tier_since=r["tier_since"],
            gist_id=self.gists.get(r["gist"]) if r["gist"] is not None else None)

    def _write_skeletons(self, skeletons: list[tuple[dict[str, Any], int]]) -> None:
        """Archived rows: the raw text to the cold store first (as archival does), then the skeleton rows."""
        cold = [(r, n) for r, n in skeletons if r.get("cold") and r["cold"].get("text")]
        if cold:
            self.cold_store().append(self._cold_record(r, n) for r, n in cold)
            self.report.added["cold records"] += len(cold)
        rows = []
        for r, number in skeletons:
            episode = self.episodes.get(r["episode"]) if r["episode"] is not None else None
            gist = self.gists.get(r["gist"]) if r["gist"] is not None else None
            rows.append((number, None, r["stamp"], r["layer"], r["source_type"], r["x"], r["y"], r["z"], r["frame_id"],
                         r["confidence"], episode, gist, r["tier"], r["tier_since"], r["value"], None))
            kept = r.get("cold") or {}
            if kept.get("placed") and kept.get("text") and r["x"] is not None \
                    and r["source_type"] != SourceType.INTEROCEPTION.value:
                self.archived_places.append(NewObservation(
                    id=number, text=kept["text"], stamp=float(r["stamp"]), layer=r["layer"],
                    source_type=r["source_type"], position=(r["x"], r["y"], r["z"] or 0.0), frame_id=None))
        with self.store.write() as conn:
            conn.executemany(
                "INSERT INTO observations(id, text_id, stamp, layer, source_type, x, y, z, frame_id, confidence,"
                " episode_id, gist_id, tier, tier_since, value, metadata)"
                " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                rows)
        self.report.added["observations"] += len(rows)

    def cold_store(self) -> ColdStore:
        if self._cold is None:
            self._cold = ColdStore(self.store.path.with_name(self.store.path.name + ".cold"))
        return self._cold

    def _cold_record(self, r: dict[str, Any], number: int) -> dict[str, Any]:
        episode = self.episodes.get(r["episode"]) if r["episode"] is not None else None
        gist = self.gists.get(r["gist"]) if r["gist"] is not None else None
        return {
            "id": make_id(NodeKind.OBSERVATION, number), "stamp": r["stamp"], "layer": r["layer"],
            "source_type": r["source_type"], "position": [r["x"], r["y"], r["z"]] if r["x"] is not None else None,
            "frame_id": r["frame_id"], "text": r["cold"]["text"], "confidence": r["confidence"],
            "episode_id": make_id(NodeKind.EPISODE, episode) if episode is not None else None,
            "gist_id": make_id(NodeKind.GIST, gist) if gist is not None else None, "value": r["value"],
            "metadata": r["cold"].get("metadata"), "archived_at": r["tier_since"],
        }

    def _restore_archived_places(self) -> None:
        """Sightings archived while their text lived on still count in its places (as in the original).

        The export marks them ('placed'); they count here if their text lives in this memory too.
        """
        if not self.archived_places:
            return
        store = self.store
        with store.write_lock:
            texts = {o.text for o in self.archived_places}
            alive: dict[str, int] = {}
            for items in chunked(sorted(texts)):
                alive.update(store.reader().execute(
                    f"SELECT text, id FROM texts WHERE text IN ({marks(len(items))})", items).fetchall())
            batch = [o for o in self.archived_places if o.text in alive]
            if not batch:
                return
            top = store.reader().execute("SELECT COALESCE(MAX(id), 0) FROM places").fetchone()[0]
            with store.write() as conn:
                store.upsert_places(conn, batch, alive)
                created = conn.execute("SELECT id, cx, cy, cz FROM places WHERE id > ?", (top,)).fetchall()
            if created:
                store.places.insert(np.array([p[0] for p in created], dtype=np.int64),
                                    np.array([store.cell_box(*p[1:]) for p in created], dtype=np.float64))

    # ------------------------------------------------------------------ entities, edges, experiences
    def _entities(self, records: list[dict[str, Any]]) -> None:
        vectors: list[tuple[int, np.ndarray]] = []
        with self.store.write() as conn:
            for r in records:
                row = conn.execute(
                    "SELECT id, last_seen FROM entities WHERE name=? AND first_seen=? AND entity_type IS ?"
                    " ORDER BY id LIMIT 1", (r["name"], r["first_seen"], r["entity_type"])).fetchone()
                if row is not None:
                    self.entities[r["ref"]] = row[0]
                    if r["last_seen"] > row[1]:
                        conn.execute(
                            "UPDATE entities SET x=?, y=?, z=?, spread=?, last_seen=?, sightings=?, confidence=?,"
                            " metadata=? WHERE id=?", (r["x"], r["y"], r["z"], r["spread"], r["last_seen"],
                                                       r["sightings"], r["confidence"], r["metadata"], row[0]))
                        self.report.updated["entities"] += 1
                    else:
                        self.report.existing["entities"] += 1
                    continue
                cursor = conn.execute(
                    "INSERT INTO entities(name, entity_type, x, y, z, spread, first_seen, last_seen, sightings,"
                    " confidence, layer, metadata, embedding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (r["name"], r["entity_type"], r["x"], r["y"], r["z"], r["spread"], r["first_seen"],
                     r["last_seen"], r["sightings"], r["confidence"], r["layer"], r["metadata"],
                     vector_blob(r.get("vec"))))
                self._added("entities", cursor, r, vectors, self.entities)
        self._index("entities", vectors)

    def _node(self, node: str) -> Optional[str]:
        prefix, _, digits = node.partition("-")
        table = {"obs": self.observations, "ep": self.episodes, "gist": self.gists, "ent": self.entities}[prefix]
        number = table.get(int(digits))
        return f"{prefix}-{number}" if number is not None else None

    def _edges(self, records: list[dict[str, Any]]) -> None:
        with self.store.write() as conn:
            for r in records:
                src, dst = self._node(r["src"]), self._node(r["dst"])
                if src is None or dst is None:
                    continue
                row = conn.execute("SELECT weight FROM edges WHERE kind=? AND src=? AND dst=?",
                                   (r["kind"], src, dst)).fetchone()
                if row is not None and row[0] >= r["weight"]:
                    self.report.existing["edges"] += 1
                    continue
                conn.execute(
                    "INSERT INTO edges(kind, src, dst, weight, updated) VALUES(?,?,?,?,?)"
                    " ON CONFLICT(kind, src, dst) DO UPDATE SET weight = MAX(weight, excluded.weight),"
                    " updated = MAX(updated, excluded.updated)", (r["kind"], src, dst, r["weight"], r["updated"]))
                (self.report.updated if row is not None else self.report.added)["edges"] += 1

    def _experiences(self, records: list[dict[str, Any]]) -> None:
        vectors: list[tuple[int, np.ndarray]] = []
        with self.store.write() as conn:
            for r in records:
                if conn.execute("SELECT 1 FROM experiences WHERE id=?", (r["id"],)).fetchone():
                    self.report.existing["experiences"] += 1
                    continue
                cursor = conn.execute(
                    "INSERT INTO experiences(id, goal, action, result, reflection, success, tags, metadata, stamp,"
                    " episode_id, x, y, z, supersedes, embedding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (r["id"], r["goal"], r["action"], r["result"], r["reflection"], r["success"], r["tags"],
                     r["metadata"], r["stamp"], self.episodes.get(r["episode"]) if r["episode"] is not None
                     else None, r["x"], r["y"], r["z"], r["supersedes"], vector_blob(r.get("vec"))))
                number = self._added("experiences", cursor, r, vectors)
                conn.execute("INSERT INTO experiences_fts(rowid, goal, action, result, reflection, tags)"
                             " VALUES(?,?,?,?,?,?)", (number, r["goal"], r["action"], r["result"], r["reflection"],
                                                      r["tags"]))
        self._index("experiences", vectors)

    def _marks(self, records: list[dict[str, Any]]) -> None:
        """Consolidation progress of the original, for a copy into an empty memory only."""
        if not self.fresh:
            self.report.notes.append("consolidation progress was not merged: imported short-term observations "
                                     "are consolidated by this memory like late arrivals")
            return
        values: list[tuple[str, str]] = []
        for r in records:
            for key, value in r["values"].items():
                if key in (CONSOLIDATION_MARKS, ENTITY_MARKS) and isinstance(value, dict):
                    mark = int(value.get("id") or 0)
                    at = bisect.bisect_right(self.source_ids, mark)
                    value = {"stamp": value.get("stamp"), "id": int(self.target_ids[at - 1]) if at else 0}
                elif key == EPISODES and isinstance(value, dict):
                    value = {part: [self.episodes[int(n)] for n in value.get(part) or [] if int(n) in self.episodes]
                             for part in ("pending", "released")}
                else:
                    continue
                values.append((key, json.dumps(value, separators=(",", ":"))))
        if values:
            with self.store.write() as conn:
                conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", values)

    def _fs_nodes(self, records: list[dict[str, Any]]) -> None:
        """MemFS folders and files, merged by path (``memfs/transfer.py``)."""
        added, existing, updated = import_nodes(self.engine, records)
        self.report.added["fs_nodes"] += added
        self.report.existing["fs_nodes"] += existing
        self.report.updated["fs_nodes"] += updated

    # ------------------------------------------------------------------ helpers
    def _index(self, name: str, vectors: list[tuple[int, np.ndarray]]) -> None:
        if vectors:
            self.store.vectors[name].add(np.array([n for n, _ in vectors], dtype=np.int64),
                                         np.stack([v for _, v in vectors]).astype(np.float32))


def _take(ids: Optional[list[int]], used: set[int]) -> Optional[int]:
    """The smallest target id of a content key not matched yet by this import."""
    while ids:
        number = ids.pop()
        if number not in used:
            used.add(number)
            return number
    return None



