"""The SQL of MemFS in one place: nodes, blobs, chunks, operations and versions.

Every mutating statement runs on the connection ``MemoryStore.write()``
hands out, so it lands in the operation log (rebuild and fleet see it) and
commits atomically with the rest of the operation.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Iterable, Optional, Sequence

from emem_ros.memfs.paths import name_of, parent_of, prefix_range
from emem_ros.memfs.records import NODE_COLUMNS, Change, LogEntry, Node, NodeState
from emem_ros.storage.sqlutil import chunked, marks

OP_COLUMNS = "id, stamp, agent, session, op, path, dest, summary, undo_of, undone_by"


def node(conn: sqlite3.Connection, path: str) -> Optional[Node]:
    row = conn.execute(f"SELECT {NODE_COLUMNS} FROM fs_nodes WHERE path = ?", (path,)).fetchone()
    return Node.from_row(row) if row else None


def nodes_by_id(conn: sqlite3.Connection, ids: Iterable[int]) -> dict[int, Node]:
    out: dict[int, Node] = {}
    for chunk in chunked(list(ids)):
        for row in conn.execute(f"SELECT {NODE_COLUMNS} FROM fs_nodes WHERE id IN ({marks(len(chunk))})", chunk):
            out[row[0]] = Node.from_row(row)
    return out


def children(conn: sqlite3.Connection, folder: str) -> list[Node]:
    return [Node.from_row(r) for r in conn.execute(
        f"SELECT {NODE_COLUMNS} FROM fs_nodes WHERE parent = ? ORDER BY kind = 'file', name", (folder,))]


def descendants(conn: sqlite3.Connection, folder: str) -> list[Node]:
    """Everything strictly inside ``folder``, parents before children."""
    lo, hi = prefix_range(folder)
    return [Node.from_row(r) for r in conn.execute(
        f"SELECT {NODE_COLUMNS} FROM fs_nodes WHERE path >= ? AND path < ? ORDER BY path", (lo, hi))]


def subtree_counts(conn: sqlite3.Connection, folder: str) -> tuple[int, int]:
    """(files, bytes) strictly inside ``folder``."""
    lo, hi = prefix_range(folder)
    row = conn.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM fs_nodes WHERE path >= ? AND path < ?"
                       " AND kind = 'file'", (lo, hi)).fetchone()
    return int(row[0]), int(row[1])


def blob(conn: sqlite3.Connection, digest: Optional[str]) -> str:
    if digest is None:
        return ""
    row = conn.execute("SELECT content FROM fs_blobs WHERE hash = ?", (digest,)).fetchone()
    return str(row[0]) if row else ""


def put_blob(conn: sqlite3.Connection, digest: str, content: str) -> None:
    conn.execute("INSERT OR IGNORE INTO fs_blobs(hash, content, size) VALUES (?, ?, ?)",
                 (digest, content, len(content.encode("utf-8"))))


def stored_vectors(conn: sqlite3.Connection, hashes: Sequence[str]) -> dict[str, bytes]:
    """Embeddings already stored for these chunk hashes (any file): reused instead of embedding again."""
    found: dict[str, bytes] = {}
    for chunk in chunked(list(dict.fromkeys(hashes))):
        for digest, embedding in conn.execute(
                f"SELECT hash, embedding FROM fs_chunks WHERE hash IN ({marks(len(chunk))}) AND embedding IS NOT NULL",
                chunk):
            found[digest] = embedding
    return found


def node_chunks(conn: sqlite3.Connection, node_id: int) -> list[tuple[int, int, int, str]]:
    """(id, start, end, hash) of a node's chunks."""
    return [(int(r[0]), int(r[1]), int(r[2]), str(r[3])) for r in conn.execute(
        "SELECT id, start_line, end_line, hash FROM fs_chunks WHERE node_id = ? ORDER BY start_line", (node_id,))]


def next_version(conn: sqlite3.Connection, path: str) -> int:
    row = conn.execute("SELECT MAX(version) FROM fs_versions WHERE path = ?", (path,)).fetchone()
    return int(row[0] or 0) + 1


def version_state(conn: sqlite3.Connection, path: str, version: int) -> tuple[bool, Optional[NodeState]]:
    """(exists, state) of ``path`` at ``version`` (state None: deleted at that version)."""
    row = conn.execute("SELECT kind, blob, meta FROM fs_versions WHERE path = ? AND version = ?",
                       (path, version)).fetchone()
    if row is None:
        return False, None
    return True, NodeState.from_row(row[0], row[1], row[2])


def previous_state(conn: sqlite3.Connection, path: str, version: int) -> Optional[NodeState]:
    """The state just before ``version`` (None: the path did not exist)."""
    row = conn.execute("SELECT kind, blob, meta FROM fs_versions WHERE path = ? AND version < ?"
                       " ORDER BY version DESC LIMIT 1", (path, version)).fetchone()
    return NodeState.from_row(row[0], row[1], row[2]) if row else None


def op_versions(conn: sqlite3.Connection, op_id: int) -> list[tuple[str, int]]:
    return [(str(p), int(v)) for p, v in conn.execute(
        "SELECT path, version FROM fs_versions WHERE op_id = ? ORDER BY id", (op_id,))]


def add_op(conn: sqlite3.Connection, stamp: float, agent: str, session: Optional[str], op: str, path: str,
           dest: Optional[str], summary: str, undo_of: Optional[int],
           place: Optional[tuple[float, float]]) -> int:
    cursor = conn.execute(
        "INSERT INTO fs_ops(stamp, agent, session, op, path, dest, undo_of, summary, x, y)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (stamp, agent, session, op, path, dest, undo_of, summary,
         place[0] if place else None, place[1] if place else None))
    op_id = int(cursor.lastrowid or 0)
    if undo_of is not None:
        conn.execute("UPDATE fs_ops SET undone_by = ? WHERE id = ?", (op_id, undo_of))
    return op_id


def add_version(conn: sqlite3.Connection, op_id: int, path: str, version: int, state: Optional[NodeState]) -> None:
    conn.execute("INSERT INTO fs_versions(op_id, path, version, kind, blob, meta) VALUES (?, ?, ?, ?, ?, ?)",
                 (op_id, path, version, state.kind if state else None, state.blob if state else None,
                  state.meta_json() if state else None))


def upsert_node(conn: sqlite3.Connection, change: Change, current: Optional[Node], version: int, stamp: float,
                size: int, lines: int, embedding: Optional[bytes], keep_embedding: bool) -> int:
    """Write the node row of ``change.state`` at ``change.path``; returns its id."""
    state = change.state
    assert state is not None
    meta = state.meta
    values = (change.path, parent_of(change.path), name_of(change.path), state.kind, state.blob, size, lines,
              meta.get("perms", "rw-"), meta.get("owner", "system"), meta.get("description", ""),
              json.dumps(list(meta.get("tags") or []), separators=(",", ":")), version,
              meta.get("x"), meta.get("y"), meta.get("z"), meta.get("frame_id"), meta.get("entity_id"))
    if current is None:
        created = float(meta.get("created") or stamp)
        cursor = conn.execute(
            "INSERT INTO fs_nodes(path, parent, name, kind, blob, size, lines, perms, owner, description, tags,"
            " version, x, y, z, frame_id, entity_id, created, modified, accessed, embedding)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*values, created, stamp, stamp, embedding))
        return int(cursor.lastrowid or 0)
    if keep_embedding:
        conn.execute(
            "UPDATE fs_nodes SET path=?, parent=?, name=?, kind=?, blob=?, size=?, lines=?, perms=?, owner=?,"
            " description=?, tags=?, version=?, x=?, y=?, z=?, frame_id=?, entity_id=?, modified=?, accessed=?"
            " WHERE id=?", (*values, stamp, stamp, current.id))
    else:
        conn.execute(
            "UPDATE fs_nodes SET path=?, parent=?, name=?, kind=?, blob=?, size=?, lines=?, perms=?, owner=?,"
            " description=?, tags=?, version=?, x=?, y=?, z=?, frame_id=?, entity_id=?, modified=?, accessed=?,"
            " embedding=? WHERE id=?", (*values, stamp, stamp, embedding, current.id))
    return current.id


def delete_node(conn: sqlite3.Connection, node_id: int) -> list[int]:
    """Remove a node and its chunks; returns the chunk ids removed."""
    removed = [int(r[0]) for r in conn.execute("SELECT id FROM fs_chunks WHERE node_id = ?", (node_id,))]
    conn.execute("DELETE FROM fs_chunks WHERE node_id = ?", (node_id,))
    conn.execute("DELETE FROM fs_nodes WHERE id = ?", (node_id,))
    return removed


def insert_chunks(conn: sqlite3.Connection, node_id: int, rows: list[tuple[int, int, str, str, Optional[bytes]]]
                  ) -> list[int]:
    """Insert (start, end, hash, text, embedding) rows; returns their ids."""
    ids = []
    for start, end, digest, text, embedding in rows:
        cursor = conn.execute("INSERT INTO fs_chunks(node_id, start_line, end_line, hash, text, embedding)"
                              " VALUES (?, ?, ?, ?, ?, ?)", (node_id, start, end, digest, text, embedding))
        ids.append(int(cursor.lastrowid or 0))
    return ids


def log_entries(conn: sqlite3.Connection, path: Optional[str], limit: int, agent: Optional[str] = None
                ) -> list[LogEntry]:
    """Newest first: operations that touched ``path`` (or anything inside it), or all operations."""
    if path is None or path == "/":
        sql = f"SELECT {OP_COLUMNS}, NULL FROM fs_ops" + (" WHERE agent = ?" if agent else "") + \
            " ORDER BY id DESC LIMIT ?"
        params: list[Any] = ([agent] if agent else []) + [limit]
    else:
        lo, hi = prefix_range(path)
        sql = (f"SELECT {', '.join('o.' + c.strip() for c in OP_COLUMNS.split(','))}, MAX(v.version) FROM fs_ops o"
               " JOIN fs_versions v ON v.op_id = o.id"
               " WHERE (v.path = ? OR (v.path >= ? AND v.path < ?))" + (" AND o.agent = ?" if agent else "") +
               " GROUP BY o.id ORDER BY o.id DESC LIMIT ?")
        params = [path, lo, hi] + ([agent] if agent else []) + [limit]
    return [LogEntry(*row) for row in conn.execute(sql, params)]
