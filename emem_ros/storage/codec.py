"""Row <-> value encodings shared by the store and its readers."""

from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np


def vector_to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def blob_to_vector(blob: bytes, dim: int) -> np.ndarray:
    vector = np.frombuffer(blob, dtype=np.float32)
    if vector.shape != (dim,):
        raise ValueError(f"stored vector has {vector.size} values, expected {dim}")
    return vector


def dumps(value: Optional[dict[str, Any]]) -> Optional[str]:
    """JSON for metadata columns; None and {} are stored as NULL."""
    if not value:
        return None
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def loads(text: Optional[str]) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_unreadable_metadata": text}
    return value if isinstance(value, dict) else {"value": value}
