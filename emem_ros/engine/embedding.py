"""Embedding for the whole memory: stored texts in batches, questions one at a time.

``embed_texts`` remembers vectors until their texts are stored, so a batch
that failed for another reason (a full disk) or is bisected to find a poison
record is not embedded twice; ``embed_query`` keeps an LRU of questions,
because planners ask the same ones again and again.
"""

from __future__ import annotations

import threading

import numpy as np

from emem_ros.core.errors import EmbeddingUnavailableError
from emem_ros.embeddings.base import EmbeddingProvider, check_embeddings, is_rejection, provider_name
from emem_ros.embeddings.query_cache import QueryEmbedder

MEMO_LIMIT = 4096
"""Vectors of texts embedded but not stored yet (a failed or bisected batch) kept for the retry."""


class Embedding:
    def __init__(self, provider: EmbeddingProvider) -> None:
        self.provider = provider
        self.dim = int(provider.dim)
        self.name = provider_name(provider)
        self.embed_query = QueryEmbedder(provider)
        self._memo: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """One row per text, through the provider, reusing vectors of texts not stored yet.

        A provider that fails to answer raises EmbeddingUnavailableError (an
        outage: callers keep everything for retry); one whose answer is refused
        raises EmbeddingRejectedError (about the data).
        """
        texts = list(texts)
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in texts:
                vector = self._memo.get(text)
                if vector is not None:
                    found[text] = vector
        misses = [t for t in dict.fromkeys(texts) if t not in found]
        if misses:
            try:
                raw = self.provider.embed(list(misses))
            except Exception as exc:
                if is_rejection(exc):
                    raise
                raise EmbeddingUnavailableError(
                    f"the embedding provider ({self.name}) failed: {type(exc).__name__}: {exc}") from exc
            vectors = check_embeddings(raw, misses, self.dim)
            with self._lock:
                if len(self._memo) + len(misses) > MEMO_LIMIT:
                    self._memo.clear()
                for text, vector in zip(misses, vectors):
                    found[text] = vector
                    self._memo[text] = vector
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return np.stack([found[t] for t in texts])

    def stored(self, texts: list[str]) -> None:
        """These texts are in the store now: their vectors need not be kept."""
        if self._memo:
            with self._lock:
                for text in texts:
                    self._memo.pop(text, None)
