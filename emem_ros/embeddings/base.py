"""The provider protocol shared with the peer ``emem`` package."""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from emem_ros.core.errors import EmbeddingRejectedError


@runtime_checkable
class EmbeddingProvider(Protocol):
    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


def provider_name(provider: EmbeddingProvider) -> str:
    """The name recorded in the memory file, so a model change is noticed on open."""
    name = getattr(provider, "model_name", None)
    return str(name) if name else type(provider).__name__


def check_embeddings(vectors: object, texts: Sequence[str], dim: int) -> np.ndarray:
    """Coerce a provider's answer to float32 (n, dim) unit rows, or say what is wrong.

    A zero (or zero-length) vector is refused: it has no direction, so cosine
    search would rank it arbitrarily and hnswlib would store NaNs for it.
    """
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingRejectedError(
            f"embedding provider returned something that is not a matrix: {exc}") from exc
    if array.ndim == 1 and len(texts) == 1:
        array = array.reshape(1, -1)
    if array.shape != (len(texts), dim):
        raise EmbeddingRejectedError(
            f"embedding provider returned shape {array.shape}, expected ({len(texts)}, {dim})"
        )
    if dim == 0:
        raise EmbeddingRejectedError("embedding provider returned zero-length vectors")
    finite = np.isfinite(array).all(axis=1)
    if not finite.all():
        raise EmbeddingRejectedError(
            f"embedding provider returned NaN or infinite values (for {_first(texts, ~finite)})")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    zero = norms[:, 0] == 0.0
    if zero.any():
        raise EmbeddingRejectedError(
            f"embedding provider returned a zero vector (for {_first(texts, zero)}); a vector needs a direction")
    unit: np.ndarray = array / norms
    return unit


def is_rejection(exc: Optional[BaseException]) -> bool:
    """True when ``exc`` (or an exception it was raised from) is a refused provider answer.

    Providers re-raise our check's error in their own words (``raise ... from exc``),
    so the cause chain is searched.
    """
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, EmbeddingRejectedError):
            return True
        exc = exc.__cause__
        seen += 1
    return False


def _first(texts: Sequence[str], mask: Any) -> str:
    index = int(np.flatnonzero(mask)[0])
    text = str(texts[index]) if index < len(texts) else "?"
    return repr(text if len(text) <= 60 else text[:57] + "...")
