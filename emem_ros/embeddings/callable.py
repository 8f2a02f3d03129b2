"""Wrap any ``fn(list[str]) -> list[list[float]]`` (EmbodiedAgents' OllamaClient._embed, say)."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np


class CallableEmbeddingProvider:
    def __init__(
        self,
        embed_fn: Callable[[list[str]], Sequence[Sequence[float]]],
        dim: Optional[int] = None,
        model_name: Optional[str] = None,
    ) -> None:
        self._fn = embed_fn
        self.model_name = model_name or getattr(embed_fn, "__qualname__", "callable")
        self._dim = dim if dim is not None else len(self._fn(["dimension probe"])[0])

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self._dim), dtype=np.float32)
        return np.asarray(self._fn(list(texts)), dtype=np.float32)
