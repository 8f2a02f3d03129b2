"""The fixed layout and who may change what in it.

    /AGENTS.md   how to use this filesystem (system, read-only)
    /raw/        the system's: episodes, experiences, conversations, artifacts (read-only for agents)
    /memory/     the agent's own long-term space (full access)
    /tmp/        scratch space of one session, cleared when it ends
    /mnt/        shared folders mounted by the developer (read-write inside a mount)

Nothing can be created, changed or deleted at the root by an agent. Names
starting with '@' are the stored form of session-private folders and are
never written by agents directly.
"""

from __future__ import annotations

from emem_ros.memfs.errors import PermissionDenied
from emem_ros.memfs.paths import is_under, name_of, parent_of

SYSTEM = "system"
"""The owner of what the system writes (the layout, /raw, developer writes)."""
AGENTS_MD = "/AGENTS.md"
RAW, MEMORY, TMP, MNT = "/raw", "/memory", "/tmp", "/mnt"
ROOT_FOLDERS = (RAW, MEMORY, TMP, MNT)
SYSTEM_FOLDERS = ("/", RAW, MEMORY, TMP, MNT, "/raw/artifacts", "/raw/conversation-history")
VIRTUAL_FOLDERS = ("/raw/episodes", "/raw/experiences")
"""Rendered on read from the episode table and the experience ledger (``virtual.py``); never stored."""
CONVERSATIONS = "/raw/conversation-history"
CURRENT = "CURRENT"

AGENTS_TEXT = """# How to use this filesystem (MemFS)

This is your own memory: folders and files you organise freely. Everything you write is kept,
versioned and searchable by meaning.

- /memory/   your long-term notes: what you learned, checklists, places, people. Full access.
             Give files a short `description` and `tags` when you write them: search uses them.
- /tmp/      scratch space for this session only; it is cleared when the session ends.
- /mnt/      shared folders (e.g. /mnt/team) that several agents read and write.
- /raw/      read-only records written by the system:
             /raw/episodes/       one file per task episode of the robot
             /raw/experiences/    the experience ledger (what was tried, what came of it)
             /raw/conversation-history/CURRENT   this session's conversation; finished ones by start time
             /raw/artifacts/      files the developer put here
- /AGENTS.md this file (read-only). Nothing else can be created at the root.

Tools: fs_ls, fs_read (line numbers, offset/limit), fs_write (whole file; folders are made),
fs_edit (replace one exact, unique piece of text), fs_mkdir, fs_mv, fs_rm, fs_peek (metadata),
fs_search (by meaning and keywords, from a folder; filters by tags, owner, time, place),
fs_log (history), fs_undo (revert your last operations), fs_restore (a file at an older version).

Good habits: read a file before you edit it (a file changed by someone else since you read it is
refused, not overwritten); keep one topic per file; pin a note to a place (x, y) or entity when it
is about one, so it shows up when the robot is there.
"""


def agents_may_read(path: str) -> bool:
    return True


def check_agent_write(path: str, what: str = "change") -> None:
    """Raise PermissionDenied (naming where the agent may write) unless an agent may ``what`` ``path``."""
    top = "/" + path.strip("/").split("/")[0] if path != "/" else "/"
    if top not in ROOT_FOLDERS and path != top and top != AGENTS_MD:
        raise PermissionDenied(
            f"cannot {what} {path}: {top} would be a new folder at the root, and nothing can be created there;"
            f" use /memory{path} instead")
    if path == "/" or parent_of(path) == "/":
        if path in ROOT_FOLDERS or path == AGENTS_MD:
            raise PermissionDenied(
                f"{path} is part of the fixed layout and cannot be {_past(what)}; "
                f"write inside /memory/ (your notes) or /tmp/ (scratch) instead")
        raise PermissionDenied(
            f"cannot {what} {path}: nothing can be created, changed or deleted at the root; "
            f"use /memory/{name_of(path) if path != '/' else 'notes.md'} instead")
    if is_under(path, RAW):
        raise PermissionDenied(
            f"cannot {what} {path}: /raw/ is read-only for agents (the system writes there); "
            f"keep your own copy or notes under /memory/ instead")
    if is_under(path, MNT) and parent_of(path) == MNT:
        raise PermissionDenied(
            f"cannot {what} {path}: folders directly in /mnt/ are shared mounts made by the developer; "
            f"write inside an existing mount (fs_ls /mnt) or under /memory/ instead")
    if any(part.startswith("@") for part in path.split("/")):
        raise PermissionDenied(f"cannot {what} {path}: names starting with '@' are reserved; pick another name")


def default_perms(path: str, kind: str) -> str:
    """What agents may do with a new node: read, write, execute (list/enter for folders)."""
    read_only = is_under(path, RAW) or path == AGENTS_MD or path == "/"
    if kind == "dir":
        return "r-x" if read_only else "rwx"
    return "r--" if read_only else "rw-"


def _past(what: str) -> str:
    return {"change": "changed", "delete": "deleted", "create": "created", "move": "moved"}.get(what, what + "d")
