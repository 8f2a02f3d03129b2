"""Which episode an observation belongs to and whether it is archived, read once per observation.

Every "what is near here" answer shows, for each hit, its newest
observation's episode and skips it when that observation is archived; the
same few dozen observations are shown call after call (a place's newest
sighting changes only when the robot sees the thing again). An
observation's episode and tier change only through archival (``reshaped``),
an UPDATE of the observations table, or a delete, so the memo is dropped on
any commit that reshapes, removes places or texts, or updates, replaces or
deletes observation rows (unknown statements count as such).
"""

from __future__ import annotations

import re
import threading
from typing import Any, Optional, Sequence

from emem_ros.storage.events import Commit
from emem_ros.storage.sqlutil import chunked, marks

Ref = tuple[Optional[int], str]
"""(episode_id, tier), as SQLite returns them."""
MAX_KEPT = 50_000


class ObservationRefs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[int, Ref] = {}
        self._generation = 0

    def get(self, conn: Any, ids: Sequence[int]) -> dict[int, Ref]:
        """id -> (episode_id, tier) of the ids whose row exists, like ``SELECT id, episode_id, tier ...``."""
        with self._lock:
            generation = self._generation
            known: dict[int, Ref] = {i: self._known[i] for i in ids if i in self._known}
        missing = list(dict.fromkeys(i for i in ids if i not in known))
        if missing:  # rows not found are not remembered: an id may be allocated before its row is written
            found: dict[int, Ref] = {}
            for chunk in chunked(missing, 900):
                for obs, episode, tier in conn.execute(
                        f"SELECT id, episode_id, tier FROM observations WHERE id IN ({marks(len(chunk))})", chunk):
                    found[obs] = (episode, tier)
            known.update(found)
            with self._lock:
                if self._generation == generation:  # no commit dropped the memo while these were read
                    if len(self._known) + len(found) > MAX_KEPT:
                        self._known.clear()
                    self._known.update(found)
        return known

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._known.clear()

    def on_commit(self, commit: Commit) -> None:
        if commit.reshaped or commit.removed_texts or commit.removed_places or _changes_observations(commit):
            self.clear()


def _changes_observations(commit: Commit) -> bool:
    """The commit may have changed or removed observation rows (its statements unknown: assume so)."""
    if commit.statements is None:
        return True
    return any(_CHANGES.match(sql) for sql, _, _ in commit.statements)


_CHANGES = re.compile(r"^\s*(?:DELETE\s+FROM|REPLACE\s+INTO|INSERT\s+OR\s+REPLACE\s+INTO|UPDATE(?:\s+OR\s+\w+)?)"
                      r"\s+(?:main\.)?observations\b", re.IGNORECASE)
