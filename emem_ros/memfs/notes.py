"""Notes tied to the robot: files pinned to a place or an entity show up where the robot is.

``recall`` and ``get_current_context`` ask here for the notes pinned near a
position (or to the entities they found) and list them, marked as notes, so
a planner arriving in the kitchen reads "the door sticks, push twice"
without searching for it. Only agents' own and shared notes count
(/memory and /mnt), not scratch files or system records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Optional

import emem_ros.memfs.tables as tables
from emem_ros.memfs.records import NODE_COLUMNS, Node
from emem_ros.storage.sqlutil import marks

if TYPE_CHECKING:
    from emem_ros.storage.store import MemoryStore

SHARED = ("/memory/", "/mnt/")
LIMIT = 5
PER_ENTITY = 20
"""Notes read at most per entity."""


@dataclass(frozen=True)
class PinnedNote:
    path: str
    description: str
    first_line: str
    distance: Optional[float]
    entity_id: Optional[str]
    owner: str

    def __str__(self) -> str:
        where = f"{self.distance:.1f} m away" if self.distance is not None else f"about {self.entity_id}"
        text = self.description or self.first_line
        return f"{self.path} ({where}, by {self.owner}): {text}"


def pinned_near(store: "MemoryStore", position: Optional[tuple[float, ...]], radius: float,
                entity_ids: Iterable[str] = (), limit: int = LIMIT) -> list[PinnedNote]:
    """Notes pinned within ``radius`` of ``position`` or to one of ``entity_ids``, nearest first."""
    conn = store.reader()
    found: dict[str, PinnedNote] = {}
    if position is not None:
        x, y = float(position[0]), float(position[1])
        rows = conn.execute(
            f"SELECT {NODE_COLUMNS} FROM fs_nodes WHERE x BETWEEN ? AND ? AND y BETWEEN ? AND ? AND kind = 'file'",
            (x - radius, x + radius, y - radius, y + radius)).fetchall()
        for row in rows:
            node = Node.from_row(row)
            if not node.path.startswith(SHARED) or node.place is None:
                continue
            d = math.hypot(node.place[0] - x, node.place[1] - y)
            if d <= radius:
                found[node.path] = _note(store, node, round(d, 2))
    ids = list(dict.fromkeys([e for e in entity_ids if e][:20]))
    if ids:
        # One statement for every entity (rows by entity, then id: the entity index's order), then at
        # most PER_ENTITY of each, in the order the entities were given.
        per: dict[str, list[Any]] = {}
        for row in conn.execute(f"SELECT {NODE_COLUMNS} FROM fs_nodes WHERE entity_id IN ({marks(len(ids))})"
                                " AND kind = 'file' ORDER BY entity_id, id", ids):
            mine = per.setdefault(row[-1], [])
            if len(mine) < PER_ENTITY:
                mine.append(row)
        for entity in ids:
            for row in per.get(entity, ()):
                node = Node.from_row(row)
                if node.path.startswith(SHARED) and node.path not in found:
                    found[node.path] = _note(store, node, None)
    notes = sorted(found.values(), key=lambda n: (n.distance is None, n.distance or 0.0, n.path))
    return notes[:limit]


def _note(store: "MemoryStore", node: Node, distance: Optional[float]) -> PinnedNote:
    content = tables.blob(store.reader(), node.blob) if not node.description else ""
    first = next((line.strip() for line in content.splitlines() if line.strip()), "")
    return PinnedNote(node.path, node.description, first[:200], distance, node.entity_id, node.owner)
