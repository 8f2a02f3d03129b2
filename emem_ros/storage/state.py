"""What the store's parts share, in one explicit object instead of private attributes spread over mixins.

``MemoryStore`` is assembled from focused parts (transactions, model check,
derived indexes, the ingest write path, reads, the graph); each reads and
writes only what is declared here, so a reader can see in one place what a
write path may touch.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

from emem_ros.storage.events import Announcement
from emem_ros.storage.logcodec import Statement
from emem_ros.storage.writer_lock import WriterLock


class TextCache:
    """LRU of text -> (text id, has vector): a repeated string costs a dict lookup."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[str, tuple[int, bool]] = OrderedDict()

    def get(self, text: str) -> Optional[tuple[int, bool]]:
        item = self._items.get(text)
        if item is not None:
            self._items.move_to_end(text)
        return item

    def put(self, text: str, text_id: int, has_vector: bool) -> None:
        self._items[text] = (text_id, has_vector)
        self._items.move_to_end(text)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def discard(self, text: str) -> None:
        self._items.pop(text, None)

    def clear(self) -> None:
        self._items.clear()


class ObservationIds:
    """Observation ids handed out at ``add`` (before storing) and the highest id stored so far."""

    def __init__(self, max_stored: int) -> None:
        self._lock = threading.Lock()
        self._next = max_stored + 1
        self.max_stored = max_stored

    def allocate(self) -> int:
        with self._lock:
            value = self._next
            self._next += 1
            return value

    def stored(self, highest: int) -> None:
        """A batch with ids up to ``highest`` was written."""
        with self._lock:
            self.max_stored = max(self.max_stored, highest)


@dataclass
class StoreState:
    conn: sqlite3.Connection
    """The one writer connection (readers have their own: ``MemoryStore.reader``)."""
    write_lock: WriterLock
    """Held by every write transaction and by the derived-index updates after it (holds timed per caller)."""
    text_cache: TextCache
    ids: ObservationIds = field(default_factory=lambda: ObservationIds(0))
    deferred: list[tuple[int, list[Statement]]] = field(default_factory=list)
    """Transactions in the operation log, not yet applied to SQLite (``write_deferred``)."""
    announced: Announcement = field(default_factory=Announcement)
    """What the open transaction removed, published after its COMMIT."""
    stale: set[str] = field(default_factory=set)
    """Derived indexes that missed committed rows; repaired from SQLite."""
    save_warned: bool = False
    closed: bool = False
    commits_begun: int = 0
    """Write transactions that reached COMMIT (counted just before it, under the writer lock)."""
    commits_published: int = 0
    """Of those, how many were published to subscribers (or rolled back): see ``wait_published``."""
    committed: Callable[[], None] = lambda: None
    """Called after each COMMIT, under the writer lock: the WAL checkpointer's wake-up (``WalCheckpointer.wake``)."""
