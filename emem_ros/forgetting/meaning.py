"""Selecting by meaning outside the vector index: archived records and dead letters.

The cold store keeps archived observations' text but no vectors (and a
dead letter is a record that never reached the index), so ``similar_to``
cannot ask hnswlib about them. Instead their texts are embedded here, at
selection time, with the memory's own embedder: only records that already
meet the selector's other criteria (layer, time, region, ids, words), each
distinct text once, ``BATCH`` texts per call, so memory stays bounded by
one batch of vectors whatever the size of the cold store. The vectors are
not kept (nor put in the embedder's memo): they would be copies of what is
about to be forgotten. Cosine is measured as for hot texts (normalised dot
product, as hnswlib's cosine space does).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

import numpy as np

from emem_ros.core.types import parse_id
from emem_ros.embeddings.base import check_embeddings

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.consolidation.coldstore import ColdStore
    from emem_ros.engine import Engine
    from emem_ros.forgetting.selector import Selector

log = logging.getLogger(__name__)

BATCH = 64
"""Texts embedded per call: a MiniLM batch of 64 is ~0.3 s on one core and 100 KB of vectors."""


class MeaningFilter:
    """Which texts mean the selector's ``similar_to`` (cosine >= ``min_similarity``), embedded in batches."""

    def __init__(self, engine: "Engine", selector: "Selector", batch: int = BATCH) -> None:
        assert selector.similar_to is not None
        self.engine = engine
        self.threshold = float(selector.min_similarity)
        self.batch = max(1, int(batch))
        self.query = _unit(np.asarray(engine.embed_query(selector.similar_to), dtype=np.float32))
        self.verdict: dict[str, bool] = {}
        """Text -> whether it is similar enough (each distinct text is embedded once)."""
        self.embedded = 0
        self.seconds = 0.0

    def similar(self, texts: Iterable[str]) -> set[str]:
        """The texts among ``texts`` similar enough to the query."""
        texts = list(texts)
        pending: list[str] = []
        queued: set[str] = set()
        for text in texts:
            if text and text not in self.verdict and text not in queued:
                queued.add(text)
                pending.append(text)
                if len(pending) >= self.batch:
                    self._decide(pending)
                    pending = []
        if pending:
            self._decide(pending)
        return {t for t in texts if t and self.verdict.get(t)}

    def _decide(self, texts: list[str]) -> None:
        began = time.perf_counter()
        embedding = self.engine.embedding
        vectors = check_embeddings(embedding.provider.embed(list(texts)), texts, embedding.dim)
        norms = np.linalg.norm(vectors, axis=1)
        norms[norms == 0.0] = 1.0
        scores = (vectors @ self.query) / norms
        for text, score in zip(texts, scores):
            self.verdict[text] = bool(float(score) >= self.threshold)
        self.embedded += len(texts)
        self.seconds += time.perf_counter() - began


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def without_meaning(selector: "Selector") -> "Selector":
    """The selector's other criteria, for the records meaning is then decided on."""
    return dataclasses.replace(selector, similar_to=None)


def cold_similar(engine: "Engine", cold: "ColdStore", selector: "Selector",
                 selected: Callable[[dict[str, Any], "Selector"], bool], batch: int = BATCH) -> set[int]:
    """Archived observation numbers whose cold record means ``similar_to`` and meets the other criteria.

    ``selected`` is ``select.record_selected`` (passed in: that module imports this one).
    """
    rest = without_meaning(selector)
    meaning = MeaningFilter(engine, selector, batch)
    waiting: dict[str, list[int]] = {}
    found: set[int] = set()

    def decide() -> None:
        for text in meaning.similar(list(waiting)):
            found.update(waiting[text])
        waiting.clear()

    for record in cold.iter_records():
        text = str(record.get("text") or "")
        if not text or not selected(record, rest):
            continue
        number = _number(record)
        if number is None:
            continue
        if text in meaning.verdict:
            if meaning.verdict[text]:
                found.add(number)
            continue
        waiting.setdefault(text, []).append(number)
        if len(waiting) >= meaning.batch:
            decide()
    decide()
    if meaning.embedded:
        log.info("forget: %d archived text(s) embedded to select by meaning in %.2f s (%d selected)",
                 meaning.embedded, meaning.seconds, len(found))
    return found


def _number(record: dict[str, Any]) -> Optional[int]:
    try:
        return parse_id(str(record.get("id")))[1]
    except ValueError:
        return None


def dead_letters_meaning(engine: "Engine", path: Any, selectors: list["Selector"],
                         selected: Callable[..., bool]) -> Callable[[dict[str, Any]], bool]:
    """A predicate: this dead-letter record means a ``similar_to`` selector's query and meets its other criteria.

    Dead letters never reached the vector index; the file is small (a few failed batches), read once here.
    """
    by_meaning = [s for s in selectors if s.similar_to]
    if not by_meaning:
        return lambda record: False
    from emem_ros.ingest.dead_letter import read_dead_letters

    try:
        records = list(read_dead_letters(path))
    except (OSError, ValueError):
        return lambda record: False
    chosen: list[tuple["Selector", set[str]]] = []
    for selector in by_meaning:
        rest = without_meaning(selector)
        texts = [str(r.get("text") or "") for r in records
                 if selected(r, rest, stamp_key="timestamp", layer_key="layer_name")]
        chosen.append((rest, MeaningFilter(engine, selector).similar(texts)))

    def means(record: dict[str, Any]) -> bool:
        text = str(record.get("text") or "")
        return any(text in texts and selected(record, rest, stamp_key="timestamp", layer_key="layer_name")
                   for rest, texts in chosen)

    return means
