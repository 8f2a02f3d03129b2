"""Argument checks shared by the MemFS operations (tool arguments arrive as JSON values)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from emem_ros.memfs.errors import FsError


def whole(value: Any, name: str, default: int, low: int, high: int) -> int:
    """A whole number in [low, high] (``default`` when None), or FsError naming the argument."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise FsError(f"{name} must be a whole number, got {value!r}")
    if not low <= int(value) <= high:
        raise FsError(f"{name} must be between {low} and {high}, got {value}")
    return int(value)


def words(value: Any, error: str) -> Sequence[str]:
    """Tags as a list of strings; a string is split at commas and spaces (LLMs send both forms)."""
    if isinstance(value, str):
        value = [t for t in re.split(r"[,\s]+", value) if t]
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise FsError(error)
    return value
