"""An agent's session: the paths it sees, what it may change, what it read.

``/tmp/`` and ``/raw/conversation-history/CURRENT`` are the session's own:
they are stored under ``@<session>`` folders that no other session sees.
When the session ends its /tmp is cleared and CURRENT is renamed to the
session's ISO start time (a finished conversation everyone can read).
The session remembers the version of each file it read, so a write based on
an old read fails with ``Conflict`` instead of overwriting another agent.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import emem_ros.memfs.history as history
import emem_ros.memfs.search as search_
import emem_ros.memfs.tables as tables
import emem_ros.memfs.virtual as virtual
from emem_ros.memfs.args import whole as _int
from emem_ros.memfs.args import words
from emem_ros.memfs.core import FsCore, check_text
from emem_ros.memfs.errors import (
    AlreadyExists,
    Conflict,
    FsError,
    IsADirectory,
    NotFound,
    PermissionDenied,
    closest_line,
)
from emem_ros.memfs.layout import CONVERSATIONS, CURRENT, SYSTEM, TMP, check_agent_write
from emem_ros.memfs.paths import ancestors, is_under, join, name_of, normalise, parent_of
from emem_ros.memfs.records import Change, Node, OpResult

_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_counter = itertools.count(1)
LONG_LINE = 2000
"""Characters of one line fs_read shows; the rest is cut (with a note)."""
DEFAULT_LIMIT = 400
"""Lines fs_read returns when no limit is given."""


@dataclass(frozen=True)
class Entry:
    path: str
    kind: str
    description: str = ""
    size: int = 0
    files: int = 0
    modified: float = 0.0
    owner: str = ""
    version: int = 0
    tags: tuple[str, ...] = ()
    perms: str = ""
    place: Optional[tuple[float, float, float]] = None
    entity_id: Optional[str] = None
    created: float = 0.0
    accessed: float = 0.0
    lines: int = 0


@dataclass(frozen=True)
class Listing:
    path: str
    entries: list[Entry]
    omitted: int = 0


@dataclass(frozen=True)
class ReadResult:
    path: str
    version: int
    offset: int
    """First line shown, 1-based."""
    lines: list[str]
    total_lines: int
    cut_lines: int = 0
    """Lines longer than LONG_LINE that were cut."""

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def remaining(self) -> int:
        return max(0, self.total_lines - (self.offset - 1) - len(self.lines))


@dataclass
class Session:
    fs: FsCore
    agent_id: str
    system: bool = False
    id: str = ""
    started: float = 0.0
    ended: bool = False
    read_versions: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.agent_id, str) or not _AGENT_ID.match(self.agent_id):
            raise FsError(f"agent id must be 1-64 letters, digits, '_', '.' or '-', got {self.agent_id!r}")
        if self.agent_id == SYSTEM and not self.system:
            raise FsError("'system' is reserved for what the system writes; pick another agent id")
        self.started = self.fs.engine.now()
        self.id = "system" if self.system else f"{self.agent_id}.{next(_counter)}.{int(time.time() * 1000) % 10**8}"

    # ------------------------------------------------------------------ paths
    @property
    def _tmp(self) -> str:
        return f"{TMP}/@{self.id}"

    @property
    def _current(self) -> str:
        return f"{CONVERSATIONS}/@{self.id}/{CURRENT}"

    def stored(self, visible: str) -> str:
        """Where a path this session sees is stored."""
        if self.system:
            return visible
        if is_under(visible, TMP) and visible != TMP:
            return self._tmp + visible[len(TMP):]
        if visible == f"{CONVERSATIONS}/{CURRENT}":
            return self._current
        return visible

    def visible(self, stored: str) -> Optional[str]:
        """The path this session sees for a stored path (None: another session's private path)."""
        if self.system or "@" not in stored:
            return stored
        if is_under(stored, self._tmp):
            return TMP + stored[len(self._tmp):]
        if stored == self._current:
            return f"{CONVERSATIONS}/{CURRENT}"
        return None

    def path(self, value: Any) -> str:
        path = normalise(value)
        if not self.system and any(p.startswith("@") for p in path.split("/")):
            raise NotFound(f"{path} does not exist (names starting with '@' are private storage)")
        return path

    # ------------------------------------------------------------------ reading
    def _node(self, visible: str) -> Optional[Node]:
        if visible == TMP and not self.system:
            return self.fs.node(TMP)
        return self.fs.node(self.stored(visible))

    def _require(self, visible: str) -> Node:
        found = self._node(visible)
        if found is None:
            raise NotFound.at(visible, self._near(visible))
        return found

    def _near(self, visible: str) -> list[str]:
        """Existing paths near a missing one: the children of its nearest existing folder."""
        folder = parent_of(visible) or "/"
        while folder != "/" and self._node(folder) is None and not virtual.is_virtual(folder):
            folder = parent_of(folder) or "/"
        if self._node(folder) is None and not virtual.is_virtual(folder):
            return []
        try:
            return [e.path for e in self.ls(folder, 2).entries] + [folder]
        except FsError:
            return []

    def ls(self, path: Any = "/", depth: Any = 1, limit: int = 200) -> Listing:
        folder = self.path(path)
        depth = _int(depth, "depth", 1, 1, 5)
        if virtual.is_virtual(folder):
            found = virtual.entry(self.fs.store, folder)
            if found is None:
                raise NotFound.at(folder, self._near(folder))
            if found.kind != "dir":
                return Listing(folder, [_ventry(found)])
            items, total = virtual.listing(self.fs.store, folder)
            shown = [_ventry(i) for i in items[:limit]]
            return Listing(folder, shown, total - len(shown))
        node = self._require(folder)
        if not node.is_dir:
            return Listing(folder, [self._entry(node, folder)])
        entries: list[Entry] = []
        omitted = 0
        conn = self.fs.store.reader()

        def walk(current: str, level: int) -> None:
            nonlocal omitted
            for child in self._children(conn, current):
                if len(entries) >= limit:
                    omitted += 1 + (child.files if child.kind == "dir" and level < depth else 0)
                    continue
                entries.append(child)
                if child.kind == "dir" and level < depth and not virtual.is_virtual(child.path):
                    walk(child.path, level + 1)

        walk(folder, 1)
        return Listing(folder, entries, omitted)

    def _children(self, conn: Any, folder: str) -> list[Entry]:
        stored = self.stored(folder) if folder != TMP or self.system else self._tmp
        out = []
        for child in tables.children(conn, stored):
            seen = self.visible(child.path)
            if seen is None:
                if child.path == f"{CONVERSATIONS}/@{self.id}":  # this session's CURRENT appears in the folder
                    current = tables.node(conn, self._current)
                    if current is not None:
                        out.append(self._entry(current, f"{CONVERSATIONS}/{CURRENT}"))
                continue
            out.append(self._entry(child, seen))
        if folder == "/raw" or (self.system and stored == "/raw"):
            for extra in (virtual.EPISODES, virtual.EXPERIENCES):
                found = virtual.entry(self.fs.store, extra)
                if found is not None:
                    items, total = virtual.listing(self.fs.store, extra)
                    out.append(Entry(extra, "dir", found.description, files=total))
        return out

    def _entry(self, node: Node, visible: str) -> Entry:
        counted = self._tmp if node.path == TMP and not self.system else node.path  # only this session's /tmp
        files, size = (tables.subtree_counts(self.fs.store.reader(), counted) if node.is_dir
                       else (0, node.size))
        return Entry(visible, node.kind, node.description, size, files, node.modified, node.owner, node.version,
                     node.tags, node.perms, node.place, node.entity_id, node.created, node.accessed, node.lines)

    def peek(self, path: Any) -> Entry:
        visible = self.path(path)
        if virtual.is_virtual(visible):
            found = virtual.entry(self.fs.store, visible)
            if found is None:
                raise NotFound.at(visible, self._near(visible))
            return _ventry(found)
        return self._entry(self._require(visible), visible)

    def read(self, path: Any, offset: Any = 1, limit: Any = None) -> ReadResult:
        visible = self.path(path)
        first = _int(offset, "offset", 1, 1, 10**9)
        count = _int(limit, "limit", DEFAULT_LIMIT, 1, 100_000)
        if virtual.is_virtual(visible):
            found = virtual.entry(self.fs.store, visible)
            if found is None:
                raise NotFound.at(visible, self._near(visible))
            if found.kind == "dir":
                raise IsADirectory(f"{visible} is a folder; list it with fs_ls")
            return _page(visible, 0, found.content or "", first, count)
        node = self._require(visible)
        if node.is_dir:
            raise IsADirectory(f"{visible} is a folder; list it with fs_ls, or read one of its files")
        content = self.fs.content(node)
        with self._lock:
            self.read_versions[node.path] = node.version
        self.fs.touch(node.path)
        return _page(visible, node.version, content, first, count)

    def text(self, path: Any) -> str:
        """The whole content of a file (Python callers; agents page with ``read``)."""
        visible = self.path(path)
        if virtual.is_virtual(visible):
            found = virtual.entry(self.fs.store, visible)
            if found is None or found.kind == "dir":
                raise NotFound.at(visible, self._near(visible))
            return found.content or ""
        node = self._require(visible)
        if node.is_dir:
            raise IsADirectory(f"{visible} is a folder")
        with self._lock:
            self.read_versions[node.path] = node.version
        return self.fs.content(node)

    # ------------------------------------------------------------------ permissions
    def _may_write(self, visible: str, what: str, node: Optional[Node] = None) -> None:
        if self.ended:
            raise FsError(f"session {self.id} has ended; open a new one (memory.fs.session(...))")
        if self.system:
            return
        check_agent_write(visible, what)
        target = node if node is not None else self._node(visible)
        if target is not None and "w" not in target.perms:
            raise PermissionDenied(f"cannot {what} {visible}: it is read-only (permissions {target.perms});"
                                   f" write your own copy under /memory/ instead")

    def _expected(self, node: Optional[Node], expected_version: Any) -> Optional[int]:
        """The version a change is based on: the caller's, else the one this session read, else none."""
        if expected_version is not None:
            return _int(expected_version, "expected_version", 0, 0, 10**12)
        if node is None:
            return None
        with self._lock:
            return self.read_versions.get(node.path)

    def _done(self, result: OpResult) -> OpResult:
        """Remember the versions this session now knows; the result in the paths it sees."""
        shown: dict[str, int] = {}
        with self._lock:
            for path, version in result.versions.items():
                if version:
                    self.read_versions[path] = version  # our own write is what we now know
                else:
                    self.read_versions.pop(path, None)
                seen = self.visible(path)
                if seen is not None and not (seen == TMP and not self.system):
                    shown[seen] = version
        return OpResult(result.op_id, shown, result.embedded, result.reused)

    # ------------------------------------------------------------------ writing
    def write(self, path: Any, content: Any, description: Any = None, tags: Any = None,
              expected_version: Any = None, x: Any = None, y: Any = None, z: Any = None, frame_id: Any = None,
              entity_id: Any = None, pin_here: Any = False) -> OpResult:
        """Create or overwrite a file; missing parent folders are made (mkdir -p)."""
        visible = self.path(path)
        text = check_text(content, visible)
        stored = self.stored(visible)
        node = self.fs.node(stored)
        self._may_write(visible, "change" if node is not None else "create", node)
        if node is not None and node.is_dir:
            raise IsADirectory(f"{visible} is a folder; write a file inside it, e.g. {join(visible, 'notes.md')}")
        meta = _meta(description, tags, x, y, z, frame_id, entity_id)
        if pin_here and meta.get("x") is None:
            pose = self.fs.engine.live_pose()
            if pose is None:
                raise FsError("pin_here: the robot's position is not known; give x and y instead")
            meta.update(x=float(pose[0]), y=float(pose[1]), z=float(pose[2]) if len(pose) > 2 else 0.0)
        changes = self.fs.missing_parents(stored, self.agent_id)
        state = self.fs.file_state(stored, text, self.agent_id, meta, node)
        changes.append(Change(stored, state, self._expected(node, expected_version), check_absent=node is None))
        summary = f"wrote {len(text.splitlines())} lines" + (" (new file)" if node is None else "")
        return self._done(self.fs.commit(self, "write", stored, changes, summary=summary,
                                         contents={stored: text}))

    def edit(self, path: Any, old_text: Any, new_text: Any, replace_all: Any = False,
             expected_version: Any = None) -> OpResult:
        """Replace one exact occurrence of ``old_text`` (all of them with ``replace_all``)."""
        visible = self.path(path)
        if not isinstance(old_text, str) or not old_text:
            raise FsError("old_text must be the exact, non-empty text to replace (copy it from fs_read)")
        if not isinstance(new_text, str):
            raise FsError("new_text must be text (empty to delete old_text)")
        node = self._require(visible)
        self._may_write(visible, "change", node)
        if node.is_dir:
            raise IsADirectory(f"{visible} is a folder; edit a file inside it")
        content = self.fs.content(node)
        count = content.count(old_text)
        if count == 0:
            near = closest_line(content, old_text)
            hint = f"; the closest line is {near[0]}: {near[1].strip()[:200]!r}" if near else ""
            raise FsError(f"old_text does not occur in {visible}{hint}. Read the file (fs_read) and copy the text"
                          f" exactly, including spaces")
        if count > 1 and not replace_all:
            first = old_text.splitlines()[0] if old_text.strip() else old_text
            found = [(n, line) for n, line in enumerate(content.splitlines(), 1) if first in line]
            quoted = "; ".join(f"line {n}: {line.strip()[:80]!r}" for n, line in found[:3])
            raise FsError(f"old_text occurs {count} times in {visible} ({quoted}{'; ...' if len(found) > 3 else ''});"
                          f" include more surrounding text so it is unique, or set replace_all")
        updated = check_text(content.replace(old_text, new_text) if replace_all
                             else content.replace(old_text, new_text, 1), visible)
        expected = self._expected(node, expected_version)
        state = self.fs.file_state(node.path, updated, self.agent_id, None, node)
        summary = f"replaced {count if replace_all else 1} occurrence(s)"
        return self._done(self.fs.commit(self, "edit", node.path,
                                         [Change(node.path, state, node.version if expected is None else expected)],
                                         summary=summary, contents={node.path: updated}))

    def mkdir(self, path: Any, description: Any = None, tags: Any = None) -> OpResult:
        visible = self.path(path)
        stored = self.stored(visible)
        node = self.fs.node(stored)
        if node is not None:
            if node.is_dir:
                return OpResult(0, {stored: node.version})
            raise AlreadyExists(f"{visible} is a file; pick another name for the folder")
        self._may_write(visible, "create")
        changes = self.fs.missing_parents(stored, self.agent_id)
        changes.append(Change(stored, self.fs.dir_state(stored, self.agent_id, _meta(description, tags)),
                              check_absent=True))
        return self._done(self.fs.commit(self, "mkdir", stored, changes, summary="made folder"))

    def mv(self, source: Any, destination: Any) -> OpResult:
        src_visible, dst_visible = self.path(source), self.path(destination)
        node = self._require(src_visible)
        self._may_write(src_visible, "move", node)
        dst_node = self._node(dst_visible)
        if dst_node is not None and dst_node.is_dir:
            dst_visible = join(dst_visible, name_of(src_visible))
            dst_node = self._node(dst_visible)
        if dst_node is not None:
            raise AlreadyExists(f"{dst_visible} already exists; remove it first (fs_rm) or pick another name")
        if is_under(dst_visible, src_visible):
            raise FsError(f"cannot move {src_visible} into itself")
        self._may_write(dst_visible, "create")
        src, dst = node.path, self.stored(dst_visible)
        changes = self.fs.missing_parents(dst, self.agent_id)
        changes.append(Change(dst, node.state(), self._expected(node, None) or node.version, from_path=src))
        if node.is_dir:
            for child in tables.descendants(self.fs.store.reader(), src):
                changes.append(Change(dst + child.path[len(src):], child.state(), child.version,
                                      from_path=child.path))
        return self._done(self.fs.commit(self, "mv", src, changes, dest=dst, summary=f"moved to {dst_visible}"))

    def rm(self, path: Any, recursive: Any = False) -> OpResult:
        visible = self.path(path)
        node = self._require(visible)
        self._may_write(visible, "delete", node)
        changes = []
        if node.is_dir:
            inside = tables.descendants(self.fs.store.reader(), node.path)
            if inside and not recursive:
                raise FsError(f"{visible} is a folder holding {len(inside)} item(s); pass recursive=true to"
                              f" delete it with everything inside")
            changes = [Change(child.path, None, child.version) for child in reversed(inside)]
        changes.append(Change(node.path, None, self._expected(node, None) or node.version))
        return self._done(self.fs.commit(self, "rm", node.path, changes,
                                         summary=f"deleted {'folder' if node.is_dir else 'file'}"))

    # ------------------------------------------------------------------ the conversation (the system writes it)
    def set_conversation(self, text: Any) -> OpResult:
        """Store the running conversation as /raw/conversation-history/CURRENT (read-only for the agent)."""
        content = check_text(text, f"{CONVERSATIONS}/{CURRENT}")
        target = self._current if not self.system else f"{CONVERSATIONS}/{CURRENT}"
        node = self.fs.node(target)
        changes = self.fs.missing_parents(target, SYSTEM)
        changes.append(Change(target, self.fs.file_state(target, content, SYSTEM, {
            "description": f"conversation of {self.agent_id}, started {_iso(self.started)}",
            "owner": SYSTEM, "perms": "r--"}, node)))
        return self.fs.commit(None, "conversation", target, changes, summary=f"conversation of session {self.id}",
                              contents={target: content})

    def append_conversation(self, text: Any) -> OpResult:
        node = self.fs.node(self._current)
        before = self.fs.content(node) if node is not None else ""
        return self.set_conversation(before + str(text if text is not None else ""))

    # ------------------------------------------------------------------ ending
    def end(self) -> Optional[str]:
        """Clear this session's /tmp; rename CURRENT to the start time. Returns the conversation's new path."""
        if self.ended or self.system:
            return None
        conn = self.fs.store.reader()
        changes: list[Change] = []
        tmp = tables.node(conn, self._tmp)
        if tmp is not None:
            changes += [Change(child.path, None) for child in reversed(tables.descendants(conn, self._tmp))]
            changes.append(Change(self._tmp, None))
        renamed = None
        current = tables.node(conn, self._current)
        if current is not None:
            renamed = self._free_name(f"{CONVERSATIONS}/{_iso(self.started)}")
            changes.append(Change(renamed, current.state().with_meta(
                description=f"conversation of {self.agent_id}, {_iso(self.started)}"), from_path=current.path))
            changes.append(Change(f"{CONVERSATIONS}/@{self.id}", None))
        if changes:
            self.fs.commit(None, "session-end", self._tmp, changes, summary=f"ended session {self.id}")
        self.ended = True
        self.fs.forget_session(self)
        return renamed

    def _free_name(self, base: str) -> str:
        name, n = base, 2
        while self.fs.node(name) is not None:
            name, n = f"{base}-{n}", n + 1
        return name

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    # ------------------------------------------------------------------ history and search (history.py, search.py)
    def log(self, path: Any = None, limit: Any = 20) -> list[Any]:
        return history.log(self, path, limit)

    def undo(self, n: Any = 1) -> list[OpResult]:
        return history.undo(self, n)

    def restore(self, path: Any, version: Any) -> OpResult:
        return history.restore(self, path, version)

    def diff(self, path: Any, v1: Any, v2: Any = None) -> str:
        return history.diff(self, path, v1, v2)

    def search(self, query: Any = None, path: Any = "/", **filters: Any) -> list[Any]:
        return search_.search(self, query, path, **filters)


def _iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))




def _meta(description: Any = None, tags: Any = None, x: Any = None, y: Any = None, z: Any = None,
          frame_id: Any = None, entity_id: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if description is not None:
        if not isinstance(description, str):
            raise FsError("description must be text")
        meta["description"] = description.strip()[:1000]
    if tags is not None:
        tags = words(tags, "tags must be a list of short words, e.g. ['kitchen', 'door']")
        meta["tags"] = sorted({t.strip().lower() for t in tags if t.strip()})[:32]
    if (x is None) != (y is None):
        raise FsError("give both x and y to pin a note to a place, or neither")
    if x is not None:
        try:
            meta.update(x=float(x), y=float(y), z=float(z) if z is not None else 0.0)
        except (TypeError, ValueError):
            raise FsError(f"x, y and z must be numbers (metres), got {x!r}, {y!r}, {z!r}") from None
        if frame_id is not None:
            meta["frame_id"] = str(frame_id)
    if entity_id is not None:
        if not isinstance(entity_id, str) or not entity_id.strip():
            raise FsError("entity_id must be an entity id such as 'ent-3'")
        meta["entity_id"] = entity_id.strip()
    return meta


def _page(visible: str, version: int, content: str, first: int, count: int) -> ReadResult:
    lines = content.splitlines()
    shown, cut = [], 0
    for line in lines[first - 1:first - 1 + count]:
        if len(line) > LONG_LINE:
            line, cut = line[:LONG_LINE] + f" [... {len(line) - LONG_LINE} more characters cut]", cut + 1
        shown.append(line)
    return ReadResult(visible, version, first, shown, len(lines), cut)


def _ventry(found: virtual.VirtualEntry) -> Entry:
    return Entry(found.path, found.kind, found.description, found.size, 0, found.stamp, SYSTEM, 0, (),
                 "r-x" if found.kind == "dir" else "r--")


__all__ = ["Session", "Entry", "Listing", "ReadResult", "Conflict", "ancestors"]
