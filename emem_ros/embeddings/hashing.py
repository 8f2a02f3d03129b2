"""A deterministic, dependency-free embedder: hashed word and character n-grams.

Not a language model: texts that share words are similar, others are not.
It keeps tests fast and exact, and lets benchmarks measure the engine rather
than the model (the peer package gets the very same vectors).
"""

from __future__ import annotations

import re
import zlib
from typing import Iterator

import numpy as np

_TOKEN = re.compile(r"[a-z0-9]+")


class HashingEmbeddingProvider:
    def __init__(self, dim: int = 384, char_ngrams: bool = True) -> None:
        self._dim = dim
        self._char_ngrams = char_ngrams
        self.model_name = f"hashing-{dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in self._features(text):
                h = zlib.crc32(feature.encode("utf-8"))
                out[row, h % self._dim] += weight if (h >> 16) & 1 else -weight
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0.0] = 1.0
        unit: np.ndarray = out / norms
        return unit

    def _features(self, text: str) -> Iterator[tuple[str, float]]:
        words = _TOKEN.findall(text.lower())
        for word in words:
            yield "w:" + word, 1.0
            if self._char_ngrams and len(word) > 3:
                padded = f"<{word}>"
                for i in range(len(padded) - 2):
                    yield "c:" + padded[i : i + 3], 0.25
        for a, b in zip(words, words[1:]):
            yield "b:" + a + " " + b, 0.5
