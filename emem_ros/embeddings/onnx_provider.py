"""all-MiniLM-L6-v2 on ONNX Runtime (``embedding.backend: onnx``): the same vectors without torch.

Tokenised with ``tokenizers`` from the model's own tokenizer.json, truncated at
the model's ``max_seq_length`` (256, from sentence_bert_config.json, not the
128 the tokenizer file carries), then mean-pooled over real tokens and
L2-normalised: the steps sentence-transformers takes, so a memory built with
the torch backend is searched with this one without re-embedding (both record
the model name ``all-MiniLM-L6-v2``). The ONNX file comes from
``onnx_export`` (made once on this machine, cached, checked on load).

The int8 variant (dynamic quantisation) is faster still; its vectors differ a
little more (see test_embeddings_onnx.py for the agreement each one must keep).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Optional

import numpy as np

from emem_ros.core.errors import EmemError
from emem_ros.core.heap import return_freed_heap
from emem_ros.embeddings.onnx_export import MODEL_NAME, default_cache_dir, ensure_onnx
from emem_ros.embeddings.onnx_mapped import mapped_model

MINILM_DIM = 384
DEFAULT_MAX_SEQ_LENGTH = 256
TOKEN_BUDGET = 512
"""Padded tokens per run at most: onnxruntime's arena keeps the largest run's activations (rounded up to a
power of two), so 32 texts of 256 tokens would leave ~150 MB more resident, and 1024 tokens per run left
~90 MB after 2,000 robot texts where 512 leaves ~40 MB; long texts go 2 at a time instead (same throughput)."""


def onnx_runtime_available() -> bool:
    """Whether this backend can run here (onnxruntime and tokenizers importable); imports neither."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "tokenizers"))


class OnnxEmbeddingProvider:
    """``EmbeddingProvider`` for the bundled MiniLM on ONNX Runtime; loads on the first text."""

    def __init__(self, int8: bool = False, cache_dir: Optional[str | Path] = None,
                 model_dir: Optional[str | Path] = None, threads: int = 0, batch_size: int = 32) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise EmemError(f"threads must be 0 (onnxruntime's choice) or a positive integer, got {threads!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise EmemError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.int8 = bool(int8)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self._threads = threads
        self._batch_size = batch_size
        self._session: Any = None
        self._tokenizer: Any = None
        self._max_len = DEFAULT_MAX_SEQ_LENGTH
        self._lock = threading.Lock()
        self.model_name = MODEL_NAME
        self.onnx_path: Optional[Path] = None

    @property
    def dim(self) -> int:
        return MINILM_DIM

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def _load(self) -> Any:
        with self._lock:
            if self._session is None:
                try:
                    import onnxruntime as ort
                    from tokenizers import Tokenizer
                except ImportError as exc:
                    raise EmemError(
                        "the onnx embedding backend needs onnxruntime and tokenizers: pip install 'emem_ros[onnx]'"
                    ) from exc
                model_dir = self._model_dir or _bundled_or_cached(self.cache_dir)
                path = mapped_model(ensure_onnx(model_dir, self.cache_dir, self.int8))
                session = self._open_session(ort, path, model_dir)
                return_freed_heap()  # the parsed model's freed buffers: ~25 MB resident otherwise
                source = model_dir if (model_dir / "tokenizer.json").is_file() else self.cache_dir
                tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
                self._max_len = _max_seq_length(source)
                tokenizer.no_padding()  # padded per batch below, to the longest text, as sentence-transformers does
                tokenizer.enable_truncation(max_length=self._max_len)
                self._tokenizer, self.onnx_path, self._session = tokenizer, path, session
        return self._session

    def _open_session(self, ort: Any, path: Path, model_dir: Path) -> Any:
        """An InferenceSession; a file onnxruntime cannot read is rebuilt once (a checksum can't catch all)."""
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if self._threads:
            options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        try:
            return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception:  # onnxruntime raises its own Fail/InvalidProtobuf types: rebuild, then let it raise
            (self.cache_dir / "manifest.json").unlink(missing_ok=True)
            path = mapped_model(ensure_onnx(model_dir, self.cache_dir, self.int8))
            return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.empty((0, MINILM_DIM), dtype=np.float32)
        session = self._load()
        encodings = self._tokenizer.encode_batch(texts)
        lengths = [len(e.ids) for e in encodings]
        order = np.argsort(lengths, kind="stable")  # similar lengths share a batch: little padding
        out = np.empty((len(texts), MINILM_DIM), dtype=np.float32)
        start = 0
        while start < len(order):
            stop = start + 1
            while (stop < len(order) and stop - start < self._batch_size
                   and (stop - start + 1) * lengths[order[stop]] <= TOKEN_BUDGET):
                stop += 1
            rows = order[start:stop]
            out[rows] = self._run(session, [encodings[i] for i in rows])
            start = stop
        return out

    def _run(self, session: Any, encodings: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            ids[row, :n] = encoding.ids
            mask[row, :n] = encoding.attention_mask
            types[row, :n] = encoding.type_ids
        (hidden,) = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        return mean_pool_normalize(hidden, mask)


def mean_pool_normalize(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' Pooling(mean) then Normalize: masked mean, clamp 1e-9, divide by max(norm, 1e-12)."""
    weights = mask.astype(np.float32)[:, :, None]
    summed = (hidden.astype(np.float32) * weights).sum(axis=1)
    counts = np.maximum(weights.sum(axis=1), 1e-9)
    pooled = summed / counts
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    unit: np.ndarray = (pooled / norms).astype(np.float32)
    return unit


def _bundled_or_cached(cache_dir: Path) -> Path:
    """The bundled model folder, or the cache folder itself when the package is absent but a copy is there."""
    try:
        from emem_ros.embeddings.sentence_transformer import bundled_minilm_path

        return bundled_minilm_path()
    except EmemError:
        if (cache_dir / "tokenizer.json").is_file():
            return cache_dir
        raise


def _max_seq_length(folder: Path) -> int:
    """sentence-transformers' max_seq_length (sentence_bert_config.json), as it truncates."""
    try:
        value = json.loads((folder / "sentence_bert_config.json").read_text()).get("max_seq_length")
    except (OSError, ValueError):
        return DEFAULT_MAX_SEQ_LENGTH
    return int(value) if isinstance(value, int) and value > 0 else DEFAULT_MAX_SEQ_LENGTH
