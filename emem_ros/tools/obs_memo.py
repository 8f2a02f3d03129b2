"""A few columns of observation rows, read once per observation, until a commit may have changed them.

"What is near here" shows, for each hit, its newest observation's episode
and skips it when that observation is archived (``ObservationRefs``);
``locate`` learns each evidence layer's kind from a few observations' JSON
metadata (``ObservationKinds``). The same few dozen observations are read
call after call, and an observation row is written once: after that only
archival (``reshaped``), a forget (``rewritten``, removed texts or places),
an UPDATE or a REPLACE/DELETE of observation rows can change it. One rule for
both: "observation rows may have changed" (``may_change``): an UPDATE
counts only when its SET names one of the memo's columns (linking rows to a
gist leaves their episode, tier and metadata alone); a statement of unknown
shape, or a transaction whose statements are unknown, counts.
"""

from __future__ import annotations

import re
import threading
from typing import Any, ClassVar, Generic, Optional, Sequence, TypeVar

from emem_ros.storage.events import Commit
from emem_ros.storage.sqlutil import chunked, marks

Row = TypeVar("Row")
MAX_KEPT = 50_000


class ObservationMemo(Generic[Row]):
    """id -> the row ``SELECT`` gives for it (without the id), for ids whose row exists."""

    SELECT: ClassVar[str] = ""
    """``SELECT id, <columns> FROM observations WHERE id IN ({})``"""
    COLUMNS: ClassVar[frozenset[str]] = frozenset()
    """The observation columns the rows hold (an UPDATE of another column leaves them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[int, Row] = {}
        self._generation = 0

    def get(self, conn: Any, ids: Sequence[int]) -> dict[int, Row]:
        with self._lock:
            generation = self._generation
            known: dict[int, Row] = {i: self._known[i] for i in ids if i in self._known}
        missing = list(dict.fromkeys(i for i in ids if i not in known))
        if missing:  # rows not found are not remembered: an id may be allocated before its row is written
            found: dict[int, Row] = {}
            for chunk in chunked(missing, 900):
                for row in conn.execute(self.SELECT.format(marks(len(chunk))), chunk):
                    found[row[0]] = row[1:]
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
        if may_change(commit, self.COLUMNS):
            self.clear()


Ref = tuple[Optional[int], str]
"""(episode_id, tier), as SQLite returns them."""


class ObservationRefs(ObservationMemo[Ref]):
    """Which episode an observation belongs to and whether it is archived."""

    SELECT = "SELECT id, episode_id, tier FROM observations WHERE id IN ({})"
    COLUMNS = frozenset({"episode_id", "tier"})


Kind = tuple[object, Optional[str], object]
"""(json position_source, json type of ray, json view_range), as SQLite returns them (any JSON value)."""


class ObservationKinds(ObservationMemo[Kind]):
    """What an observation's metadata says about its layer (robot-pose position, camera ray, view range)."""

    SELECT = ("SELECT id, json_extract(metadata, '$.position_source'), json_type(metadata, '$.ray'),"
              " json_extract(metadata, '$.view_range') FROM observations WHERE id IN ({})")
    COLUMNS = frozenset({"metadata"})


def may_change(commit: Commit, columns: frozenset[str]) -> bool:
    """The commit may have changed or removed these columns of existing observation rows."""
    if commit.reshaped or commit.rewritten or commit.removed_texts or commit.removed_places:
        return True
    if commit.statements is None:
        return True
    for sql, _, _ in commit.statements:
        if _REMOVES.match(sql):
            return True
        update = _UPDATE.match(sql)
        if update is not None:
            set_columns = _set_columns(sql[update.end():])
            if set_columns is None or set_columns & columns:
                return True
    return False


_TABLE = r"\s+(?:main\.)?observations\b"
_REMOVES = re.compile(r"^\s*(?:DELETE\s+FROM|REPLACE\s+INTO|INSERT\s+OR\s+REPLACE\s+INTO)" + _TABLE, re.IGNORECASE)
_UPDATE = re.compile(r"^\s*UPDATE(?:\s+OR\s+\w+)?" + _TABLE + r"\s+SET\s", re.IGNORECASE)
_ASSIGNED = re.compile(r"^\s*\"?(\w+)\"?\s*=")
_CLAUSE_END = re.compile(r"\s(?:WHERE|FROM|RETURNING)\b", re.IGNORECASE)


def _set_columns(assignments: str) -> Optional[frozenset[str]]:
    """The columns an UPDATE's SET clause assigns (None: a clause this does not read)."""
    names = []
    depth, quote, start = 0, "", 0
    text = assignments + " "
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and (ch == "," or i == len(assignments) or _CLAUSE_END.match(text, i)):
            match = _ASSIGNED.match(text[start:i])
            if match is None:
                return None
            names.append(match.group(1).lower())
            if ch != ",":
                return frozenset(names)
            start = i + 1
    return None
