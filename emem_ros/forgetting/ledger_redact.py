"""Forgetting a ledger experience without breaking the ledger.

An experience's id is the SHA-256 of its canonical content, and corrections
point at the id they supersede (``supersedes``): the ids are the ledger's
chain. Erasing the content must keep every id and every link. So a redacted
experience keeps its row, its ``n``, its id, its stamp, episode, success
and ``supersedes``; its texts become ``[redacted]`` / empty, its tags and
vector go, and its metadata says ``{"redacted": {"at", "forget", "content_sha256": id}}``.

A verifier recomputes ``sha256(canonical content) == id`` for every record,
except those listed in ``redactions`` (written in the same transaction):
for them the id is the commitment to content that no longer exists, and
the redaction row (with the forget_log entry it points at) is the proof of
why. Records that supersede a redacted one still name it, so the chain of
corrections stays walkable. SQLite enforces this: the immutability trigger
(schema v4) lets an UPDATE through only for ids listed in ``redactions``,
and never one that changes the id.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional, Sequence

from emem_ros.forgetting.selector import Selector

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.storage.store import MemoryStore

REDACTED = "[redacted]"
_COLUMNS = "n, id, goal, action, result, reflection, tags, stamp, x, y"


def matching_experiences(store: "MemoryStore", selector: Selector) -> list[tuple[int, str]]:
    """(n, id) of the experiences the selector names: by words, and by time/place/layer-free criteria only."""
    if not selector.match or selector.ids or selector.entity or selector.similar_to or selector.layer:
        return []
    store.apply_deferred()
    out = []
    for n, record_id, goal, action, result, reflection, tags, stamp, x, y in store.reader().execute(
            f"SELECT {_COLUMNS} FROM experiences WHERE id NOT IN (SELECT experience_id FROM redactions)"):
        if not any(selector.matches(v) for v in (goal, action, result, reflection, tags)):
            continue
        if selector.since is not None and stamp < selector.since:
            continue
        if selector.until is not None and stamp > selector.until:
            continue
        if selector.radius is not None:
            from emem_ros.forgetting.selector import within
            if not within(selector, x, y):
                continue
        out.append((n, record_id))
    return out


def redact(conn: Any, items: Sequence[tuple[int, str]], at: float, forget_id: Optional[int]) -> int:
    """Inside a write transaction: replace each record's content by a redaction stub (id kept)."""
    for n, record_id in items:
        old = conn.execute("SELECT goal, action, result, reflection, tags FROM experiences WHERE n=?",
                           (n,)).fetchone()
        if old is None:
            continue
        conn.execute("INSERT OR IGNORE INTO redactions(experience_id, at, forget_id) VALUES(?,?,?)",
                     (record_id, at, forget_id))
        conn.execute("INSERT INTO experiences_fts(experiences_fts, rowid, goal, action, result, reflection, tags)"
                     " VALUES('delete', ?, ?, ?, ?, ?, ?)", (n, *old))
        metadata = json.dumps({"redacted": {"at": at, "forget": forget_id, "content_sha256": record_id}})
        conn.execute("UPDATE experiences SET goal=?, action='', result='', reflection='', tags='[]', metadata=?,"
                     " embedding=NULL WHERE n=?", (REDACTED, metadata, n))
        conn.execute("INSERT INTO experiences_fts(rowid, goal, action, result, reflection, tags)"
                     " VALUES(?, ?, '', '', '', '[]')", (n, REDACTED))
    return len(items)
