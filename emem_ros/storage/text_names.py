"""id -> text for the texts the tools name in their answers, read from SQLite once per text.

Every answer names its hits, and the same few hundred texts are named again
and again: a ``SELECT id, text FROM texts WHERE id IN (..)`` per call costs
more than the dict lookups that replace it. A text row never changes its
string and its id is never reused (``AUTOINCREMENT``), so a name once read
stays right for as long as the row lives. Deleted rows and rewritten tables
reach it through the store's commits (``on_commit``).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Callable, Iterable

from emem_ros.storage.events import Commit
from emem_ros.storage.sqlutil import chunked, marks

MAX_NAMES = 200_000
"""Names held at most (a stream of unique texts would grow the memo without bound): then it starts over."""


class TextNames:
    def __init__(self, reader: Callable[[], sqlite3.Connection], capacity: int = MAX_NAMES) -> None:
        self._reader = reader
        self._capacity = capacity
        self._lock = threading.Lock()
        self._names: dict[int, str] = {}

    def get(self, text_ids: Iterable[int]) -> dict[int, str]:
        """The texts of these ids that exist (missing ids are left out), like the SQL lookup."""
        names = self._names
        out: dict[int, str] = {}
        missing: list[int] = []
        for text_id in text_ids:
            text = names.get(text_id)
            if text is None:
                missing.append(text_id)
            else:
                out[text_id] = text
        if missing:
            found: dict[int, str] = {}
            for chunk in chunked(list(dict.fromkeys(missing)), 900):
                found.update(self._reader().execute(f"SELECT id, text FROM texts WHERE id IN ({marks(len(chunk))})",
                                                    chunk))
            out.update(found)
            with self._lock:
                if len(self._names) + len(found) > self._capacity:
                    self._names = {}
                self._names.update(found)
        return out

    def on_commit(self, commit: Commit) -> None:
        if commit.reshaped:
            self.clear()
        elif commit.removed_texts:
            self.forget(text_id for text_id, _ in commit.removed_texts)

    def forget(self, text_ids: Iterable[int]) -> None:
        """These rows were deleted."""
        with self._lock:
            for text_id in text_ids:
                self._names.pop(text_id, None)

    def clear(self) -> None:
        with self._lock:
            self._names = {}
