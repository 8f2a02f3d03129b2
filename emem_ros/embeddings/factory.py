"""Embedding providers by name: from node parameters, or from the name a memory file records.

A memory file remembers the model that made its vectors (``meta.embedding_model``);
``provider_for_stored_model`` turns that name back into a provider, so the CLI
can open any memory without being told which model built it.
"""

from __future__ import annotations

from typing import Optional

from emem_ros.core.errors import InvalidInputError
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


def provider_for_stored_model(name: str, host: Optional[str] = None) -> EmbeddingProvider:
    """The provider that made a file's vectors, from the name the file records."""
    if name.startswith("hashing-"):
        return make_embedder("hashing", name)
    if name.startswith("ollama:"):
        return make_embedder("ollama", name[len("ollama:"):], host)
    if name == MINILM:  # the torch and onnx backends give the same vectors (cosine >= 0.99)
        return make_embedder("auto", name)
    return make_embedder("sentence_transformers", name)


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
