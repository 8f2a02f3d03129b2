"""LRU of query text -> vector: planners ask the same questions again and again."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from emem_ros.core.errors import EmbeddingUnavailableError
from emem_ros.embeddings.base import EmbeddingProvider, check_embeddings, is_rejection


class QueryEmbedder:
    def __init__(self, provider: EmbeddingProvider, capacity: int = 4096) -> None:
        self._provider = provider
        self._capacity = capacity
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __call__(self, text: str) -> np.ndarray:
        with self._lock:
            vector = self._items.get(text)
            if vector is not None:
                self._items.move_to_end(text)
                self.hits += 1
                return vector
        try:
            raw = self._provider.embed([text])
        except Exception as exc:  # a question then gets "the model is unavailable", not a traceback
            if is_rejection(exc):
                raise
            raise EmbeddingUnavailableError(
                f"the embedding model is unavailable, so questions by meaning cannot be answered now"
                f" ({type(exc).__name__}: {exc}); questions by place, time or body state still work") from exc
        vector = check_embeddings(raw, [text], self._provider.dim)[0]
        vector.setflags(write=False)
        with self._lock:
            self.misses += 1
            self._items[text] = vector
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
        out: np.ndarray = vector
        return out
