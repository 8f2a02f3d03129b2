"""MemFS in export files: the current tree (not its history) as ``fsnode`` records, merged back by path.

An export carries every folder and file agents can see (session-private
``@`` folders are left out) with content and metadata; vectors are not
carried (chunks are re-embedded on import, reusing stored ones by content
hash). Importing adds missing paths, leaves equal ones, and writes a new
version where the export's content differs and is newer; all in one
operation by ``system`` (``import``), so it can be undone and shows in the log.
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Optional

import emem_ros.memfs.tables as tables
from emem_ros.memfs.chunks import content_hash
from emem_ros.memfs.layout import SYSTEM
from emem_ros.memfs.paths import ancestors
from emem_ros.memfs.records import Change, NodeState

if TYPE_CHECKING:
    from emem_ros.engine import Engine

FIELDS: dict[str, tuple[Any, bool]] = {
    "path": (str, False), "kind": (str, False), "content": (str, True), "description": (str, False),
    "tags": ("json", False), "perms": (str, False), "owner": (str, False), "created": ((int, float), False),
    "modified": ((int, float), False), "x": ((int, float), True), "y": ((int, float), True),
    "z": ((int, float), True), "frame_id": (str, True), "entity_id": (str, True)}


def export_nodes(conn: sqlite3.Connection, write: Callable[[dict[str, Any]], None], since: Optional[float] = None,
                 until: Optional[float] = None) -> int:
    """Write one ``fsnode`` record per visible node (modified within the range, when one is given)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'fs_nodes'").fetchone():
        return 0
    count = 0
    for row in conn.execute(
            "SELECT n.path, n.kind, b.content, n.description, n.tags, n.perms, n.owner, n.created, n.modified,"
            " n.x, n.y, n.z, n.frame_id, n.entity_id FROM fs_nodes n LEFT JOIN fs_blobs b ON b.hash = n.blob"
            " ORDER BY n.path"):
        path = row[0]
        if "/@" in path or path == "/":
            continue
        if row[1] == "file" and ((since is not None and row[8] < since) or (until is not None and row[8] > until)):
            continue
        write(dict(zip(("path", "kind", "content", "description", "tags", "perms", "owner", "created", "modified",
                        "x", "y", "z", "frame_id", "entity_id"), row), t="fsnode"))
        count += 1
    return count


def import_nodes(engine: "Engine", records: list[dict[str, Any]], fs: Any = None) -> tuple[int, int, int]:
    """Merge ``fsnode`` records; returns (added, already there, updated)."""
    from emem_ros.memfs.core import FsCore

    memfs = fs if fs is not None else FsCore(engine)
    conn = engine.store.reader()
    changes: list[Change] = []
    contents: dict[str, str] = {}
    added = existing = updated = 0
    planned: set[str] = set()
    for r in sorted(records, key=lambda r: (r["path"].count("/"), r["path"])):
        meta = {"description": r["description"], "tags": json.loads(r["tags"]), "perms": r["perms"],
                "owner": r["owner"], "created": r["created"], "x": r.get("x"), "y": r.get("y"), "z": r.get("z"),
                "frame_id": r.get("frame_id"), "entity_id": r.get("entity_id")}
        current = tables.node(conn, r["path"])
        for folder in ancestors(r["path"]):  # a partial export may lack a parent
            if folder not in planned and tables.node(conn, folder) is None:
                changes.append(Change(folder, memfs.dir_state(folder, SYSTEM)))
                planned.add(folder)
        if r["path"] in planned:
            continue
        planned.add(r["path"])
        if r["kind"] == "dir":
            if current is None:
                changes.append(Change(r["path"], NodeState("dir", None, meta)))
                added += 1
            else:
                existing += 1
            continue
        content = r.get("content") or ""
        digest = content_hash(content)
        if current is not None and (current.blob == digest or current.modified >= r["modified"]):
            existing += 1
            continue
        changes.append(Change(r["path"], NodeState("file", digest, meta), current.version if current else 0))
        contents[r["path"]] = content
        if current is None:
            added += 1
        else:
            updated += 1
    try:
        if changes:
            memfs.commit(None, "import", "/", changes, summary=f"imported {added} new, {updated} updated",
                         contents=contents)
    finally:
        if fs is None:
            memfs.close()
    return added, existing, updated
