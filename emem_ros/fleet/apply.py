"""Apply translated log operations to PostgreSQL, in batches, inside the caller's transaction.

Inserts are buffered and written in bulk (binary COPY into a temporary
staging table, then one ``INSERT ... SELECT ... ON CONFLICT DO NOTHING``
into the fleet table: re-sent rows are dropped by their keys); any other
operation first writes what is buffered, so the log's order is kept where it
matters (an entity is inserted before it is updated). Positions are put into
the fleet frame here, with the robot's transform.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from emem_ros.fleet.errors import FleetError
from emem_ros.fleet.schema import FleetInfo, ensure_partitions, rebuild_summaries
from emem_ros.fleet.transform import RigidTransform
from emem_ros.fleet.translate import (
    AUTOINCREMENT_TABLES,
    ExperiencesByID,
    InsertRows,
    TextEmbedding,
    TranslatorState,
    UpdateSQL,
)

FLUSH_ORDER = ("texts", "episodes", "gists", "entities", "observations", "edges")

OBSERVATION_STAGE = ("id", "text_id", "stamp", "layer", "source_type", "x", "y", "z", "frame_id", "confidence",
                     "episode_id", "gist_id", "tier", "tier_since", "value", "metadata")
OBSERVATION_TYPES = ("int8", "int8", "float8", "text", "text", "float8", "float8", "float8", "text", "float8",
                     "int8", "int8", "text", "float8", "float8", "text")
OBSERVATION_DEFAULTS = {"confidence": 1.0, "tier": "short_term"}

# Per table: fleet column, robot column (or a position marker), COPY type.
ROW_TABLES: dict[str, list[tuple[str, str, str]]] = {
    "episodes": [("id", "id", "int8"), ("name", "name", "text"), ("start", "start", "float8"),
                 ("end", "end", "float8"), ("status", "status", "text"), ("parent_id", "parent_id", "int8"),
                 ("previous_id", "previous_id", "int8"), ("summary", "summary", "text"), ("goal", "goal", "text"),
                 ("action", "action", "text"), ("result", "result", "text"), ("reflection", "reflection", "text"),
                 ("success", "success", "int4"), ("consolidated", "consolidated", "int4"),
                 ("metadata", "metadata", "text"), ("embedding", "embedding", "vector")],
    "gists": [("id", "id", "int8"), ("text", "text", "text"), ("center", "@cx,cy,cz", "point"),
              ("radius", "radius", "float8"), ("time_start", "time_start", "float8"),
              ("time_end", "time_end", "float8"), ("source_count", "source_count", "int4"),
              ("layers", "layers", "jsonb"), ("episode_id", "episode_id", "int8"),
              ("created_at", "created_at", "float8"), ("metadata", "metadata", "text"),
              ("embedding", "embedding", "vector")],
    "entities": [("id", "id", "int8"), ("name", "name", "text"), ("entity_type", "entity_type", "text"),
                 ("position", "@x,y,z", "point"), ("spread", "spread", "float8"),
                 ("first_seen", "first_seen", "float8"), ("last_seen", "last_seen", "float8"),
                 ("sightings", "sightings", "int4"), ("confidence", "confidence", "float8"),
                 ("layer", "layer", "text"), ("metadata", "metadata", "text"), ("embedding", "embedding", "vector")],
    "experiences": [("n", "n", "int8"), ("id", "id", "text"), ("goal", "goal", "text"), ("action", "action", "text"),
                    ("result", "result", "text"), ("reflection", "reflection", "text"),
                    ("success", "success", "int4"), ("tags", "tags", "jsonb"), ("metadata", "metadata", "text"),
                    ("stamp", "stamp", "float8"), ("episode_id", "episode_id", "int8"),
                    ("position", "@x,y,z", "point"), ("supersedes", "supersedes", "text"),
                    ("embedding", "embedding", "vector")],
}
ROW_DEFAULTS: dict[str, dict[str, Any]] = {
    "episodes": {"summary": "", "consolidated": 0},
    "gists": {"radius": 0.0, "layers": "[]"},
    "entities": {"spread": 0.0, "sightings": 1, "confidence": 1.0, "layer": "default"},
    "experiences": {"action": "", "result": "", "reflection": "", "tags": "[]"},
}
EXPERIENCE_COLUMNS = ("n", "id", "goal", "action", "result", "reflection", "success", "tags", "metadata", "stamp",
                      "episode_id", "x", "y", "z", "supersedes", "embedding")
"""What ``experience_rows`` must return, in this order, for each id (read from the robot's file)."""


_NEWER = "(EXCLUDED.last_stamp, EXCLUDED.last_obs_id) >= ({t}.last_stamp, {t}.last_obs_id)"
"""The batch holds a newer sighting than the row (ties broken by id, as ``SUMMARY_BACKFILL`` does)."""
SUMMARY_UPSERT = (
    "new AS (SELECT * FROM ins WHERE text_id IS NOT NULL AND source_type <> 'interoception'), "
    "sighted AS (INSERT INTO fleet.sightings AS s(text_id, robot_id, layer, count, first_stamp, last_stamp, "
    "last_obs_id, last_position, last_episode) SELECT text_id, robot_id, layer, count(*), min(stamp), max(stamp), "
    "(array_agg(id ORDER BY stamp DESC, id DESC))[1], (array_agg(position ORDER BY stamp DESC, id DESC))[1], "
    "(array_agg(episode_id ORDER BY stamp DESC, id DESC))[1] FROM new GROUP BY text_id, robot_id, layer "
    "ON CONFLICT (text_id, robot_id, layer) DO UPDATE SET count = s.count + EXCLUDED.count, "
    "first_stamp = LEAST(s.first_stamp, EXCLUDED.first_stamp), "
    + ", ".join(f"{c} = CASE WHEN {_NEWER.format(t='s')} THEN EXCLUDED.{c} ELSE s.{c} END"
                for c in ("last_obs_id", "last_position", "last_episode"))
    + ", last_stamp = GREATEST(s.last_stamp, EXCLUDED.last_stamp)), "
    "placed AS (INSERT INTO fleet.places AS p(text_id, robot_id, layer, cx, cy, count, sx, sy, sz, first_stamp, "
    "last_stamp, last_obs_id) SELECT text_id, robot_id, layer, floor(ST_X(position) / %s)::int, "
    "floor(ST_Y(position) / %s)::int, count(*), sum(ST_X(position)), sum(ST_Y(position)), "
    "sum(COALESCE(ST_Z(position), 0)), min(stamp), max(stamp), (array_agg(id ORDER BY stamp DESC, id DESC))[1] "
    "FROM new WHERE position IS NOT NULL GROUP BY 1, 2, 3, 4, 5 "
    "ON CONFLICT (text_id, robot_id, layer, cx, cy) DO UPDATE SET count = p.count + EXCLUDED.count, "
    "sx = p.sx + EXCLUDED.sx, sy = p.sy + EXCLUDED.sy, sz = p.sz + EXCLUDED.sz, "
    "first_stamp = LEAST(p.first_stamp, EXCLUDED.first_stamp), "
    f"last_obs_id = CASE WHEN {_NEWER.format(t='p')} THEN EXCLUDED.last_obs_id ELSE p.last_obs_id END, "
    "last_stamp = GREATEST(p.last_stamp, EXCLUDED.last_stamp))"
)
"""The summaries (schema v4) take the observations this statement added (not re-sent ones: ON CONFLICT DO
NOTHING returns only new rows),
in the same statement and so the same transaction: a summary never counts a row the store lacks."""


@dataclass
class SnapshotKeys:
    """The keys of every row a snapshot (a base copy of the robot's memory) holds: what the fleet may keep."""

    observations: list[int]
    texts: list[int]
    episodes: list[int]
    gists: list[int]
    entities: list[int]
    experiences: list[str]
    edges: list[tuple[str, str, str]]


@dataclass
class WriteCounts:
    """Rows the fleet store took (new rows; re-sent ones are not counted)."""

    observations: int = 0
    texts: int = 0
    rows: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    updates: int = 0

    def as_dict(self) -> dict[str, int]:
        out = {"observations": self.observations, "texts": self.texts, "updates": self.updates}
        out.update(self.rows)
        return out


class VectorCodec:
    """Robot embedding BLOBs (float32, little-endian) -> pgvector's binary wire format."""

    def __init__(self, conn: Any, dim: int) -> None:
        from psycopg.adapt import Dumper
        from psycopg.pq import Format
        from psycopg.types import TypeInfo

        info = TypeInfo.fetch(conn, "vector")
        if info is None:
            raise FleetError("the database has no pgvector type `vector`; run `emem fleet init URL` first")
        info.register(conn)

        class _VectorDumper(Dumper):
            format = Format.BINARY
            oid = info.oid

            def dump(self, obj: Any) -> bytes:
                return bytes(obj)

        conn.adapters.register_dumper(PgVector, _VectorDumper)
        self.dim = dim
        self._head = struct.pack(">HH", dim, 0)

    def __call__(self, blob: Optional[bytes]) -> Optional["PgVector"]:
        if blob is None:
            return None
        if len(blob) != 4 * self.dim:
            raise FleetError(f"an embedding of {len(blob) // 4} values where the fleet store holds {self.dim}")
        return PgVector(self._head + np.frombuffer(blob, dtype="<f4").astype(">f4").tobytes())


class PgVector(bytes):
    """A vector already in pgvector's binary format (so psycopg sends it as ``vector``)."""


class FleetWriter:
    """One robot's operations -> the fleet tables; call ``flush()`` before the transaction commits."""

    def __init__(self, conn: Any, state: TranslatorState, transform: RigidTransform, info: FleetInfo,
                 vectors: VectorCodec, experience_rows: Callable[[list[str]], list[Sequence[Any]]],
                 upsert: bool = False) -> None:
        self.conn = conn
        self.state = state
        self.robot_id = state.robot_id
        self.transform = transform
        self.info = info
        self.vectors = vectors
        self.experience_rows = experience_rows
        self.upsert = upsert
        """Snapshot mode: rows that exist are overwritten with the snapshot's (a base may be newer)."""
        self.counts = WriteCounts()
        self._buffers: dict[str, list[InsertRows]] = defaultdict(list)
        self._edge_mode = ""
        self._partitions: set[int] = set()
        self._staging_ready = False

    # -- operations -------------------------------------------------------
    def apply(self, operations: Sequence[Any]) -> None:
        for op in operations:
            if type(op) is InsertRows:
                if op.table == "edges" and self._buffers["edges"] and op.edge_mode != self._edge_mode:
                    self.flush()
                if op.table == "edges":
                    self._edge_mode = op.edge_mode
                self._buffers[op.table].append(op)
            elif type(op) is UpdateSQL:
                self.flush()
                with self.conn.cursor() as cur:
                    cur.executemany(op.sql, op.params)
                self.counts.updates += len(op.params)
            elif type(op) is TextEmbedding:
                self.flush()
                self._text_embeddings(op)
            elif type(op) is ExperiencesByID:
                self.flush()
                rows = self.experience_rows(op.ids)
                self._write_rows("experiences", EXPERIENCE_COLUMNS, rows)
            else:  # pragma: no cover - the translator makes only these
                raise FleetError(f"unknown fleet operation {type(op).__name__}")

    def flush(self) -> None:
        for table in FLUSH_ORDER:
            ops = self._buffers.pop(table, None)
            if not ops:
                continue
            if table == "texts":
                self._texts(ops)
            elif table == "observations":
                self._observations(ops)
            elif table == "edges":
                self._edges(ops)
            else:
                for op in ops:
                    self._write_rows(table, op.columns, op.rows)

    # -- positions --------------------------------------------------------
    def place(self, x: Any, y: Any, z: Any) -> tuple[Any, ...]:
        if x is None or y is None:
            return None, None, None
        fx, fy = self.transform.apply(float(x), float(y))
        return fx, fy, 0.0 if z is None else float(z)

    # -- texts ------------------------------------------------------------
    def _stage(self) -> None:
        if self._staging_ready:
            return
        self.conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS emem_text_stage(local_id int8, digest bytea, text text, "
            f"embedding vector({self.info.dim})) ON COMMIT DELETE ROWS")
        columns = ", ".join(f"{name} {kind}" for name, kind in zip(OBSERVATION_STAGE, OBSERVATION_TYPES, strict=True))
        self.conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS emem_obs_stage({columns}) ON COMMIT DELETE ROWS")
        self._staging_ready = True

    def _texts(self, ops: list[InsertRows]) -> None:
        self._stage()
        vector = self.vectors
        with self.conn.cursor() as cur:
            cur.execute("TRUNCATE emem_text_stage")
            with cur.copy("COPY emem_text_stage FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "bytea", "text", "vector"])
                for op in ops:
                    text_at, blob_at, id_at = (op.columns.index(c) for c in ("text", "embedding", "id"))
                    for row in op.rows:
                        text = row[text_at]
                        copy.write_row((row[id_at], hashlib.sha256(text.encode("utf-8")).digest(), text,
                                        vector(row[blob_at])))
            cur.execute("INSERT INTO fleet.texts(digest, text, embedding) SELECT DISTINCT ON (digest) digest, "
                        "text, embedding FROM emem_text_stage ORDER BY digest, embedding IS NULL "
                        "ON CONFLICT (digest) DO NOTHING")
            self.counts.texts += max(cur.rowcount, 0)
            cur.execute("UPDATE fleet.texts t SET embedding = s.embedding FROM emem_text_stage s "
                        "WHERE t.digest = s.digest AND t.embedding IS NULL AND s.embedding IS NOT NULL")
            cur.execute("INSERT INTO fleet.robot_texts(robot_id, local_id, text_id) SELECT %s, s.local_id, t.id "
                        "FROM emem_text_stage s JOIN fleet.texts t ON t.digest = s.digest "
                        "ON CONFLICT (robot_id, local_id) DO UPDATE SET text_id = EXCLUDED.text_id",
                        (self.robot_id,))

    def _text_embeddings(self, op: TextEmbedding) -> None:
        missing = " AND t.embedding IS NULL" if op.only_if_missing else ""
        with self.conn.cursor() as cur:
            cur.executemany(
                "UPDATE fleet.texts t SET embedding = %s FROM fleet.robot_texts m WHERE m.robot_id = %s "
                f"AND m.local_id = %s AND t.id = m.text_id{missing}",
                [(self.vectors(blob), self.robot_id, text_id) for blob, text_id in op.pairs])
        self.counts.updates += len(op.pairs)

    # -- observations -----------------------------------------------------
    def _observations(self, ops: list[InsertRows]) -> None:
        self._stage()
        stamps: list[float] = []
        place = self.place
        with self.conn.cursor() as cur:
            cur.execute("TRUNCATE emem_obs_stage")
            with cur.copy("COPY emem_obs_stage FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(list(OBSERVATION_TYPES))
                for op in ops:
                    at = {name: i for i, name in enumerate(op.columns)}
                    getters = [_getter(at, name, OBSERVATION_DEFAULTS.get(name)) for name in OBSERVATION_STAGE]
                    stamp_at, z_at = at["stamp"], at.get("z")
                    xy = (at["x"], at["y"]) if "x" in at and "y" in at else None
                    write = copy.write_row
                    for row in op.rows:
                        values = [get(row) for get in getters]
                        if xy is not None:
                            values[5], values[6], values[7] = place(row[xy[0]], row[xy[1]],
                                                                    row[z_at] if z_at is not None else None)
                        stamps.append(row[stamp_at])
                        write(values)
            self._partition_for(stamps)
            cur.execute(
                "SELECT count(*) FROM emem_obs_stage s WHERE s.text_id IS NOT NULL AND NOT EXISTS "
                "(SELECT 1 FROM fleet.robot_texts m WHERE m.robot_id = %s AND m.local_id = s.text_id)",
                (self.robot_id,))
            unmapped = cur.fetchone()[0]
            if unmapped:
                raise FleetError(f"{unmapped} observation(s) of robot {self.robot_id} name texts the fleet never "
                                 "received: the log does not hold this memory's whole history")
            if self.upsert:  # a snapshot may be newer than the rows the store has: they take its values
                cur.execute(
                    "UPDATE fleet.observations o SET tier = s.tier, tier_since = s.tier_since, gist_id = s.gist_id, "
                    "text_id = COALESCE(m.text_id, o.text_id), metadata = COALESCE(s.metadata, o.metadata) "
                    "FROM emem_obs_stage s LEFT JOIN fleet.robot_texts m ON m.robot_id = %s AND "
                    "m.local_id = s.text_id WHERE o.robot_id = %s AND o.id = s.id AND o.stamp = s.stamp",
                    (self.robot_id, self.robot_id))
            cur.execute(
                "WITH ins AS (INSERT INTO fleet.observations(robot_id, id, text_id, stamp, layer, source_type, "
                "position, frame_id, confidence, episode_id, gist_id, tier, tier_since, value, metadata) "
                "SELECT %s, s.id, m.text_id, s.stamp, s.layer, s.source_type, ST_MakePoint(s.x, s.y, s.z), "
                "s.frame_id, s.confidence, s.episode_id, s.gist_id, s.tier, s.tier_since, s.value, s.metadata "
                "FROM emem_obs_stage s LEFT JOIN fleet.robot_texts m ON m.robot_id = %s AND m.local_id = s.text_id "
                "ON CONFLICT (robot_id, id, stamp) DO NOTHING "
                "RETURNING robot_id, id, text_id, stamp, layer, source_type, position, episode_id), "
                + SUMMARY_UPSERT +
                " SELECT count(*) FROM ins", (self.robot_id, self.robot_id, self.info.place_cell,
                                             self.info.place_cell))
            self.counts.observations += int(cur.fetchone()[0])

    def _partition_for(self, stamps: list[float]) -> None:
        seconds = self.info.partition_seconds
        buckets = {math.floor(s / seconds) for s in stamps} if stamps else set()
        if buckets - self._partitions:
            ensure_partitions(self.conn, [b * seconds for b in buckets - self._partitions], seconds,
                              self._partitions)

    # -- episodes, gists, entities, experiences -----------------------------
    def _write_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        spec = ROW_TABLES[table]
        at = {name: i for i, name in enumerate(columns)}
        defaults = ROW_DEFAULTS.get(table, {})
        values: list[tuple[Any, ...]] = []
        for row in rows:
            out: list[Any] = []
            for _fleet, source, kind in spec:
                if kind == "point":
                    names = source[1:].split(",")
                    x, y, z = (row[at[n]] if n in at else None for n in names)
                    out.extend(self.place(x, y, z))
                elif kind == "vector":
                    out.append(self.vectors(row[at[source]]) if source in at else None)
                else:
                    value = row[at[source]] if source in at else defaults.get(source)
                    out.append(defaults.get(source) if value is None and source in defaults else value)
            values.append(tuple(out))
        names = []
        placeholders = []
        for fleet_name, _source, kind in spec:
            names.append(f'"{fleet_name}"')
            if kind == "point":
                placeholders.append("ST_MakePoint(%s::float8, %s::float8, %s::float8)")
            elif kind == "jsonb":
                placeholders.append("%s::jsonb")
            else:
                placeholders.append("%s")
        key = "(robot_id, id)"
        if self.upsert:
            updates = ", ".join(f"{n} = EXCLUDED.{n}" for n in names if n not in ('"id"', '"n"'))
            conflict = f"ON CONFLICT {key} DO UPDATE SET {updates}"
        else:
            conflict = f"ON CONFLICT {key} DO NOTHING"
        sql = (f"INSERT INTO fleet.{table}(robot_id, {', '.join(names)}) VALUES (%s, {', '.join(placeholders)}) "
               f"{conflict}")
        with self.conn.cursor() as cur:
            cur.executemany(sql, [(self.robot_id, *v) for v in values])
        self.counts.rows[table] += len(values)

    # -- a snapshot's deletions (a forget restarted the robot's log) -------
    def remove_missing(self, keys: "SnapshotKeys") -> dict[str, int]:
        """Delete this robot's rows the snapshot lacks, by their keys (ids, never content): what a forget or
        retention erased on the robot while the fleet was behind. Texts go when no row of any robot points
        at them any more (the fleet keeps the text of observations a robot archived: those still point);
        the summaries of the touched texts are computed again. Returns rows removed per table."""
        self.flush()
        removed: dict[str, int] = {}
        robot = self.robot_id
        with self.conn.cursor() as cur:
            cur.execute("CREATE TEMP TABLE IF NOT EXISTS emem_keep_ids(id int8) ON COMMIT DELETE ROWS")
            cur.execute("CREATE TEMP TABLE IF NOT EXISTS emem_keep_edges(kind text, src text, dst text) "
                        "ON COMMIT DELETE ROWS")
            self._keep(cur, keys.observations)
            cur.execute("ANALYZE emem_keep_ids")
            gone = cur.execute(
                "WITH gone AS (DELETE FROM fleet.observations o WHERE o.robot_id = %s AND NOT EXISTS "
                "(SELECT 1 FROM emem_keep_ids k WHERE k.id = o.id) RETURNING o.text_id) "
                "SELECT text_id, count(*) FROM gone GROUP BY text_id", (robot,)).fetchall()
            touched = {int(t) for t, _ in gone if t is not None}
            removed["observations"] = sum(int(n) for _, n in gone)
            self._keep(cur, keys.texts)
            unmapped = [int(r[0]) for r in cur.execute(
                "DELETE FROM fleet.robot_texts m WHERE m.robot_id = %s AND NOT EXISTS "
                "(SELECT 1 FROM emem_keep_ids k WHERE k.id = m.local_id) AND NOT EXISTS "
                "(SELECT 1 FROM fleet.observations o WHERE o.robot_id = m.robot_id AND o.text_id = m.text_id) "
                "RETURNING m.text_id", (robot,)).fetchall()]
            removed["robot_texts"] = len(unmapped)
            touched |= set(unmapped)
            removed["texts"] = cur.execute(
                "DELETE FROM fleet.texts t WHERE t.id = ANY(%s) AND NOT EXISTS "
                "(SELECT 1 FROM fleet.robot_texts m WHERE m.text_id = t.id) AND NOT EXISTS "
                "(SELECT 1 FROM fleet.observations o WHERE o.text_id = t.id)", (sorted(unmapped),)).rowcount
            for table, ids in (("episodes", keys.episodes), ("gists", keys.gists), ("entities", keys.entities)):
                removed[table] = cur.execute(f"DELETE FROM fleet.{table} WHERE robot_id = %s AND NOT (id = ANY(%s))",
                                             (robot, list(ids))).rowcount
            removed["experiences"] = cur.execute(
                "DELETE FROM fleet.experiences WHERE robot_id = %s AND NOT (id = ANY(%s))",
                (robot, list(keys.experiences))).rowcount
            cur.execute("TRUNCATE emem_keep_edges")
            with cur.copy("COPY emem_keep_edges FROM STDIN") as copy:
                for edge in keys.edges:
                    copy.write_row(edge)
            removed["edges"] = cur.execute(
                "DELETE FROM fleet.edges e WHERE e.robot_id = %s AND NOT EXISTS (SELECT 1 FROM emem_keep_edges k "
                "WHERE k.kind = e.kind AND k.src = e.src AND k.dst = e.dst)", (robot,)).rowcount
        if touched:
            rebuild_summaries(self.conn, robot, touched, self.info.place_cell)
        return {name: n for name, n in removed.items() if n}

    def _keep(self, cur: Any, ids: Iterable[int]) -> None:
        cur.execute("TRUNCATE emem_keep_ids")
        with cur.copy("COPY emem_keep_ids FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8"])
            for i in ids:
                copy.write_row((i,))

    # -- edges ------------------------------------------------------------
    def _edges(self, ops: list[InsertRows]) -> None:
        mode = ops[0].edge_mode
        merged: dict[tuple[Any, ...], list[Any]] = {}
        for op in ops:
            at = {name: i for i, name in enumerate(op.columns)}
            for row in op.rows:
                key = (row[at["kind"]], row[at["src"]], row[at["dst"]])
                weight = row[at["weight"]] if "weight" in at else 1.0
                updated = row[at["updated"]]
                have = merged.get(key)
                if have is None:
                    merged[key] = [weight, updated]
                elif mode == "add":
                    have[0] += weight
                    have[1] = updated
                elif mode == "max":
                    have[0], have[1] = max(have[0], weight), max(have[1], updated)
                else:
                    have[0], have[1] = weight, updated
        if mode == "add":
            conflict = "DO UPDATE SET weight = edges.weight + EXCLUDED.weight, updated = EXCLUDED.updated"
        elif mode == "max":
            conflict = ("DO UPDATE SET weight = GREATEST(edges.weight, EXCLUDED.weight), "
                        "updated = GREATEST(edges.updated, EXCLUDED.updated)")
        elif self.upsert:
            conflict = "DO UPDATE SET weight = EXCLUDED.weight, updated = EXCLUDED.updated"
        else:
            conflict = "DO NOTHING"
        with self.conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO fleet.edges(robot_id, kind, src, dst, weight, updated) VALUES (%s, %s, %s, %s, %s, %s) "
                f"ON CONFLICT (robot_id, kind, src, dst) {conflict}",
                [(self.robot_id, *key, weight, updated) for key, (weight, updated) in merged.items()])
        self.counts.rows["edges"] += len(merged)


def _getter(at: dict[str, int], name: str, default: Any) -> Callable[[Sequence[Any]], Any]:
    index = at.get(name)
    if index is None:
        return lambda row: default
    if default is None:
        return lambda row: row[index]
    return lambda row: default if row[index] is None else row[index]


__all__ = ["FleetWriter", "VectorCodec", "WriteCounts", "EXPERIENCE_COLUMNS", "AUTOINCREMENT_TABLES"]
