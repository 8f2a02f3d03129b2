"""Row <-> value encodings shared by the store and its readers."""

from __future__ import annotations

import json
from typing import Any, Optional, Union

import numpy as np

Metadata = Union[dict[str, Any], str, None]
"""A metadata dict, or its JSON text as ``dumps`` wrote it (what ``Memory.add`` keeps)."""


def vector_to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def blob_to_vector(blob: bytes, dim: int) -> np.ndarray:
    vector = np.frombuffer(blob, dtype=np.float32)
    if vector.shape != (dim,):
        raise ValueError(f"stored vector has {vector.size} values, expected {dim}")
    return vector


def _plain(value: Any) -> Any:
    """JSON for values json does not know: numpy scalars and arrays as numbers, the rest as text."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def dumps(value: Metadata, *, strict: bool = False) -> Optional[str]:
    """JSON for metadata columns; None and {} are stored as NULL; encoded text passes through.

    ``strict`` refuses NaN and infinity (``Memory.add`` encodes once, strictly,
    so the flush can never fail on metadata). Raises TypeError or ValueError.
    """
    if isinstance(value, str):
        return value or None
    if not value:
        return None
    return (_STRICT if strict else _LENIENT).encode(value)


# Built once: ``json.dumps`` with options builds a new encoder on every call (once per observation).
_STRICT = json.JSONEncoder(separators=(",", ":"), sort_keys=True, default=_plain, allow_nan=False)
_LENIENT = json.JSONEncoder(separators=(",", ":"), sort_keys=True, default=_plain, allow_nan=True)


def loads(text: Optional[str]) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_unreadable_metadata": text}
    return value if isinstance(value, dict) else {"value": value}
