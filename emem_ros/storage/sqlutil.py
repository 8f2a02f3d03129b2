"""Small SQL helpers shared by the store's modules."""

from __future__ import annotations

from typing import Iterator, Sequence, TypeVar

T = TypeVar("T")

MAX_PARAMS = 900
"""Parameters per ``IN (...)`` list: under SQLite's old default limit of 999 host parameters."""


def chunked(values: Sequence[T], size: int = MAX_PARAMS) -> Iterator[Sequence[T]]:
    """Consecutive slices of at most ``size`` values (for ``IN (...)`` lists)."""
    for start in range(0, len(values), size):
        yield values[start:start + size]


def marks(n: int) -> str:
    """``?,?,...`` with ``n`` placeholders."""
    return ",".join("?" * n)
