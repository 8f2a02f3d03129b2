"""/raw/episodes and /raw/experiences: rendered on read from the episode table and the experience ledger.

Nothing is copied: the tables stay the truth, so these files are always
current and cost no storage. They are read-only like the rest of /raw.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Optional

from emem_ros.memfs.paths import name_of, parent_of
from emem_ros.storage.store import MemoryStore

EPISODES = "/raw/episodes"
EXPERIENCES = "/raw/experiences"
LISTED = 500
"""Newest entries listed per folder (older ones are still readable by name)."""


@dataclass(frozen=True)
class VirtualEntry:
    path: str
    kind: str
    description: str
    stamp: float
    content: Optional[str] = None

    @property
    def size(self) -> int:
        return len(self.content.encode("utf-8")) if self.content is not None else 0


def is_virtual(path: str) -> bool:
    return path in (EPISODES, EXPERIENCES) or parent_of(path) in (EPISODES, EXPERIENCES)


def entry(store: MemoryStore, path: str) -> Optional[VirtualEntry]:
    """The folder or file at ``path`` (None: no such episode or experience)."""
    if path == EPISODES:
        return VirtualEntry(path, "dir", "The robot's task episodes, one file each (read-only).", 0.0)
    if path == EXPERIENCES:
        return VirtualEntry(path, "dir", "The experience ledger: what was tried and learned (read-only).", 0.0)
    name = name_of(path)
    if parent_of(path) == EPISODES and name.startswith("ep-") and name.endswith(".md"):
        digits = name[3:-3]
        return _episode(store, int(digits)) if digits.isdigit() else None
    if parent_of(path) == EXPERIENCES and name.endswith(".md") and len(name) > 11:
        return _experience(store, name[:-3])
    return None


def listing(store: MemoryStore, folder: str) -> tuple[list[VirtualEntry], int]:
    """(entries newest first, how many exist in all)."""
    conn = store.reader()
    if folder == EPISODES:
        total = int(conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0])
        rows = conn.execute("SELECT id FROM episodes ORDER BY id DESC LIMIT ?", (LISTED,)).fetchall()
        return [e for (n,) in rows if (e := _episode(store, int(n), body=False)) is not None], total
    if folder == EXPERIENCES:
        store.apply_deferred()
        total = int(conn.execute("SELECT COUNT(*) FROM experiences").fetchone()[0])
        rows = conn.execute("SELECT id FROM experiences ORDER BY n DESC LIMIT ?", (LISTED,)).fetchall()
        return [e for (x,) in rows if (e := _experience(store, str(x)[:12], body=False)) is not None], total
    return [], 0


def _iso(stamp: Optional[float]) -> str:
    if stamp is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def _episode(store: MemoryStore, number: int, body: bool = True) -> Optional[VirtualEntry]:
    row = store.reader().execute(
        "SELECT name, start, end, status, summary, goal, action, result, reflection, success, parent_id"
        " FROM episodes WHERE id = ?", (number,)).fetchone()
    if row is None:
        return None
    name, start, end, status, summary, goal, action, result, reflection, success, parent = row
    description = f"episode '{name}' ({status}, started {_iso(start)})"
    content = None
    if body:
        lines = [f"# Episode ep-{number}: {name}", "", f"- status: {status}", f"- start: {_iso(start)}",
                 f"- end: {_iso(end)}"]
        if parent is not None:
            lines.append(f"- subtask of: ep-{parent}")
        for label, value in (("goal", goal), ("action", action), ("result", result), ("reflection", reflection)):
            if value:
                lines.append(f"- {label}: {value}")
        if success is not None:
            lines.append(f"- success: {'yes' if success else 'no'}")
        if summary:
            lines += ["", "## Summary", "", summary]
        content = "\n".join(lines) + "\n"
    return VirtualEntry(f"{EPISODES}/ep-{number}.md", "file", description, float(end or start), content)


def _experience(store: MemoryStore, prefix: str, body: bool = True) -> Optional[VirtualEntry]:
    if not all(c in "0123456789abcdef" for c in prefix):
        return None
    store.apply_deferred()
    row = store.reader().execute(
        "SELECT id, goal, action, result, reflection, success, tags, stamp, episode_id, supersedes"
        " FROM experiences WHERE id >= ? AND id < ? ORDER BY n LIMIT 1", (prefix, prefix + "g")).fetchone()
    if row is None:
        return None
    xid, goal, action, result, reflection, success, tags, stamp, episode, supersedes = row
    outcome = "unknown outcome" if success is None else ("success" if success else "failure")
    description = f"experience: {goal} ({outcome}, {_iso(stamp)})"
    content = None
    if body:
        lines = [f"# Experience {xid[:12]}", "", f"- goal: {goal}"]
        for label, value in (("action", action), ("result", result), ("reflection", reflection)):
            if value:
                lines.append(f"- {label}: {value}")
        lines.append(f"- outcome: {outcome}")
        lines.append(f"- when: {_iso(stamp)}")
        if episode is not None:
            lines.append(f"- episode: ep-{episode}")
        parsed = json.loads(tags or "[]")
        if parsed:
            lines.append(f"- tags: {', '.join(map(str, parsed))}")
        if supersedes:
            lines.append(f"- corrects: {supersedes[:12]}")
        lines.append(f"- id: {xid}")
        content = "\n".join(lines) + "\n"
    return VirtualEntry(f"{EXPERIENCES}/{xid[:12]}.md", "file", description, float(stamp), content)
