"""Embeddings from an Ollama server (``embedding.backend: ollama``).

``ollama`` is an optional extra, so it is imported when a provider is built, not
when this module is. Every failure (server down, HTTP error, timeout, an answer
of the wrong shape) becomes an ``EmemError`` that names the host and the model,
because "connection refused" alone does not tell an operator which of several
configured servers is down. ``ollama_client`` and ``ollama_failure`` are shared
with the LLM client in ``emem_ros.consolidation.llm``.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

import numpy as np

from emem_ros.core.errors import EmemError, InvalidInputError
from emem_ros.embeddings.base import check_embeddings

DEFAULT_HOST = "http://127.0.0.1:11434"


def resolve_host(host: Optional[str]) -> str:
    """The host the client will use, as ollama resolves it: argument, $OLLAMA_HOST, default."""
    return host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST


def ollama_client(host: str, timeout: float, **httpx_options: Any) -> Any:
    """An ``ollama.Client`` (``httpx_options`` go to its ``httpx.Client``); no request is made here."""
    try:
        import ollama
    except ImportError as exc:
        raise EmemError(
            "the 'ollama' Python package is not installed; install it with "
            "pip install 'emem_ros[ollama]' (or pip install ollama)"
        ) from exc
    return ollama.Client(host=host, timeout=timeout, **httpx_options)


def ollama_failure(exc: BaseException, *, host: str, model: str, doing: str, timeout: float) -> EmemError:
    """Translate whatever the ollama client raised into a plain-words EmemError."""
    where = f"the Ollama server at {host} (model '{model}')"
    try:
        import httpx
    except ImportError:  # pragma: no cover - httpx comes with ollama
        httpx = None  # type: ignore[assignment]  # optional: only used to name its error types
    try:
        from ollama import ResponseError
    except ImportError:  # pragma: no cover
        ResponseError = ()  # type: ignore[assignment,misc]  # an empty tuple catches nothing

    if httpx is not None and isinstance(exc, httpx.TimeoutException):
        return EmemError(f"{where} did not answer within {timeout:g} s while {doing}")
    if isinstance(exc, ResponseError):
        status = getattr(exc, "status_code", -1)
        detail = getattr(exc, "error", str(exc))
        hint = f"; pull it with: ollama pull {model}" if status == 404 else ""
        return EmemError(f"{where} refused {doing}: {detail} (HTTP {status}){hint}")
    if isinstance(exc, ConnectionError):
        return EmemError(
            f"cannot connect to the Ollama server at {host} while {doing} with model '{model}': "
            "is `ollama serve` running there, and is the host right?"
        )
    if httpx is not None and isinstance(exc, httpx.HTTPError):
        return EmemError(f"the connection to {where} failed while {doing}: {exc}")
    return EmemError(f"{where} sent an answer that could not be read while {doing}: {exc}")


class OllamaEmbeddingProvider:
    """``EmbeddingProvider`` backed by ``ollama.Client.embed``; ``dim`` is probed once if not given."""

    def __init__(
        self,
        model: str,
        host: Optional[str] = None,
        timeout: float = 30.0,
        dim: Optional[int] = None,
        batch_size: int = 64,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidInputError("OllamaEmbeddingProvider needs a model name, e.g. 'nomic-embed-text'")
        if not timeout or timeout <= 0:
            raise InvalidInputError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0):
            raise InvalidInputError(f"dim must be a positive integer or None, got {dim!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.model = model
        self.host = resolve_host(host)
        self.timeout = float(timeout)
        self.batch_size = batch_size
        self.model_name = f"ollama:{model}"
        self._dim = dim
        self._dim_lock = threading.Lock()
        self._client = ollama_client(self.host, self.timeout)

    @property
    def dim(self) -> int:
        """Known from the constructor, or asked of the server once (the first time it is needed)."""
        if self._dim is None:
            with self._dim_lock:
                if self._dim is None:
                    self._dim = len(self._request(["dimension probe"])[0])
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            vectors = self._request(batch)
            if self._dim is None:  # the first real call doubles as the probe
                with self._dim_lock:
                    if self._dim is None:
                        self._dim = len(vectors[0])
            rows.extend(vectors)
        try:
            return check_embeddings(rows, texts, self._dim or 0)
        except EmemError as exc:
            raise EmemError(f"the Ollama server at {self.host} (model '{self.model}'): {exc}") from exc

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    def _request(self, batch: list[str]) -> list[list[float]]:
        """One /api/embed call; checks the answer has one non-empty row per input, all equal length."""
        try:
            response = self._client.embed(model=self.model, input=batch)
            vectors = [list(map(float, row)) for row in response["embeddings"]]
        except Exception as exc:  # the ollama client raises many unrelated types; translate all
            raise ollama_failure(
                exc, host=self.host, model=self.model, doing="embedding texts", timeout=self.timeout
            ) from exc
        expected = self._dim or (len(vectors[0]) if vectors else 0)
        if len(vectors) != len(batch) or expected == 0 or any(len(v) != expected for v in vectors):
            lengths = sorted({len(v) for v in vectors})
            raise EmemError(
                f"the Ollama server at {self.host} (model '{self.model}') returned {len(vectors)} "
                f"embeddings of length {lengths} for {len(batch)} texts"
                + (f", expected length {self._dim}" if self._dim else "")
            )
        return vectors
