"""Numbers from outside (messages, JSON, tool arguments): finite or not at all."""

from __future__ import annotations

import math
from typing import Any, Optional


def finite_or_none(value: Any) -> Optional[float]:
    """``value`` as a finite float; None for None, NaN, infinities, bools, text and anything else."""
    if value is None or isinstance(value, (bool, str, bytes, bytearray)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def is_finite_number(value: Any) -> bool:
    """A real int or float (not a bool, not text), finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


MAX_INTEGER = 2**63 - 1
"""The largest integer SQLite stores (a signed 64-bit INTEGER): ids and counts beyond it cannot exist."""


def storable_int(value: int) -> bool:
    """An int SQLite can hold (beyond it, binding raises OverflowError deep in a query)."""
    return -MAX_INTEGER - 1 <= value <= MAX_INTEGER
