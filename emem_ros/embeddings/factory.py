"""Embedding providers by name: from node parameters, or from the name a memory file records.

A memory file remembers the model that made its vectors (``meta.embedding_model``);
``provider_for_stored_model`` turns that name back into a provider, so the CLI
can open any memory without being told which model built it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from emem_ros.core.errors import EmemError, InvalidInputError
from emem_ros.embeddings.base import EmbeddingProvider

BACKENDS = ("auto", "onnx", "sentence_transformers", "ollama", "hashing")
DEFAULT_HASHING_DIM = 384
MINILM = "all-MiniLM-L6-v2"
ONNX_MODELS = ("", MINILM, MINILM + "-int8")
"""What ``embedding.model`` may say for the onnx backend: the bundled MiniLM, float or int8."""


def default_backend() -> str:
    """'onnx' where onnxruntime and tokenizers are installed (no torch in the process), else sentence_transformers."""
    from emem_ros.embeddings.onnx_provider import onnx_runtime_available

    return "onnx" if onnx_runtime_available() else "sentence_transformers"


def make_embedder(backend: str, model: str = "", host: Optional[str] = None) -> EmbeddingProvider:
    """A provider for ``embedding.backend`` / ``embedding.model``; nothing is loaded yet."""
    if backend == "auto":
        backend = default_backend()
    if backend == "onnx":
        from emem_ros.embeddings.onnx_provider import OnnxEmbeddingProvider

        check_onnx_model(model)
        return OnnxEmbeddingProvider(int8=model.endswith("-int8"))
    if backend == "sentence_transformers":
        from emem_ros.embeddings.sentence_transformer import SentenceTransformerProvider

        default = not model or model == "all-MiniLM-L6-v2"
        return SentenceTransformerProvider(None if default else model)
    if backend == "ollama":
        from emem_ros.embeddings.ollama_provider import OllamaEmbeddingProvider

        return OllamaEmbeddingProvider(model, host=host or None)
    if backend == "hashing":
        from emem_ros.embeddings.hashing import HashingEmbeddingProvider

        return HashingEmbeddingProvider(_hashing_dim(model))
    raise InvalidInputError(f"unknown embedding backend {backend!r}; use one of {', '.join(BACKENDS)}")


def provider_for_stored_model(name: str, host: Optional[str] = None, dim: int = 0,
                               where: str = "") -> EmbeddingProvider:
    """The provider that made a file's vectors, from the name the file records.

    A name none of the backends can load here (a caller's own embedder,
    ``CallableEmbedding``, a model directory elsewhere) gives an
    ``UnloadableEmbedder``: everything that needs no new vector still works,
    and what does says in one sentence what built the memory and how to do it
    from Python; nothing is looked up or downloaded by that name.
    """
    if name.startswith("hashing-"):
        return make_embedder("hashing", name)
    if name.startswith("ollama:"):
        return make_embedder("ollama", name[len("ollama:"):], host)
    if name == MINILM:  # the torch and onnx backends give the same vectors (cosine >= 0.99)
        return make_embedder("auto", name)
    if Path(name).is_dir():  # a sentence-transformers model directory on this computer
        return make_embedder("sentence_transformers", name)
    return UnloadableEmbedder(name, dim, where)


class UnloadableEmbedder:
    """Stands in for an embedder the command line cannot load: opening works, embedding says why not."""

    def __init__(self, name: str, dim: int, where: str = "") -> None:
        self.model_name = name
        self._dim = dim
        self._where = where or "memory.db"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        raise EmemError(
            f"this memory was built with the embedder {self.model_name!r}, which the emem command cannot load; "
            f"do it from Python with that embedder: Memory({self._where!r}, embedding_provider=<your "
            f"{self.model_name!r} provider>) and call the same method there (e.g. memory.forget(...))")


def check_onnx_model(model: str) -> None:
    if model.strip() not in ONNX_MODELS:
        raise InvalidInputError(
            f"the onnx embedding backend runs the bundled {MINILM} only: embedding.model must be '', "
            f"'{MINILM}' or '{MINILM}-int8' (quantised), got {model!r}; use sentence_transformers for other models")


def _hashing_dim(model: str) -> int:
    text = model.strip()
    if not text:
        return DEFAULT_HASHING_DIM
    digits = text[len("hashing-"):] if text.startswith("hashing-") else text
    if not digits.isdigit() or int(digits) <= 0:
        raise InvalidInputError(f"a hashing embedder is named 'hashing-<dim>' (e.g. 'hashing-384'), got {model!r}")
    return int(digits)
