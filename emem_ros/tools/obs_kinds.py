"""What a few observations' metadata says about their layer, read once per observation.

``locate`` learns each evidence layer's kind (robot-pose positions, camera
rays, view range) from a sample of its observations' JSON metadata; the same
few observations are sampled call after call, and parsing their JSON was a
large share of a locate. An observation's metadata is written once; only
archival (``reshaped``) clears it and only a delete removes the row, so the
memo is dropped on any commit that reshapes, removes, or rewrites or deletes
observation rows.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from emem_ros.storage.events import Commit
from emem_ros.storage.sqlutil import marks

Kind = tuple[Any, Any, Any]
"""(json position_source, json type of ray, json view_range), as SQLite returns them."""
MAX_KEPT = 50_000


class ObservationKinds:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[int, Kind] = {}

    def get(self, conn: Any, ids: Sequence[int]) -> dict[int, Kind]:
        """id -> kind of the ids whose row exists (what the SELECT below returns, keyed by id)."""
        with self._lock:
            known: dict[int, Kind] = {i: self._known[i] for i in ids if i in self._known}
        missing = [i for i in ids if i not in known]
        if missing:  # rows not found are not remembered: an id may be allocated before its row is written
            found: dict[int, Kind] = {}
            for obs, source, ray, view_range in conn.execute(
                    f"SELECT id, json_extract(metadata, '$.position_source'), json_type(metadata, '$.ray'),"
                    f" json_extract(metadata, '$.view_range') FROM observations WHERE id IN ({marks(len(missing))})",
                    list(missing)):
                found[obs] = (source, ray, view_range)
            known.update(found)
            with self._lock:
                if len(self._known) + len(found) > MAX_KEPT:
                    self._known.clear()
                self._known.update(found)
        return known

    def clear(self) -> None:
        with self._lock:
            self._known.clear()

    def on_commit(self, commit: Commit) -> None:
        if commit.reshaped or commit.removed_texts or commit.removed_places or _rewrites(commit):
            self.clear()


def _rewrites(commit: Commit) -> bool:
    """The commit may have changed or removed an observation's metadata (unknown statements: assume so)."""
    if commit.statements is None:
        return True
    for sql, _, _ in commit.statements:
        head = sql.lstrip()[:64].upper()
        if head.startswith(("DELETE FROM OBSERVATIONS", "REPLACE INTO OBSERVATIONS", "INSERT OR REPLACE INTO OBSERVATIONS")):
            return True
        if head.startswith("UPDATE OBSERVATIONS") and "METADATA" in sql.upper():
            return True
    return False
