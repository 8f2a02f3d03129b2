"""MemFS rows as Python values: a node (the current tree) and a node's state (one version of it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

NODE_COLUMNS = ("id, path, parent, name, kind, blob, size, lines, perms, owner, description, tags, version,"
                " created, modified, accessed, x, y, z, frame_id, entity_id")


@dataclass(frozen=True)
class Node:
    id: int
    path: str
    parent: str
    name: str
    kind: str
    """'file' or 'dir'."""
    blob: Optional[str]
    size: int
    lines: int
    perms: str
    owner: str
    description: str
    tags: tuple[str, ...]
    version: int
    created: float
    modified: float
    accessed: float
    x: Optional[float] = None
    y: Optional[float] = None
    z: Optional[float] = None
    frame_id: Optional[str] = None
    entity_id: Optional[str] = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> "Node":
        values = list(row)
        values[11] = tuple(json.loads(values[11] or "[]"))
        return cls(*values)

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"

    @property
    def place(self) -> Optional[tuple[float, float, float]]:
        if self.x is None or self.y is None:
            return None
        return (self.x, self.y, self.z or 0.0)

    def state(self) -> "NodeState":
        return NodeState(self.kind, self.blob, {
            "description": self.description, "tags": list(self.tags), "perms": self.perms, "owner": self.owner,
            "created": self.created, "x": self.x, "y": self.y, "z": self.z, "frame_id": self.frame_id,
            "entity_id": self.entity_id})


@dataclass(frozen=True)
class NodeState:
    """What a path holds at one version (None stands for 'absent' where a state is optional)."""

    kind: str
    blob: Optional[str]
    meta: dict[str, Any] = field(default_factory=dict)

    def meta_json(self) -> str:
        return json.dumps(self.meta, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_row(cls, kind: Optional[str], blob: Optional[str], meta: Optional[str]) -> Optional["NodeState"]:
        if kind is None:
            return None
        return cls(kind, blob, json.loads(meta or "{}"))

    def with_meta(self, **changes: Any) -> "NodeState":
        return NodeState(self.kind, self.blob, {**self.meta, **changes})


@dataclass(frozen=True)
class Change:
    """One path's move to a new state inside an operation."""

    path: str
    state: Optional[NodeState]
    """None: the path is deleted."""
    expected: Optional[int] = None
    """The version the caller based this on (checked in the write transaction); None: not checked."""
    from_path: Optional[str] = None
    """A rename: the node at ``from_path`` moves here (keeping its chunks)."""
    check_absent: bool = False
    """The path must not exist (a create that must not overwrite)."""


@dataclass(frozen=True)
class OpResult:
    op_id: int
    versions: dict[str, int]
    """path -> the version it has now (0: deleted)."""
    embedded: int = 0
    """Chunks (and descriptions) embedded by this operation (the rest were reused by content hash)."""
    reused: int = 0


@dataclass(frozen=True)
class LogEntry:
    op_id: int
    stamp: float
    agent: str
    session: Optional[str]
    op: str
    path: str
    dest: Optional[str]
    summary: str
    undo_of: Optional[int]
    undone_by: Optional[int]
    version: Optional[int] = None
