"""Text embeddings decoded once: the rankers score the same texts call after call.

``TextVectors.get(ids)`` is ``store.text_vectors(ids)``: a text's stored
vector is written once (or back-filled where it was missing) and only a
re-embedding (a new model) rewrites it, so decoded vectors are kept until a
commit deletes or replaces texts or rewrites their embeddings (``forget``).
Texts without a vector are never remembered: a back-fill finds them again.
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from emem_ros.storage import codec
from emem_ros.storage.sqlutil import chunked, marks
from emem_ros.storage.store import MemoryStore

MAX_KEPT = 20_000
"""Vectors kept (about 30 MB at 384 dimensions); past this the memo starts over."""


class TextVectors:
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._known: dict[int, np.ndarray] = {}
        self._generation = 0

    def get(self, text_ids: Sequence[int]) -> np.ndarray:
        """Stored vectors of texts (zero rows for texts without one), as ``MemoryStore.text_vectors``."""
        dim = self._store.dim
        out = np.zeros((len(text_ids), dim), dtype=np.float32)
        position = {int(t): n for n, t in enumerate(text_ids)}
        missing: list[int] = []
        with self._lock:
            generation = self._generation
            known = self._known
            for text_id, n in position.items():
                vector = known.get(text_id)
                if vector is None:
                    missing.append(text_id)
                else:
                    out[n] = vector
        if not missing:
            return out
        found: dict[int, np.ndarray] = {}
        conn = self._store.reader()
        for chunk in chunked(missing):
            for text_id, blob in conn.execute(
                    f"SELECT id, embedding FROM texts WHERE id IN ({marks(len(chunk))}) AND embedding IS NOT NULL",
                    chunk):
                vector = codec.blob_to_vector(blob, dim)
                out[position[text_id]] = vector
                found[text_id] = vector
        with self._lock:
            if self._generation == generation and found:  # no commit rewrote texts while they were read
                if len(self._known) + len(found) > MAX_KEPT:
                    self._known = {}
                self._known.update(found)
        return out

    def forget(self) -> None:
        with self._lock:
            self._generation += 1
            self._known = {}
