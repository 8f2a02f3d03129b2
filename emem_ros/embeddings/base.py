"""The provider protocol shared with the peer ``emem`` package."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from emem_ros.core.errors import EmemError


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
    """Coerce a provider's answer to float32 (n, dim) unit rows, or say what is wrong."""
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmemError(f"embedding provider returned something that is not a matrix: {exc}") from exc
    if array.ndim == 1 and len(texts) == 1:
        array = array.reshape(1, -1)
    if array.shape != (len(texts), dim):
        raise EmemError(
            f"embedding provider returned shape {array.shape}, expected ({len(texts)}, {dim})"
        )
    if not np.isfinite(array).all():
        raise EmemError("embedding provider returned NaN or infinite values")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    return array / norms
