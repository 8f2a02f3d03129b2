"""The fleet store's schema in PostgreSQL (schema ``fleet``), created by ``emem fleet init URL``.

PostgreSQL does what it is good at: PostGIS ``geometry(PointZ)`` with GiST
for places, pgvector ``vector(d)`` with HNSW (cosine) for meaning, a
generated ``tsvector`` with GIN for words, B-trees on the time columns, and
the observations table partitioned by time (declarative range partitions of
``partition_seconds``, created on demand) so old partitions can be detached
for retention.

Texts are interned fleet-wide by content (``digest`` = SHA-256 of the text),
as on the robot: an observation points at its text, which holds the one
embedding of that string, so "chair" seen by ten robots a thousand times is
one vector. ``robot_texts`` maps each robot's own text ids onto them.
Every other row is keyed by (robot_id, the robot's own id): re-sending what
was already applied changes nothing.

Positions are in the fleet frame (each robot's transform applied at sync
time, see ``transform``); SRID 0: a local metric frame, not the globe.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Iterable, Optional

from emem_ros.fleet.errors import FleetError, FleetSchemaError

SCHEMA = "fleet"
SCHEMA_VERSION = 4
BODY_INDEX = ("CREATE INDEX IF NOT EXISTS observations_body ON fleet.observations(robot_id, layer, stamp)"
              " WHERE source_type = 'interoception'")
PLACE_CELL = 0.5
"""Metres: the grid of ``fleet.places`` in the fleet frame (the robot's own place grid)."""
SUMMARY_DDL = """
CREATE TABLE fleet.sightings(
    text_id bigint NOT NULL,
    robot_id text NOT NULL REFERENCES fleet.robots ON DELETE CASCADE,
    layer text NOT NULL,
    count bigint NOT NULL,
    first_stamp double precision NOT NULL,
    last_stamp double precision NOT NULL,
    last_obs_id bigint NOT NULL,
    last_position geometry(PointZ),
    last_episode bigint,
    PRIMARY KEY (text_id, robot_id, layer)
);
CREATE TABLE fleet.places(
    text_id bigint NOT NULL,
    robot_id text NOT NULL REFERENCES fleet.robots ON DELETE CASCADE,
    layer text NOT NULL,
    cx integer NOT NULL,
    cy integer NOT NULL,
    count bigint NOT NULL,
    sx double precision NOT NULL,
    sy double precision NOT NULL,
    sz double precision NOT NULL,
    first_stamp double precision NOT NULL,
    last_stamp double precision NOT NULL,
    last_obs_id bigint NOT NULL,
    PRIMARY KEY (text_id, robot_id, layer, cx, cy)
)
"""
"""v4: per robot, text and layer, what the tools ask of every text (``sightings``: how often, first, last,
the newest sighting's place) and where it was seen (``places``: counts and coordinate sums per
``PLACE_CELL`` grid cell, in the fleet frame), kept by the sync in the transaction that adds the
observations. Perception only (no body readings), every tier (the fleet keeps archived text)."""
SUMMARY_BACKFILL = (
    "INSERT INTO fleet.sightings(text_id, robot_id, layer, count, first_stamp, last_stamp, last_obs_id, "
    "last_position, last_episode) SELECT text_id, robot_id, layer, count(*), min(stamp), max(stamp), "
    "(array_agg(id ORDER BY stamp DESC, id DESC))[1], (array_agg(position ORDER BY stamp DESC, id DESC))[1], "
    "(array_agg(episode_id ORDER BY stamp DESC, id DESC))[1] FROM fleet.observations "
    "WHERE text_id IS NOT NULL AND source_type <> 'interoception' {where}GROUP BY text_id, robot_id, layer",
    "INSERT INTO fleet.places(text_id, robot_id, layer, cx, cy, count, sx, sy, sz, first_stamp, last_stamp, "
    "last_obs_id) SELECT text_id, robot_id, layer, floor(ST_X(position) / {cell})::int, "
    "floor(ST_Y(position) / {cell})::int, count(*), sum(ST_X(position)), sum(ST_Y(position)), "
    "sum(COALESCE(ST_Z(position), 0)), min(stamp), max(stamp), (array_agg(id ORDER BY stamp DESC, id DESC))[1] "
    "FROM fleet.observations WHERE text_id IS NOT NULL AND source_type <> 'interoception' "
    "AND position IS NOT NULL {where}GROUP BY 1, 2, 3, 4, 5",
)
"""The summary rows computed from the observations (an upgrade; a forget's correction with ``where``)."""
UPGRADES: dict[int, tuple[str, ...]] = {
    2: ("CREATE INDEX IF NOT EXISTS observations_robot_text ON fleet.observations(robot_id, text_id, stamp)",),
    3: (BODY_INDEX,),
    4: (*SUMMARY_DDL.strip().split(";"),
        *(sql.format(where="", cell=repr(PLACE_CELL)) for sql in SUMMARY_BACKFILL),
        f"INSERT INTO fleet.meta(key, value) VALUES ('place_cell', '{PLACE_CELL!r}') ON CONFLICT DO NOTHING"),
}
"""Statements taking a store from the version before to this one (``emem fleet init`` runs them).
v2: the fleet tools read a robot's newest sightings of a text (``robots`` filter, per-robot hits).
v3: body_status and get_current_context walk one robot's body readings of a layer by time (a partial
index: body readings only).
v4: the summary tables ``sightings`` and ``places`` (filled from the observations on upgrade)."""
DEFAULT_DIM = 384
DEFAULT_PARTITION_DAYS = 7.0
EXTENSION_HINTS = {
    "vector": ("pgvector is missing: install it into this PostgreSQL with "
               "`bash ../shared/vendor/install-pgvector.sh` (as root; pgvector is not a Debian 12 package), "
               "or enable the `vector` extension on a managed PostgreSQL"),
    "postgis": ("PostGIS is missing: install the Debian package postgresql-15-postgis-3 "
                "(apt-get install postgresql-15-postgis-3), or enable `postgis` on a managed PostgreSQL"),
}

DDL = """
CREATE SCHEMA fleet;

CREATE TABLE fleet.meta(key text PRIMARY KEY, value text NOT NULL);

CREATE TABLE fleet.robots(
    robot_id text PRIMARY KEY CHECK (robot_id ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
    tx double precision NOT NULL DEFAULT 0,
    ty double precision NOT NULL DEFAULT 0,
    yaw double precision NOT NULL DEFAULT 0,
    added_at timestamptz NOT NULL DEFAULT now(),
    applied_seq bigint NOT NULL DEFAULT 0,
    applied_crc bigint,
    last_ids jsonb NOT NULL DEFAULT '{}',
    synced_at timestamptz,
    model text
);

CREATE TABLE fleet.texts(
    id bigserial PRIMARY KEY,
    digest bytea NOT NULL UNIQUE,
    text text NOT NULL,
    embedding vector({dim}),
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX texts_embedding ON fleet.texts USING hnsw (embedding vector_cosine_ops);
CREATE INDEX texts_tsv ON fleet.texts USING gin (tsv);

CREATE TABLE fleet.robot_texts(
    robot_id text NOT NULL REFERENCES fleet.robots ON DELETE CASCADE,
    local_id bigint NOT NULL,
    text_id bigint NOT NULL REFERENCES fleet.texts,
    PRIMARY KEY (robot_id, local_id)
);
CREATE INDEX robot_texts_text ON fleet.robot_texts(text_id);

CREATE TABLE fleet.observations(
    robot_id text NOT NULL,
    id bigint NOT NULL,
    text_id bigint,
    stamp double precision NOT NULL,
    layer text NOT NULL,
    source_type text NOT NULL,
    position geometry(PointZ),
    frame_id text,
    confidence double precision NOT NULL DEFAULT 1,
    episode_id bigint,
    gist_id bigint,
    tier text NOT NULL DEFAULT 'short_term',
    tier_since double precision,
    value double precision,
    metadata text,
    PRIMARY KEY (robot_id, id, stamp)
) PARTITION BY RANGE (stamp);
CREATE INDEX observations_stamp ON fleet.observations(stamp);
CREATE INDEX observations_text ON fleet.observations(text_id, stamp);
CREATE INDEX observations_robot_text ON fleet.observations(robot_id, text_id, stamp);
CREATE INDEX observations_body ON fleet.observations(robot_id, layer, stamp) WHERE source_type = 'interoception';
CREATE INDEX observations_position ON fleet.observations USING gist (position);

{summary};

CREATE TABLE fleet.episodes(
    robot_id text NOT NULL REFERENCES fleet.robots ON DELETE CASCADE,
    id bigint NOT NULL,
    name text NOT NULL,
    start double precision NOT NULL,
    "end" double precision,
    status text NOT NULL,
    parent_id bigint,
    previous_id bigint,
    summary text NOT NULL DEFAULT '',
    goal text, action text, result text, reflection text,
    success integer,
    consolidated integer NOT NULL DEFAULT 0,
    metadata text,
    embedding vector({dim}),
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', name || ' ' || coalesce(goal, '') || ' ' || summary))
        STORED,
    PRIMARY KEY (robot_id, id)
);
CREATE INDEX episodes_start ON fleet.episodes(start);
CREATE INDEX episodes_embedding ON fleet.episodes USING hnsw (embedding vector_cosine_ops);
CREATE INDEX episodes_tsv ON fleet.episodes USING gin (tsv);

CREATE TABLE fleet.gists(
    robot_id text NOT NULL REFERENCES fleet.robots ON DELETE CASCADE,
    id bigint NOT NULL,
    text text NOT NULL,
    center geometry(PointZ),
    radius double precision NOT NULL DEFAULT 0,
    time_start double precision NOT NULL,
    time_end double precision NOT NULL,
    source_count integer NOT NULL,
    layers jsonb NOT NULL DEFAULT '[]',
    episode_id bigint,
    created_at double precision NOT NULL,
    metadata text,
    embedding vector({dim}),
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    PRIMARY KEY (robot_id, id)
);
CREATE INDEX gists_time ON fleet.gists(time_end, time_start);
CREATE INDEX gists_center ON fleet.gists USING gist (center);
CREATE INDEX gists_embedding ON fleet.gists USING hnsw (embedding vector_cosine_ops);
CREATE INDEX gists_tsv ON fleet.gists USING gin (tsv);

CREATE TABLE fleet.entities(
    robot_id text NOT NULL REFERENCES fleet.robots ON DELETE CASCADE,
    id bigint NOT NULL,
    name text NOT NULL,
    entity_type text,
    position geometry(PointZ),
    spread double precision NOT NULL DEFAULT 0,
    first_seen double precision NOT NULL,
    last_seen double precision NOT NULL,
    sightings integer NOT NULL DEFAULT 1,
    confidence double precision NOT NULL DEFAULT 1,
    layer text NOT NULL DEFAULT 'default',
    metadata text,
    embedding vector({dim}),
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', name || ' ' || coalesce(entity_type, ''))) STORED,
    PRIMARY KEY (robot_id, id)
);
CREATE INDEX entities_last_seen ON fleet.entities(last_seen);
CREATE INDEX entities_position ON fleet.entities USING gist (position);
CREATE INDEX entities_embedding ON fleet.entities USING hnsw (embedding vector_cosine_ops);
CREATE INDEX entities_tsv ON fleet.entities USING gin (tsv);

CREATE TABLE fleet.edges(
    robot_id text NOT NULL REFERENCES fleet.robots ON DELETE CASCADE,
    kind text NOT NULL,
    src text NOT NULL,
    dst text NOT NULL,
    weight double precision NOT NULL DEFAULT 1,
    updated double precision NOT NULL,
    PRIMARY KEY (robot_id, kind, src, dst)
);
CREATE INDEX edges_dst ON fleet.edges(robot_id, kind, dst);

CREATE TABLE fleet.experiences(
    robot_id text NOT NULL REFERENCES fleet.robots ON DELETE CASCADE,
    id text NOT NULL,
    n bigint NOT NULL,
    goal text NOT NULL,
    action text NOT NULL DEFAULT '',
    result text NOT NULL DEFAULT '',
    reflection text NOT NULL DEFAULT '',
    success integer,
    tags jsonb NOT NULL DEFAULT '[]',
    metadata text,
    stamp double precision NOT NULL,
    episode_id bigint,
    position geometry(PointZ),
    supersedes text,
    embedding vector({dim}),
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english',
        goal || ' ' || action || ' ' || result || ' ' || reflection)) STORED,
    PRIMARY KEY (robot_id, id)
);
CREATE UNIQUE INDEX experiences_n ON fleet.experiences(robot_id, n);
CREATE INDEX experiences_stamp ON fleet.experiences(stamp);
CREATE INDEX experiences_embedding ON fleet.experiences USING hnsw (embedding vector_cosine_ops);
CREATE INDEX experiences_tsv ON fleet.experiences USING gin (tsv);
"""


def _statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


def check_extensions(conn: Any) -> None:
    """Raise FleetSchemaError naming the package (or script) for each extension PostgreSQL lacks."""
    available = {row[0] for row in conn.execute("SELECT name FROM pg_available_extensions")}
    missing = [name for name in ("vector", "postgis") if name not in available]
    if missing:
        raise FleetSchemaError("; ".join(EXTENSION_HINTS[name] for name in missing))


def read_meta(conn: Any) -> Optional[dict[str, str]]:
    """The fleet store's meta table, or None when this database holds no fleet store."""
    exists = conn.execute("SELECT to_regclass('fleet.meta') IS NOT NULL").fetchone()[0]
    if not exists:
        return None
    return dict(conn.execute("SELECT key, value FROM fleet.meta").fetchall())


def init_fleet(conn: Any, dim: int = DEFAULT_DIM, model: str = "",
               partition_days: float = DEFAULT_PARTITION_DAYS) -> bool:
    """Create the extensions and the schema in one transaction; False when it is already there.

    Refuses a database holding a fleet store of another version or vector size.
    """
    if not isinstance(dim, int) or not 1 <= dim <= 16000:
        raise FleetError(f"embedding dimension must be a whole number from 1 to 16000, got {dim!r}")
    if not (isinstance(partition_days, (int, float)) and math.isfinite(partition_days)
            and 1 / 24 <= partition_days <= 3660):
        raise FleetError(f"partition length must be from 1 hour to 10 years (in days), got {partition_days!r}")
    meta = read_meta(conn)
    if meta is not None:
        conn.rollback()
        version, have_dim = int(meta.get("schema_version", 0)), int(meta.get("embedding_dim", 0))
        if 1 <= version < SCHEMA_VERSION:
            upgrade(conn, version)
            version = SCHEMA_VERSION
        if version != SCHEMA_VERSION:
            raise FleetSchemaError(f"this database holds a fleet store of schema version {version}; "
                                   f"this emem_ros writes version {SCHEMA_VERSION}")
        if have_dim != dim:
            raise FleetSchemaError(f"this database already holds a fleet store of {have_dim}-dimensional "
                                   f"embeddings, not {dim}")
        return False
    check_extensions(conn)
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    except Exception as exc:
        conn.rollback()
        raise FleetSchemaError(f"cannot create the extensions vector and postgis ({_first_line(exc)}); "
                               "the role needs the right to CREATE EXTENSION (a superuser, or the database "
                               "owner where the extensions are trusted)") from exc
    for statement in _statements(DDL.replace("{dim}", str(dim)).replace("{summary}", SUMMARY_DDL.strip())):
        conn.execute(statement)
    conn.cursor().executemany("INSERT INTO fleet.meta(key, value) VALUES (%s, %s)", [
        ("schema_version", str(SCHEMA_VERSION)),
        ("embedding_dim", str(dim)),
        ("embedding_model", model),
        ("partition_seconds", repr(float(partition_days) * 86400.0)),
        ("place_cell", repr(PLACE_CELL)),
        ("created_at", datetime.now(timezone.utc).isoformat()),
    ])
    conn.commit()
    return True


def upgrade(conn: Any, version: int) -> None:
    """Bring a store of an older schema version up to this one, in one transaction.

    Syncs wait meanwhile (they lock their robot's row): the summaries are filled from a quiet store."""
    conn.execute("LOCK TABLE fleet.robots IN EXCLUSIVE MODE")
    for target in range(version + 1, SCHEMA_VERSION + 1):
        for statement in UPGRADES[target]:
            conn.execute(statement)
    conn.execute("UPDATE fleet.meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    conn.commit()


def rebuild_summaries(conn: Any, robot_id: str, text_ids: Optional[Iterable[int]] = None,
                      cell: float = PLACE_CELL) -> None:
    """Recompute a robot's summary rows (of ``text_ids``, else all) from its observations, in the caller's
    transaction: after its positions moved (a new transform) or its rows were deleted (a forget)."""
    where, params = "AND robot_id = %s ", list[Any]([robot_id])
    if text_ids is not None:
        where += "AND text_id = ANY(%s) "
        params.append(sorted(set(text_ids)))
    for table in ("sightings", "places"):
        conn.execute(f"DELETE FROM fleet.{table} WHERE true {where}", params)
    for sql in SUMMARY_BACKFILL:
        conn.execute(sql.format(where=where, cell=repr(float(cell))), params)


class FleetInfo:
    """What a connection needs to know about the store it writes to (read once per session)."""

    def __init__(self, meta: dict[str, str]) -> None:
        self.version = int(meta.get("schema_version", 0))
        self.dim = int(meta.get("embedding_dim", 0))
        self.model = meta.get("embedding_model", "")
        self.partition_seconds = float(meta.get("partition_seconds", DEFAULT_PARTITION_DAYS * 86400.0))
        self.place_cell = float(meta.get("place_cell", PLACE_CELL))


def open_fleet(conn: Any, url_for_messages: str) -> FleetInfo:
    """Check that ``conn`` holds a fleet store this code can write; its settings."""
    meta = read_meta(conn)
    conn.rollback()
    if meta is None:
        raise FleetSchemaError(f"no fleet store at {url_for_messages}: create it with `emem fleet init URL`")
    info = FleetInfo(meta)
    if info.version != SCHEMA_VERSION:
        older = 1 <= info.version < SCHEMA_VERSION
        raise FleetSchemaError(f"the fleet store at {url_for_messages} has schema version {info.version}; "
                               f"this emem_ros reads and writes version {SCHEMA_VERSION}"
                               + ("; upgrade it with `emem fleet init URL`" if older else ""))
    return info


# ---------------------------------------------------------------------------- partitions
def partition_name(bucket: int, seconds: float) -> str:
    start = datetime.fromtimestamp(bucket * seconds, tz=timezone.utc)
    suffix = start.strftime("%Y%m%d") if seconds % 86400 == 0 else start.strftime("%Y%m%d_%H%M%S")
    return f"observations_{suffix}"


def ensure_partitions(conn: Any, stamps: Iterable[float], seconds: float, known: set[int]) -> int:
    """Create the partitions the stamps fall into (under an advisory lock); returns how many were made.

    ``known`` caches buckets this process already saw (it is updated).
    """
    buckets = {math.floor(s / seconds) for s in stamps} - known
    if not buckets:
        return 0
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('emem.fleet.partitions'))")
    existing = {row[0] for row in conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'fleet.observations'::regclass")}
    made = 0
    for bucket in sorted(buckets):
        name = partition_name(bucket, seconds)
        if name not in existing:
            low, high = bucket * seconds, (bucket + 1) * seconds
            conn.execute(f"CREATE TABLE fleet.{name} PARTITION OF fleet.observations "
                         f"FOR VALUES FROM ({low!r}) TO ({high!r})")
            made += 1
        known.add(bucket)
    return made


def list_partitions(conn: Any) -> list[tuple[str, float, float]]:
    """(name, start stamp, end stamp) of every attached observations partition, oldest first."""
    rows = conn.execute(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'fleet.observations'::regclass").fetchall()
    out = []
    for name, bound in rows:
        # FOR VALUES FROM ('1741910400') TO ('1742515200')
        parts = bound.replace("'", "").replace("(", " ").replace(")", " ").split()
        out.append((name, float(parts[3]), float(parts[5])))
    return sorted(out, key=lambda item: item[1])


def detach_partitions(conn: Any, before: float, drop: bool = False) -> list[str]:
    """Detach (and with ``drop`` delete) every partition that ends at or before ``before``.

    The summaries then count only what stays attached: they are computed again, in the same transaction
    (syncs wait on their robots' rows meanwhile)."""
    done = []
    for name, _start, end in list_partitions(conn):
        if end <= before:
            conn.execute(f"ALTER TABLE fleet.observations DETACH PARTITION fleet.{name}")
            if drop:
                conn.execute(f"DROP TABLE fleet.{name}")
            done.append(name)
    if done:
        conn.execute("LOCK TABLE fleet.robots IN EXCLUSIVE MODE")
        row = conn.execute("SELECT value FROM fleet.meta WHERE key = 'place_cell'").fetchone()
        for table in ("sightings", "places"):
            conn.execute(f"DELETE FROM fleet.{table}")
        for sql in SUMMARY_BACKFILL:
            conn.execute(sql.format(where="", cell=repr(float(row[0]) if row else PLACE_CELL)))
    conn.commit()
    return done


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
