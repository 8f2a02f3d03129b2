"""Embedding providers: the emem protocol (`dim`, `embed(texts) -> ndarray`)."""

from emem_ros.embeddings.base import EmbeddingProvider, check_embeddings, provider_name
from emem_ros.embeddings.callable import CallableEmbeddingProvider
from emem_ros.embeddings.hashing import HashingEmbeddingProvider

__all__ = [
    "EmbeddingProvider",
    "CallableEmbeddingProvider",
    "HashingEmbeddingProvider",
    "check_embeddings",
    "provider_name",
]
