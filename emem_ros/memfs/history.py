"""Version control: log, diff, undo and restore (``session`` is a ``session.Session``). Undo and restore are new operations, never erasures.

Undoing an operation puts every path it touched back to its state just
before it (a new version; the undone op is marked ``undone_by``); it is
refused, with the name of who changed it, when a path holds something else
than what the operation left (undoing one's later operations first is fine). Each
step reads one version row per path through the (path, version) index, so
its cost does not grow with the length of the history.
"""

from __future__ import annotations

import difflib
from typing import Any, Optional

import emem_ros.memfs.tables as tables
from emem_ros.memfs.args import whole
from emem_ros.memfs.errors import Conflict, FsError, NotFound
from emem_ros.memfs.records import Change, LogEntry, NodeState, OpResult

UNDOABLE_LIMIT = 50


def log(session: Any, path: Any = None, limit: Any = 20) -> list[LogEntry]:
    """Newest first; paths shown as the session sees them (other sessions' private paths left out)."""
    count = whole(limit, "limit", 20, 1, 1000)
    stored = session.stored(session.path(path)) if path not in (None, "", "/") else None
    entries = tables.log_entries(session.fs.store.reader(), stored, count * 2 if not session.system else count)
    out = []
    for entry in entries:
        seen = session.visible(entry.path)
        if seen is None:
            if entry.op == "session-end" and entry.session is None and f"@{session.id}" in entry.path:
                continue
            if not session.system:
                continue
            seen = entry.path
        dest = session.visible(entry.dest) if entry.dest else None
        out.append(LogEntry(entry.op_id, entry.stamp, entry.agent, entry.session, entry.op, seen, dest,
                            entry.summary, entry.undo_of, entry.undone_by, entry.version))
    return out[:count]


def undo(session: Any, n: Any = 1) -> list[OpResult]:
    """Revert this agent's last ``n`` operations not undone yet, newest first."""
    count = whole(n, "n", 1, 1, UNDOABLE_LIMIT)
    conn = session.fs.store.reader()
    rows = conn.execute(
        "SELECT id, op, path FROM fs_ops WHERE agent = ? AND undone_by IS NULL AND undo_of IS NULL"
        " AND op NOT IN ('layout', 'conversation', 'session-end') ORDER BY id DESC LIMIT ?",
        (session.agent_id, count)).fetchall()
    if not rows:
        raise FsError(f"nothing to undo: {session.agent_id} has no operation left that is not undone already")
    return [undo_op(session, int(op_id)) for op_id, _, _ in rows]


def undo_op(session: Any, op_id: int) -> OpResult:
    """Put every path operation ``op_id`` touched back to its state before it (one new operation)."""
    conn = session.fs.store.reader()
    row = conn.execute("SELECT op, path, undone_by FROM fs_ops WHERE id = ?", (op_id,)).fetchone()
    if row is None:
        raise FsError(f"there is no operation {op_id}")
    if row[2] is not None:
        raise FsError(f"operation {op_id} was undone already (by operation {row[2]})")
    changes: list[Change] = []
    for path, version in tables.op_versions(conn, op_id):
        current = tables.node(conn, path)
        have = current.version if current is not None else 0
        _, after = tables.version_state(conn, path, version)
        if not _same(after, current.state() if current is not None else None):
            latest = tables.next_version(conn, path) - 1
            raise Conflict(f"cannot undo operation {op_id} ({row[0]} {_shown(session, row[1])}):"
                           f" {_shown(session, path)} changed since (version {latest}{_who(conn, path)}); restore"
                           f" the version you want with fs_restore instead")
        changes.append(Change(path, tables.previous_state(conn, path, version), have))
    result = session.fs.commit(session, "undo", row[1], _parents_first(changes), summary=f"undid operation {op_id}",
                               undo_of=op_id)
    done: OpResult = session._done(result)
    return done


def restore(session: Any, path: Any, version: Any) -> OpResult:
    """Make ``path`` what it was at ``version`` (a new version; later ones are kept)."""
    visible = session.path(path)
    number = whole(version, "version", 1, 1, 10**12)
    stored = session.stored(visible)
    conn = session.fs.store.reader()
    exists, state = tables.version_state(conn, stored, number)
    if not exists:
        latest = tables.next_version(conn, stored) - 1
        if latest == 0:
            raise NotFound.at(visible, session._near(visible))
        raise FsError(f"{visible} has no version {number}; its versions are 1 to {latest} (fs_log shows them)")
    current = tables.node(conn, stored)
    session._may_write(visible, "change", current)
    changes = session.fs.missing_parents(stored, session.agent_id) if state is not None else []
    changes.append(Change(stored, state, current.version if current is not None else 0))
    result = session.fs.commit(session, "restore", stored, changes, summary=f"restored version {number}")
    done: OpResult = session._done(result)
    return done


def diff(session: Any, path: Any, v1: Any, v2: Any = None) -> str:
    """A unified diff of ``path`` between two versions (``v2`` None: the current one)."""
    visible = session.path(path)
    stored = session.stored(visible)
    conn = session.fs.store.reader()
    a = whole(v1, "v1", 1, 1, 10**12)
    latest = tables.next_version(conn, stored) - 1
    b = whole(v2, "v2", latest, 1, 10**12)
    texts = []
    for number in (a, b):
        exists, state = tables.version_state(conn, stored, number)
        if not exists:
            raise FsError(f"{visible} has no version {number}; its versions are 1 to {latest}")
        texts.append(tables.blob(conn, state.blob) if state is not None and state.kind == "file" else "")
    lines = difflib.unified_diff(texts[0].splitlines(keepends=True), texts[1].splitlines(keepends=True),
                                 f"{visible}@{a}", f"{visible}@{b}")
    return "".join(lines) or f"{visible}: versions {a} and {b} hold the same content\n"


def _same(a: Optional[NodeState], b: Optional[NodeState]) -> bool:
    """Two states hold the same thing (undoing later operations first brings a path back to this one)."""
    if a is None or b is None:
        return a is b
    keys = ("description", "tags", "perms", "owner", "x", "y", "z", "frame_id", "entity_id")

    def norm(state: NodeState) -> tuple[object, ...]:
        return tuple(list(v) if isinstance(v := state.meta.get(k), (list, tuple)) else (v or None) for k in keys)

    return a.kind == b.kind and a.blob == b.blob and norm(a) == norm(b)


def _parents_first(changes: list[Change]) -> list[Change]:
    """Creations parents first, deletions children first."""
    made = sorted((c for c in changes if c.state is not None), key=lambda c: c.path.count("/"))
    gone = sorted((c for c in changes if c.state is None), key=lambda c: -c.path.count("/"))
    return made + gone


def _who(conn: Any, path: str) -> str:
    row = conn.execute("SELECT o.agent, o.op FROM fs_versions v JOIN fs_ops o ON o.id = v.op_id WHERE v.path = ?"
                       " ORDER BY v.version DESC LIMIT 1", (path,)).fetchone()
    return f", {row[1]} by {row[0]}" if row else ""


def _shown(session: Any, path: Optional[str]) -> str:
    if path is None:
        return ""
    return session.visible(path) or path
