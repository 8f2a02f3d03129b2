"""Checks on what a caller hands to ``add``: each failure is one plain sentence (``InvalidInputError``).

Everything that could fail at flush time fails here, as the caller's error,
so a refused observation never reaches the buffer and never blocks a batch.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from emem_ros.core.errors import EmemError, InvalidInputError, TimeExpressionError
from emem_ros.core.timeexpr import check_epoch
from emem_ros.core.types import SourceType, real_number
from emem_ros.embeddings.base import check_embeddings
from emem_ros.storage import codec

SOURCE_TYPES = frozenset(s.value for s in SourceType)


def clean_text(text: Any, max_length: int) -> str:
    if not isinstance(text, str):
        raise InvalidInputError(f"text must be a string, got {type(text).__name__}")
    cleaned = text.strip()
    if not cleaned:
        raise InvalidInputError("text is empty; an observation needs words")
    if "\x00" in cleaned:
        raise InvalidInputError("text contains a NUL character")
    if len(cleaned) > max_length:
        raise InvalidInputError(
            f"text is {len(cleaned)} characters, over max_text_length ({max_length}); split it or raise the limit")
    return cleaned


def clean_stamp(timestamp: Any) -> float:
    """Epoch seconds a caller gave (not None: the clock is the caller's default)."""
    seconds = real_number(timestamp)
    if seconds is None:
        raise InvalidInputError(f"timestamp must be epoch seconds, got {timestamp!r}")
    if not math.isfinite(seconds):
        raise InvalidInputError(f"timestamp must be finite, got {timestamp!r}")
    try:
        return check_epoch(seconds, timestamp)  # a stored 1e30 would break every answer that prints it
    except TimeExpressionError as exc:
        raise InvalidInputError(f"timestamp: {exc}") from None


def clean_layer(layer: Any) -> str:
    if not isinstance(layer, str) or not layer.strip():
        raise InvalidInputError(f"layer_name must be a non-empty string, got {layer!r}")
    return layer.strip()


def clean_source_type(source_type: Any) -> str:
    if source_type not in SOURCE_TYPES:
        raise InvalidInputError(f"unknown source_type {source_type!r}; use one of {', '.join(sorted(SOURCE_TYPES))}")
    return str(source_type)


def clean_confidence(confidence: Any) -> float:
    number = real_number(confidence)
    if number is None or not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InvalidInputError(f"confidence must be a number in [0, 1], got {confidence!r}")
    return number


def clean_value(value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    number = real_number(value)
    if number is None or not math.isfinite(number):
        raise InvalidInputError(f"value must be a finite number, got {value!r}")
    return number


def stored_metadata(metadata: Any) -> Optional[str]:
    """The JSON the store will keep, encoded once, now, with the store's own encoder.

    Whatever could fail at flush (keys of mixed types, NaN) fails here, and a
    dict the caller changes after ``add`` changes nothing.
    """
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}")
    try:
        return codec.dumps(metadata, strict=True)
    except (TypeError, ValueError, RecursionError) as exc:
        hint = "; the keys of one dict must all be strings (or all numbers)" \
            if "not supported between" in str(exc) else ""
        raise InvalidInputError(f"metadata must be JSON-serialisable: {exc}{hint}") from exc


def clean_metadata(metadata: Any) -> Optional[dict[str, Any]]:
    """The metadata dict, checked with the encoder the store uses (episodes keep the dict)."""
    stored_metadata(metadata)
    return metadata  # type: ignore[no-any-return]  # checked above: None or a JSON-able dict


def clean_embedding(embedding: Any, dim: int) -> Optional[np.ndarray]:
    if embedding is None:
        return None
    try:
        vector: np.ndarray = check_embeddings(embedding, ["embedding"], dim)[0]
        return vector
    except EmemError as exc:
        raise InvalidInputError(f"embedding rejected: {exc}") from exc
