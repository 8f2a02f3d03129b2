"""Schema and migrations of the memory file.

Texts are interned: an observation points at a row of ``texts``, which holds
the one embedding of that string. ``places`` aggregates observations of one
text in one grid cell (count, first/last stamp); it feeds the R-tree.
Many-to-one edges are columns (observations.episode_id = BELONGS_TO,
observations.gist_id = SUMMARIZES, episodes.parent_id = SUBTASK_OF,
episodes.previous_id = FOLLOWS); many-to-many edges live in ``edges``.
"""

from __future__ import annotations

import logging
import sqlite3
import time

from emem_ros.core.errors import StoreError

log = logging.getLogger(__name__)

SCHEMA_V1 = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);

CREATE TABLE texts(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    text TEXT NOT NULL UNIQUE,
    embedding BLOB,
    refs INTEGER NOT NULL DEFAULT 0
);
CREATE VIRTUAL TABLE texts_fts USING fts5(text, content='texts', content_rowid='id',
    tokenize='porter unicode61');

CREATE TABLE episodes(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    start REAL NOT NULL,
    end REAL,
    status TEXT NOT NULL,
    parent_id INTEGER REFERENCES episodes(id),
    previous_id INTEGER REFERENCES episodes(id),
    summary TEXT NOT NULL DEFAULT '',
    goal TEXT, action TEXT, result TEXT, reflection TEXT,
    success INTEGER,
    consolidated INTEGER NOT NULL DEFAULT 0,
    metadata TEXT,
    embedding BLOB
);
CREATE INDEX episodes_start ON episodes(start);
CREATE INDEX episodes_name ON episodes(name, start);
CREATE INDEX episodes_parent ON episodes(parent_id);

CREATE TABLE observations(
    id INTEGER PRIMARY KEY,
    text_id INTEGER REFERENCES texts(id),
    stamp REAL NOT NULL,
    layer TEXT NOT NULL,
    source_type TEXT NOT NULL,
    x REAL, y REAL, z REAL,
    frame_id TEXT,
    confidence REAL NOT NULL DEFAULT 1.0,
    episode_id INTEGER REFERENCES episodes(id),
    gist_id INTEGER,
    tier TEXT NOT NULL DEFAULT 'short_term',
    tier_since REAL,
    value REAL,
    metadata TEXT
);
CREATE INDEX obs_stamp ON observations(stamp);
CREATE INDEX obs_layer_stamp ON observations(layer, stamp);
CREATE INDEX obs_text_stamp ON observations(text_id, stamp);
CREATE INDEX obs_episode ON observations(episode_id, stamp) WHERE episode_id IS NOT NULL;
CREATE INDEX obs_gist ON observations(gist_id) WHERE gist_id IS NOT NULL;
CREATE INDEX obs_long_term ON observations(tier_since) WHERE tier = 'long_term';

CREATE TABLE places(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    text_id INTEGER NOT NULL REFERENCES texts(id),
    layer TEXT NOT NULL,
    cx INTEGER NOT NULL, cy INTEGER NOT NULL, cz INTEGER NOT NULL,
    count INTEGER NOT NULL,
    sx REAL NOT NULL, sy REAL NOT NULL, sz REAL NOT NULL,
    first_stamp REAL NOT NULL,
    last_stamp REAL NOT NULL,
    last_obs_id INTEGER NOT NULL,
    UNIQUE(text_id, layer, cx, cy, cz)
);
CREATE INDEX places_text ON places(text_id);

CREATE TABLE gists(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    text TEXT NOT NULL,
    cx REAL, cy REAL, cz REAL,
    radius REAL NOT NULL DEFAULT 0,
    time_start REAL NOT NULL,
    time_end REAL NOT NULL,
    source_count INTEGER NOT NULL,
    layers TEXT NOT NULL DEFAULT '[]',
    episode_id INTEGER REFERENCES episodes(id),
    created_at REAL NOT NULL,
    metadata TEXT,
    embedding BLOB
);
CREATE INDEX gists_time ON gists(time_end, time_start);
CREATE INDEX gists_episode ON gists(episode_id) WHERE episode_id IS NOT NULL;
CREATE VIRTUAL TABLE gists_fts USING fts5(text, content='gists', content_rowid='id',
    tokenize='porter unicode61');

CREATE TABLE entities(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    entity_type TEXT,
    x REAL, y REAL, z REAL,
    spread REAL NOT NULL DEFAULT 0,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    sightings INTEGER NOT NULL DEFAULT 1,
    confidence REAL NOT NULL DEFAULT 1.0,
    layer TEXT NOT NULL DEFAULT 'default',
    metadata TEXT,
    embedding BLOB
);
CREATE INDEX entities_name ON entities(name);
CREATE INDEX entities_type ON entities(entity_type);
CREATE INDEX entities_last_seen ON entities(last_seen);

CREATE TABLE edges(
    kind TEXT NOT NULL,
    src TEXT NOT NULL,
    dst TEXT NOT NULL,
    weight REAL NOT NULL DEFAULT 1,
    updated REAL NOT NULL,
    PRIMARY KEY(kind, src, dst)
) WITHOUT ROWID;
CREATE INDEX edges_dst ON edges(kind, dst);
"""

# v2: the experience ledger. Records are immutable: SQLite itself refuses to
# change their content or delete them; only the derived embedding may be set.
SCHEMA_V2 = """
CREATE TABLE experiences(
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    goal TEXT NOT NULL,
    action TEXT NOT NULL DEFAULT '',
    result TEXT NOT NULL DEFAULT '',
    reflection TEXT NOT NULL DEFAULT '',
    success INTEGER,
    tags TEXT NOT NULL DEFAULT '[]',
    metadata TEXT,
    stamp REAL NOT NULL,
    episode_id INTEGER,
    x REAL, y REAL, z REAL,
    supersedes TEXT,
    embedding BLOB
);
CREATE INDEX experiences_stamp ON experiences(stamp);
CREATE INDEX experiences_episode ON experiences(episode_id) WHERE episode_id IS NOT NULL;
CREATE INDEX experiences_success ON experiences(success, stamp);
CREATE INDEX experiences_supersedes ON experiences(supersedes) WHERE supersedes IS NOT NULL;
CREATE VIRTUAL TABLE experiences_fts USING fts5(goal, action, result, reflection, tags,
    content='experiences', content_rowid='n', tokenize='porter unicode61');
CREATE TRIGGER experiences_immutable BEFORE UPDATE OF id, goal, action, result, reflection, success,
    tags, metadata, stamp, episode_id, x, y, z, supersedes ON experiences
BEGIN
    SELECT RAISE(ABORT, 'experience records are immutable; record a correction that supersedes it');
END;
CREATE TRIGGER experiences_append_only BEFORE DELETE ON experiences
BEGIN
    SELECT RAISE(ABORT, 'experience records are append-only and cannot be deleted');
END;
"""

# v3: the ids of texts that have a vector, without reading the vectors. The open reconciles the text
# index against this list; from the table itself it would read every 1.5 kB embedding (GBs at 1M texts).
SCHEMA_V3 = """
CREATE INDEX texts_with_vector ON texts(id) WHERE embedding IS NOT NULL;
"""

# v4: forgetting. ``forget_log`` is the audit trail of every forget and retention run (when, why, who,
# the selector with its free text withheld, counts, the ids removed: never content). ``redactions``
# names ledger experiences whose content was erased; the immutability triggers let exactly those rows
# be rewritten (to a redaction stub, id kept) and nothing else.
SCHEMA_V4 = """
CREATE TABLE forget_log(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    who TEXT NOT NULL,
    reason TEXT NOT NULL,
    kind TEXT NOT NULL,
    selector TEXT NOT NULL,
    counts TEXT NOT NULL,
    ids TEXT NOT NULL
);
CREATE TABLE redactions(
    experience_id TEXT PRIMARY KEY,
    at REAL NOT NULL,
    forget_id INTEGER
);
DROP TRIGGER experiences_immutable;
CREATE TRIGGER experiences_immutable BEFORE UPDATE OF id, goal, action, result, reflection, success,
    tags, metadata, stamp, episode_id, x, y, z, supersedes ON experiences
    WHEN NOT EXISTS (SELECT 1 FROM redactions WHERE experience_id = OLD.id) OR NEW.id != OLD.id
BEGIN
    SELECT RAISE(ABORT, 'experience records are immutable; record a correction that supersedes it');
END;
"""

# v5: MemFS, the filesystem planners write themselves (emem_ros/memfs). Nodes hold the current
# tree; blobs every content ever written (by SHA-256); chunks the current files' line ranges with
# their vectors; ops and versions the history (undo and restore add versions, never remove one).
SCHEMA_V5 = """
CREATE TABLE fs_blobs(
    hash TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    size INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE fs_nodes(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT NOT NULL UNIQUE,
    parent TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    blob TEXT,
    size INTEGER NOT NULL DEFAULT 0,
    lines INTEGER NOT NULL DEFAULT 0,
    perms TEXT NOT NULL,
    owner TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '[]',
    version INTEGER NOT NULL,
    created REAL NOT NULL,
    modified REAL NOT NULL,
    accessed REAL NOT NULL,
    x REAL, y REAL, z REAL,
    frame_id TEXT,
    entity_id TEXT,
    embedding BLOB
);
CREATE INDEX fs_nodes_parent ON fs_nodes(parent, name);
CREATE INDEX fs_nodes_place ON fs_nodes(x, y) WHERE x IS NOT NULL;
CREATE INDEX fs_nodes_entity ON fs_nodes(entity_id) WHERE entity_id IS NOT NULL;
CREATE VIRTUAL TABLE fs_nodes_fts USING fts5(path, description, tags, content='fs_nodes', content_rowid='id',
    tokenize='porter unicode61');
CREATE TRIGGER fs_nodes_ai AFTER INSERT ON fs_nodes BEGIN
    INSERT INTO fs_nodes_fts(rowid, path, description, tags) VALUES (new.id, new.path, new.description, new.tags);
END;
CREATE TRIGGER fs_nodes_ad AFTER DELETE ON fs_nodes BEGIN
    INSERT INTO fs_nodes_fts(fs_nodes_fts, rowid, path, description, tags)
        VALUES ('delete', old.id, old.path, old.description, old.tags);
END;
CREATE TRIGGER fs_nodes_au AFTER UPDATE OF path, description, tags ON fs_nodes BEGIN
    INSERT INTO fs_nodes_fts(fs_nodes_fts, rowid, path, description, tags)
        VALUES ('delete', old.id, old.path, old.description, old.tags);
    INSERT INTO fs_nodes_fts(rowid, path, description, tags) VALUES (new.id, new.path, new.description, new.tags);
END;

CREATE TABLE fs_chunks(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id INTEGER NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    hash TEXT NOT NULL,
    text TEXT NOT NULL,
    embedding BLOB
);
CREATE INDEX fs_chunks_node ON fs_chunks(node_id, start_line);
CREATE INDEX fs_chunks_hash ON fs_chunks(hash);
CREATE VIRTUAL TABLE fs_chunks_fts USING fts5(text, content='fs_chunks', content_rowid='id',
    tokenize='porter unicode61');
CREATE TRIGGER fs_chunks_ai AFTER INSERT ON fs_chunks BEGIN
    INSERT INTO fs_chunks_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER fs_chunks_ad AFTER DELETE ON fs_chunks BEGIN
    INSERT INTO fs_chunks_fts(fs_chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

CREATE TABLE fs_ops(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stamp REAL NOT NULL,
    agent TEXT NOT NULL,
    session TEXT,
    op TEXT NOT NULL,
    path TEXT NOT NULL,
    dest TEXT,
    undo_of INTEGER,
    undone_by INTEGER,
    summary TEXT NOT NULL DEFAULT '',
    x REAL, y REAL
);
CREATE INDEX fs_ops_agent ON fs_ops(agent, id);

CREATE TABLE fs_versions(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    op_id INTEGER NOT NULL,
    path TEXT NOT NULL,
    version INTEGER NOT NULL,
    kind TEXT,
    blob TEXT,
    meta TEXT,
    UNIQUE(path, version)
);
CREATE INDEX fs_versions_op ON fs_versions(op_id);
"""

# version -> SQL that brings a file from version-1 to version.
MIGRATIONS: dict[int, str] = {1: SCHEMA_V1, 2: SCHEMA_V2, 3: SCHEMA_V3, 4: SCHEMA_V4, 5: SCHEMA_V5}
LATEST = max(MIGRATIONS)


def current_version(conn: sqlite3.Connection) -> int:
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
    ).fetchone()
    if not has_meta:
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the file to LATEST, one transaction per step; refuse newer files."""
    version = current_version(conn)
    created = version == 0
    if version > LATEST:
        raise StoreError(
            f"this memory file has schema version {version}, newer than this emem_ros "
            f"understands ({LATEST}); upgrade emem_ros to open it"
        )
    while version < LATEST:
        version += 1
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', ?)", (str(version),)
            )
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                (f"migrated_to_{version}_at", repr(time.time())),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    if created:  # every delete in this file zeroes its bytes (PRAGMA secure_delete): forget needs no VACUUM
        conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('secure_delete', 'from_creation')")
    return version


def vacuum_once(conn: sqlite3.Connection) -> bool:
    """VACUUM, once, a file that had deletes before ``secure_delete`` was on; True if it ran.

    Such a file (created before schema v4) may keep deleted rows in free
    pages, so the first forget must rewrite it whole: 6 s at 1M observations,
    which under the writer lock would stop ingest and questions that long.
    It runs here instead, at open, before the memory serves anyone (a
    one-time cost of the upgrade, logged).
    """
    if conn.execute("SELECT value FROM meta WHERE key='secure_delete'").fetchone() is not None:
        return False
    started = time.perf_counter()
    conn.execute("VACUUM")
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('secure_delete', 'vacuumed')")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the whole file went through the WAL: leave it empty
    log.info("vacuumed a memory file from before secure_delete once, at open (%.1f s)", time.perf_counter() - started)
    return True


def _statements(script: str) -> list[str]:
    """Split a script into statements (our DDL has no ';' inside literals)."""
    parts, buffer = [], []
    for line in script.splitlines():
        buffer.append(line)
        candidate = "\n".join(buffer)
        if line.rstrip().endswith(";") and sqlite3.complete_statement(candidate):
            parts.append(candidate.strip())
            buffer = []
    if "\n".join(buffer).strip():
        parts.append("\n".join(buffer).strip())
    return parts
