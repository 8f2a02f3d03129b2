"""MemFS storage core: one operation = one write transaction of node changes, each a new version.

Every change (write, edit, mkdir, mv, rm, undo, restore) is expressed as a
list of ``Change``s: a path moving to a new state (or deleted). ``commit``
prepares the vectors outside the writer lock (reusing stored ones by chunk
hash, embedding only what is new), then in one transaction checks that
every path still has the version the caller based the change on (two agents
on one file: the later one gets ``Conflict``), applies the changes, records
the operation and one version per path, and afterwards tells the vector
indexes. Paths here are stored paths; sessions (``session.py``) translate the
paths agents see and enforce the layout.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

import emem_ros.memfs.tables as tables
from emem_ros.memfs.chunks import Chunk, content_hash, split
from emem_ros.memfs.errors import AlreadyExists, Conflict, FsError, NotText, TooLarge
from emem_ros.memfs.layout import AGENTS_MD, AGENTS_TEXT, SYSTEM, SYSTEM_FOLDERS, default_perms
from emem_ros.memfs.paths import ancestors, name_of, normalise
from emem_ros.memfs.records import Change, Node, NodeState, OpResult
from emem_ros.storage import codec

if TYPE_CHECKING:
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 1024 * 1024
"""A file is at most 1 MiB of UTF-8 text: notes, not datasets (those belong in /raw/artifacts outside MemFS)."""


@dataclass
class _Prepared:
    """What a change needs that is computed before the transaction: chunks and vectors."""

    chunks: list[Chunk] = field(default_factory=list)
    content: Optional[str] = None
    vectors: dict[str, bytes] = field(default_factory=dict)
    description_vector: Optional[bytes] = None


def check_text(content: Any, path: str) -> str:
    """The content as text, or a clear refusal (binary, NUL bytes, over the limit)."""
    if isinstance(content, (bytes, bytearray, memoryview)):
        raw = bytes(content)
        if len(raw) > MAX_FILE_BYTES:
            raise TooLarge(f"{path}: {len(raw)} bytes is over the limit of {MAX_FILE_BYTES} bytes (1 MiB) per file;"
                           f" split it into several files")
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise NotText(f"{path}: the content is binary (not UTF-8 text); MemFS holds text notes only") from None
    if not isinstance(content, str):
        raise FsError(f"{path}: content must be text, got {type(content).__name__}")
    if "\x00" in content:
        raise NotText(f"{path}: the content holds NUL bytes (binary data); MemFS holds text notes only")
    size = len(content.encode("utf-8", errors="surrogatepass"))
    if size > MAX_FILE_BYTES:
        raise TooLarge(f"{path}: {size} bytes is over the limit of {MAX_FILE_BYTES} bytes (1 MiB) per file;"
                       f" split it into several files")
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        raise NotText(f"{path}: the content is not valid text (lone surrogates)") from None
    return content


def description_text(path: str, description: str) -> str:
    """What a node's vector encodes (``VECTOR_TABLES['fs_nodes']`` says the same in SQL)."""
    return f"{name_of(path)}: {description}"


class FsCore:
    """The filesystem's storage side over one memory's engine (``MemFS`` adds the sessions)."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine
        self.store = engine.store
        self._accessed: dict[str, float] = {}
        self.df_cache: dict[tuple[str, str], int] = {}
        self.generation = 0
        """Commits to the store seen: cached search scopes are valid within one generation."""
        self.df_generation = 0
        self.scope_cache: dict[tuple[str, int], Any] = {}
        self.store.commits.subscribe(self._on_commit)
        """Common words per FTS table (``search.py``): counting one reads its whole posting list."""
        self.last_embedded = 0
        self.closed = False
        self.ensure_layout()

    # ------------------------------------------------------------------ reading (stored paths)
    def node(self, path: str) -> Optional[Node]:
        return tables.node(self.store.reader(), path)

    def content(self, node: Node) -> str:
        return tables.blob(self.store.reader(), node.blob)

    def touch(self, path: str) -> None:
        """Remember a read; access times are written with the next write (a read is not a transaction)."""
        self._accessed[path] = self.engine.now()

    # ------------------------------------------------------------------ the layout
    def ensure_layout(self) -> None:
        """Create the fixed folders and /AGENTS.md when missing or outdated (one system operation)."""
        conn = self.store.reader()
        changes = [Change(p, self.dir_state(p, SYSTEM)) for p in SYSTEM_FOLDERS if tables.node(conn, p) is None]
        agents = tables.node(conn, AGENTS_MD)
        if agents is None or tables.blob(conn, agents.blob) != AGENTS_TEXT:
            changes.append(Change(AGENTS_MD, self.file_state(AGENTS_MD, AGENTS_TEXT, SYSTEM, {
                "description": "How to use this filesystem: the folders, the tools, good habits.",
                "tags": ["guide"]}, agents)))
        if changes:
            self.commit(None, "layout", "/", changes, summary="created the fixed layout",
                        contents={AGENTS_MD: AGENTS_TEXT})

    def mount(self, name: str, description: str = "") -> str:
        """Make the shared folder /mnt/<name> (read-write for every agent); returns its path."""
        path = normalise(f"/mnt/{name}")
        if path.count("/") != 2 or "@" in path:
            raise FsError(f"a mount is one folder name under /mnt, got {name!r}")
        if self.node(path) is None:
            self.commit(None, "mount", path, [Change(path, self.dir_state(path, SYSTEM, {
                "description": description or f"shared folder {name}", "perms": "rwx"}))],
                summary=f"mounted {path}")
        return path

    # ------------------------------------------------------------------ states
    def dir_state(self, path: str, owner: str, meta: Optional[dict[str, Any]] = None) -> NodeState:
        base = {"description": "", "tags": [], "perms": default_perms(path, "dir"), "owner": owner}
        return NodeState("dir", None, {**base, **(meta or {})})

    def file_state(self, path: str, content: str, owner: str, meta: Optional[dict[str, Any]] = None,
                   current: Optional[Node] = None) -> NodeState:
        """A file state holding ``content``; metadata not given is kept from ``current``."""
        base = current.state().meta if current is not None and not current.is_dir else {
            "description": "", "tags": [], "perms": default_perms(path, "file"), "owner": owner}
        merged = {**base, **{k: v for k, v in (meta or {}).items() if v is not None}}
        return NodeState("file", content_hash(content), merged)

    def missing_parents(self, path: str, owner: str) -> list[Change]:
        """``mkdir -p``: folder changes for the ancestors of ``path`` that do not exist yet."""
        conn = self.store.reader()
        out = []
        for folder in ancestors(path):
            found = tables.node(conn, folder)
            if found is None:
                out.append(Change(folder, self.dir_state(folder, owner), check_absent=True))
            elif not found.is_dir:
                raise FsError(f"{folder} is a file, so nothing can be created inside it; pick another folder")
        return out

    # ------------------------------------------------------------------ writing
    def commit(self, session: Optional[Any], op: str, path: str, changes: list[Change],
               dest: Optional[str] = None, summary: str = "", undo_of: Optional[int] = None,
               contents: Optional[dict[str, str]] = None) -> OpResult:
        """Apply ``changes`` as one operation (one transaction); raises Conflict when a path moved on.

        ``session``: the agent's (its ``agent_id`` and ``id`` are recorded), None for the system.
        """
        if self.closed:
            raise FsError("the filesystem is closed")
        contents = dict(contents or {})
        prepared, embedded, reused = self._prepare(changes, contents)
        agent = session.agent_id if session is not None else SYSTEM
        place = self._robot_xy()
        added_chunks: list[tuple[int, bytes]] = []
        removed_chunks: list[int] = []
        node_vectors: list[tuple[int, Optional[bytes]]] = []
        versions: dict[str, int] = {}
        stamp = self.engine.now()
        with self.store.write() as conn:
            self._flush_accessed(conn)
            currents = self._check(conn, changes)
            op_id = tables.add_op(conn, stamp, agent, session.id if session is not None else None, op, path, dest,
                                  summary, undo_of, place)
            for change, prep in zip(changes, prepared):
                current = currents[change.from_path or change.path]
                version = tables.next_version(conn, change.path)
                if change.from_path is not None:  # the old path ends here
                    tables.add_version(conn, op_id, change.from_path, tables.next_version(conn, change.from_path),
                                       None)
                    versions[change.from_path] = 0
                if change.state is None:
                    if current is not None:
                        removed_chunks += tables.delete_node(conn, current.id)
                        node_vectors.append((current.id, None))
                    tables.add_version(conn, op_id, change.path, version, None)
                    versions[change.path] = 0
                    continue
                self._apply(conn, change, current, prep, version, stamp, added_chunks, removed_chunks,
                            node_vectors)
                tables.add_version(conn, op_id, change.path, version, change.state)
                versions[change.path] = version
        self._index(added_chunks, removed_chunks, node_vectors)
        self.last_embedded = embedded
        return OpResult(op_id, versions, embedded, reused)

    def _check(self, conn: Any, changes: list[Change]) -> dict[str, Optional[Node]]:
        """Inside the transaction: every path is still at the version the change was based on."""
        currents: dict[str, Optional[Node]] = {}
        for change in changes:
            key = change.from_path or change.path
            current = tables.node(conn, key)
            currents[key] = current
            if change.check_absent and current is not None:
                if change.state is not None and change.state.kind == "dir" and current.is_dir:
                    continue
                if current.is_dir:
                    raise AlreadyExists(f"{change.path} is a folder now; pick another name")
                raise Conflict(f"{change.path} was created by {self._last_writer(conn, change.path)} meanwhile."
                               f" Nothing was written; read it (fs_read) and merge your text into it")
            if change.from_path is not None and tables.node(conn, change.path) is not None:
                raise AlreadyExists(f"{change.path} already exists; remove it first or pick another name")
            if change.expected is not None:
                have = current.version if current is not None else 0
                if have != change.expected:
                    raise Conflict(self._conflict_message(conn, key, change.expected, have))
        return currents

    @staticmethod
    def _last_writer(conn: Any, path: str) -> str:
        row = conn.execute("SELECT o.agent FROM fs_versions v JOIN fs_ops o ON o.id = v.op_id WHERE v.path = ?"
                           " ORDER BY v.version DESC LIMIT 1", (path,)).fetchone()
        return str(row[0]) if row else "someone else"

    @staticmethod
    def _conflict_message(conn: Any, path: str, expected: int, have: int) -> str:
        row = conn.execute("SELECT o.agent, o.stamp, o.op FROM fs_versions v JOIN fs_ops o ON o.id = v.op_id"
                           " WHERE v.path = ? ORDER BY v.version DESC LIMIT 1", (path,)).fetchone()
        who = f" ({row[2]} by {row[0]})" if row else ""
        now = f"version {have}" if have else "deleted"
        return (f"{path} changed since you read it: you read version {expected}, it is now {now}{who}. "
                f"Nothing was written; read it again (fs_read) and redo your change on the new content.")

    def _apply(self, conn: Any, change: Change, current: Optional[Node], prep: _Prepared, version: int,
               stamp: float, added: list[tuple[int, bytes]], removed: list[int],
               node_vectors: list[tuple[int, Optional[bytes]]]) -> None:
        state = change.state
        assert state is not None
        if current is not None and current.kind != state.kind:  # a file replaced by a folder, or back
            removed += tables.delete_node(conn, current.id)
            node_vectors.append((current.id, None))
            current = None
        description = str(state.meta.get("description") or "")
        keep = (current is not None and current.description == description
                and name_of(current.path) == name_of(change.path))
        content = prep.content or ""
        if state.kind == "file":
            assert state.blob is not None
            tables.put_blob(conn, state.blob, content)
        node_id = tables.upsert_node(conn, change, current, version, stamp,
                                     len(content.encode("utf-8")) if state.kind == "file" else 0,
                                     len(content.splitlines()) if state.kind == "file" else 0,
                                     prep.description_vector, keep)
        if not keep:
            if current is not None:
                node_vectors.append((node_id, None))
            if prep.description_vector is not None:
                node_vectors.append((node_id, prep.description_vector))
        if state.kind != "file":
            return
        if current is not None and current.blob == state.blob:
            return  # same content (a rename, a metadata change): the chunks stay
        old = tables.node_chunks(conn, node_id) if current is not None else []
        by_hash: dict[str, list[tuple[int, int, int]]] = {}
        for chunk_id, start, end, digest in old:
            by_hash.setdefault(digest, []).append((chunk_id, start, end))
        fresh: list[tuple[int, int, str, str, Optional[bytes]]] = []
        for chunk in prep.chunks:
            kept = by_hash.get(chunk.hash)
            if kept:
                chunk_id, start, end = kept.pop(0)
                if (start, end) != (chunk.start, chunk.end):
                    conn.execute("UPDATE fs_chunks SET start_line = ?, end_line = ? WHERE id = ?",
                                 (chunk.start, chunk.end, chunk_id))
                continue
            fresh.append((chunk.start, chunk.end, chunk.hash, chunk.text, prep.vectors.get(chunk.hash)))
        gone = [chunk_id for rows in by_hash.values() for chunk_id, _, _ in rows]
        for chunk_id in gone:
            conn.execute("DELETE FROM fs_chunks WHERE id = ?", (chunk_id,))
        removed += gone
        ids = tables.insert_chunks(conn, node_id, fresh)
        added += [(chunk_id, row[4]) for chunk_id, row in zip(ids, fresh) if row[4] is not None]

    def _prepare(self, changes: list[Change], contents: dict[str, str]) -> tuple[list[_Prepared], int, int]:
        """Chunks and vectors for the new states, before the writer lock (embedding is the slow part)."""
        conn = self.store.reader()
        prepared: list[_Prepared] = []
        for change in changes:
            prep = _Prepared()
            state = change.state
            if state is not None and state.kind == "file":
                content = contents.get(change.path)
                if content is None:
                    content = tables.blob(conn, state.blob)
                prep.content = content
                current = tables.node(conn, change.from_path or change.path)
                if current is None or current.blob != state.blob:
                    prep.chunks = split(content)
            prepared.append(prep)
        hashes = [c.hash for p in prepared for c in p.chunks]
        known = tables.stored_vectors(conn, hashes)
        missing = list(dict.fromkeys(c for p in prepared for c in p.chunks if c.hash not in known))
        unique: dict[str, Chunk] = {}
        for chunk in missing:
            unique.setdefault(chunk.hash, chunk)
        descriptions: list[tuple[_Prepared, str]] = []
        for change, prep in zip(changes, prepared):
            if change.state is None:
                continue
            description = str(change.state.meta.get("description") or "").strip()
            current = tables.node(conn, change.from_path or change.path)
            if description and not (current is not None and current.description == description
                                    and name_of(current.path) == name_of(change.path)):
                descriptions.append((prep, description_text(change.path, description)))
        texts = [c.text for c in unique.values()] + [t for _, t in descriptions]
        embedded = 0
        if texts:
            vectors = self.engine.embedding.embed_texts(texts)
            embedded = len(texts)
            for digest, vector in zip(unique, vectors[:len(unique)]):
                known[digest] = codec.vector_to_blob(vector)
            for (prep, _), vector in zip(descriptions, vectors[len(unique):]):
                prep.description_vector = codec.vector_to_blob(vector)
        for prep in prepared:
            prep.vectors = {c.hash: known[c.hash] for c in prep.chunks if c.hash in known}
        reused = len(hashes) - len(unique)
        return prepared, embedded, reused

    def _index(self, added: list[tuple[int, bytes]], removed: list[int],
               node_vectors: list[tuple[int, Optional[bytes]]]) -> None:
        """After COMMIT: the vector indexes follow (a failure marks them stale; never fails the write)."""
        store = self.store
        dim = store.dim
        if removed:
            store.update_index("fs_chunks", lambda: store.vectors["fs_chunks"].remove(removed))
        if added:
            ids = np.array([i for i, _ in added], dtype=np.int64)
            vectors = np.stack([codec.blob_to_vector(b, dim) for _, b in added])
            store.update_index("fs_chunks", lambda: store.vectors["fs_chunks"].add(ids, vectors))
        nodes = store.vectors["fs_nodes"]
        for node_id, blob in node_vectors:
            if blob is None:
                store.update_index("fs_nodes", functools.partial(nodes.remove, [node_id]))
            else:
                vector = codec.blob_to_vector(blob, dim).reshape(1, -1)
                store.update_index("fs_nodes", functools.partial(nodes.add, np.array([node_id], dtype=np.int64),
                                                                 vector))

    def _on_commit(self, commit: Any) -> None:
        self.generation += 1  # any writer (an import, another FsCore) may have changed the tree

    def _robot_xy(self) -> Optional[tuple[float, float]]:
        try:
            pose = self.engine.live_pose()
        except Exception:  # a pose source that fails never fails a write
            return None
        if pose is None:
            return None
        try:
            return (float(pose[0]), float(pose[1]))
        except (TypeError, ValueError, IndexError):
            return None

    def _flush_accessed(self, conn: Any) -> None:
        if self._accessed:
            pending, self._accessed = self._accessed, {}
            conn.executemany("UPDATE fs_nodes SET accessed = ? WHERE path = ? AND accessed < ?",
                             [(stamp, path, stamp) for path, stamp in pending.items()])

    # ------------------------------------------------------------------ lifecycle
    def forget_session(self, session: Any) -> None:
        """A session ended (``MemFS`` keeps the list of open ones)."""

    def close(self) -> None:
        """Write pending access times. Safe twice."""
        if self.closed:
            return
        self.store.commits.unsubscribe(self._on_commit)
        if self._accessed and not self.store.closed:
            try:
                with self.store.write() as conn:
                    self._flush_accessed(conn)
            except Exception:
                log.exception("could not store MemFS access times at close")
        self.closed = True
