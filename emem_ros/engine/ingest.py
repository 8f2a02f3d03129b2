"""From the buffer to the store: flushing, what a failed flush keeps, and what close must save.

What happens when storing fails (see ``ingest/working_memory.py`` and
``ingest/failures.py``): an embedder or disk outage keeps every buffered
observation for retry; one observation that can never be stored is set aside
in ``<db>.deadletter.jsonl`` with a logged error (``stats["dead_lettered"]``)
instead of blocking the rest. Questions flush best-effort and answer from what
is stored, with a note saying how many observations still wait. ``close``
never loses the buffer: with the embedder down it stores the texts without
their vectors, and the next open (or the next successful embedding) adds them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import EmbeddingUnavailableError, StoreError
from emem_ros.core.types import NodeKind, make_id
from emem_ros.engine.embedding import Embedding
from emem_ros.ingest.dead_letter import dead_letter_path, write_dead_letters
from emem_ros.ingest.working_memory import WorkingMemory
from emem_ros.storage.store import MemoryStore, NewObservation, WriteReport

log = logging.getLogger(__name__)


class IngestPath:
    def __init__(self, store: MemoryStore, embedding: Embedding, config: MemoryConfig) -> None:
        self._store = store
        self._embedding = embedding
        self.last_write: Optional[WriteReport] = None
        self.stats = {"flushes": 0, "observations_written": 0, "texts_embedded": 0, "dead_lettered": 0,
                      "stored_without_vector": 0}
        self.dead_letter_path: Path = dead_letter_path(config.db_path)
        self.buffer = WorkingMemory(self._write_batch, config.working_memory_size, config.flush_batch_size,
                                    config.flush_interval, dead_letter=self._dead_letter)

    # ------------------------------------------------------------------ buffering
    def put(self, observation: NewObservation) -> None:
        self.buffer.add(observation)

    @property
    def pending(self) -> int:
        return len(self.buffer)

    def recent(self, n: Optional[int] = None) -> list[NewObservation]:
        return self.buffer.recent(n)

    # ------------------------------------------------------------------ flushing
    def flush(self) -> int:
        """Store everything buffered now; raises (batch kept) if storing fails."""
        written = self.buffer.flush()
        self._store.apply_deferred()  # logged experiences reach SQLite too (other processes read it)
        return written

    def flush_for_query(self) -> int:
        """Best-effort flush before answering a question; returns how many observations still wait.

        Bounded: the question stores what was buffered when it was asked (a
        watermark), never what writers add while it runs, and its flush goes
        before the timer's and the writers' (``WorkingMemory.flush``), so an
        unthrottled writer cannot make a question wait.

        A question must not fail because the embedder is down (spatial, temporal
        and body questions need no embedding at all): the failure is logged and
        the answer covers what is stored (``unstored_note`` says what is not).
        With a flush timer running and the last flush failed, it does not even
        try: the timer retries in the background, and a query must not wait for
        an embedder's timeout. Read-your-writes holds whenever storing works.
        """
        buffer = self.buffer
        mark = buffer.mark()
        if buffer.waiting_before(mark) and not (buffer.has_timer and buffer.failing):
            was_failing = buffer.failing
            try:
                buffer.flush(upto=mark, question=True)
            except Exception as exc:  # warned when the failure begins, not on every question
                log.log(logging.DEBUG if was_failing else logging.WARNING,
                        "answering from what is stored; %d observations still wait to be stored: %s",
                        len(buffer), exc)
        try:
            self._store.apply_deferred()
        except Exception as exc:  # still in the operation log: applied with the next write
            log.warning("could not apply logged transactions before a query: %s", exc)
        return len(buffer)

    def flush_best_effort(self, why: str) -> None:
        """Store the buffer if storing works; otherwise keep it and say so (``why`` names the moment)."""
        try:
            self.buffer.flush()
        except Exception as exc:
            log.warning("%s with %d observations still waiting to be stored (they keep their episode): %s",
                        why, len(self.buffer), exc)

    def unstored_note(self) -> Optional[str]:
        """A sentence for an answer when observations wait because storing fails; None otherwise."""
        waiting = len(self.buffer)
        error = self.buffer.last_error
        if not waiting or error is None:
            return None
        what = "the embedding model is unavailable" if isinstance(error, EmbeddingUnavailableError) \
            else f"storing fails: {type(error).__name__}: {error}"
        return (f"{waiting} observation{'s are' if waiting != 1 else ' is'} still waiting to be stored"
                f" ({what}); this answer covers only what is stored")

    # ------------------------------------------------------------------ the sink
    def _write_batch(self, batch: Sequence[NewObservation], *, defer_vectors: bool = False) -> None:
        report = self._store.write_observations(batch, self._embedding.embed_texts, defer_vectors=defer_vectors)
        self.last_write = report
        self.stats["flushes"] += 1
        self.stats["observations_written"] += report.observations
        self.stats["texts_embedded"] += report.embedded
        self.stats["stored_without_vector"] += report.deferred_vectors
        self._embedding.stored([o.text for o in batch])
        if report.embedded and self._store.vectors_pending:
            self.backfill_vectors("after a flush")  # the embedder works again

    def _write_batch_deferring(self, batch: Sequence[NewObservation]) -> None:
        self._write_batch(batch, defer_vectors=True)

    def backfill_vectors(self, when: str) -> None:
        if not self._store.vectors_pending:
            return
        try:
            self._store.backfill_vectors(self._embedding.embed_texts)
        except Exception as exc:  # the flag stays: the next open or successful flush tries again
            log.warning("texts stored without a vector are still not embedded (%s): %s", when, exc)

    def _dead_letter(self, items: Sequence[tuple[NewObservation, BaseException]]) -> None:
        """Set aside observations that can never be stored (WorkingMemory found them by bisection)."""
        write_dead_letters(self.dead_letter_path, items)
        self.stats["dead_lettered"] += len(items)
        for observation, reason in items:
            log.error("observation %s (%r) cannot be stored (%s: %s); set aside in %s",
                      make_id(NodeKind.OBSERVATION, observation.id), observation.text[:80],
                      type(reason).__name__, reason, self.dead_letter_path)

    # ------------------------------------------------------------------ closing
    def stop(self) -> None:
        self.buffer.stop()

    def final_flush(self) -> None:
        """Store the buffer before closing; nothing may be lost here.

        1. the usual flush; 2. if it fails (the embedder is down), store the
        texts without their vectors: the next open, or the next successful
        embedding, adds them (``store.backfill_vectors``); 3. whatever still
        cannot be stored goes to the dead-letter file, with a logged error.
        Raises only when even that file cannot be written.
        """
        try:
            self.buffer.flush()
            return
        except Exception as exc:
            log.warning("final flush failed (%s); storing %d observations without their vectors", exc,
                        len(self.buffer))
        try:
            self.buffer.flush(sink=self._write_batch_deferring)
            return
        except Exception as exc:
            reason = exc
        items = self.buffer.take_all()
        try:
            write_dead_letters(self.dead_letter_path, [(o, f"not stored at close: {type(reason).__name__}: "
                                                          f"{reason}") for o in items])
        except Exception as exc:
            log.exception("final flush failed and %d buffered observations could not be saved to %s",
                          len(items), self.dead_letter_path)
            raise StoreError(f"{len(items)} buffered observations could not be stored ({reason}) nor saved to"
                             f" {self.dead_letter_path} ({exc})") from exc
        self.stats["dead_lettered"] += len(items)
        log.error("final flush failed (%s: %s); %d buffered observations were saved to %s instead",
                  type(reason).__name__, reason, len(items), self.dead_letter_path)
