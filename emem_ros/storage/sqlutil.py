"""Small SQL helpers shared by the store's modules."""

from __future__ import annotations

import sqlite3
from typing import Iterator, Sequence, TypeVar

T = TypeVar("T")

MAX_PARAMS = 900
"""Parameters per ``IN (...)`` list: under SQLite's old default limit of 999 host parameters."""


def chunked(values: Sequence[T], size: int = MAX_PARAMS) -> Iterator[Sequence[T]]:
    """Consecutive slices of at most ``size`` values (for ``IN (...)`` lists)."""
    for start in range(0, len(values), size):
        yield values[start:start + size]


def inserted_id(cursor: sqlite3.Cursor) -> int:
    """The row id an INSERT just gave (a plain error, not a silent 0, if there is none)."""
    if cursor.lastrowid is None:
        raise sqlite3.DatabaseError("the INSERT gave no row id")
    return int(cursor.lastrowid)


def marks(n: int) -> str:
    """``?,?,...`` with ``n`` placeholders."""
    return ",".join("?" * n)
