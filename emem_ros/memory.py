"""Memory: the facade a robot node, a bag replay or any Python agent talks to.

Ingestion mirrors the peer ``emem`` package (``add``, ``add_body_state``,
``start_episode``, ``end_episode``, ``flush``, ``close``) so code written for
it runs unchanged; everything below it is ours.

What happens when storing fails (see ``ingest/working_memory.py`` and
``ingest/failures.py``): an embedder or disk outage keeps every buffered
observation for retry; one observation that can never be stored is set aside
in ``<db>.deadletter.jsonl`` with a logged error (``stats["dead_lettered"]``)
instead of blocking the rest; ``add`` raises only when it refuses an
observation. Questions (the tools) flush best-effort and answer from what is
stored, with a note saying how many observations still wait. ``close`` never
loses the buffer: with the embedder down it stores the texts without their
vectors, and the next open (or the next successful embedding) adds them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Optional

import numpy as np

from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import (
    EmbeddingUnavailableError,
    EmemError,
    InvalidInputError,
    StoreError,
    TimeExpressionError,
    UnknownNodeError,
)
from emem_ros.core.periodic import PeriodicThread
from emem_ros.core.timeexpr import TimeLike, check_epoch, parse_time
from emem_ros.core.types import (
    EpisodeStatus,
    NodeKind,
    Position,
    SourceType,
    finite_position,
    make_id,
    parse_id,
    real_number,
)
from emem_ros.embeddings.base import EmbeddingProvider, check_embeddings, is_rejection, provider_name
from emem_ros.embeddings.query_cache import QueryEmbedder
from emem_ros.ingest.dead_letter import dead_letter_path, write_dead_letters
from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ingest.working_memory import WorkingMemory
from emem_ros.consolidation.mixin import ConsolidationMixin
from emem_ros.storage import codec
from emem_ros.storage.store import MemoryStore, NewObservation, WriteReport
from emem_ros.tools.mixin import ToolsMixin

log = logging.getLogger(__name__)

_SOURCE_TYPES = {s.value for s in SourceType}
EMBED_MEMO_LIMIT = 4096
"""Vectors of texts embedded but not stored yet (a failed or bisected batch) kept for the retry."""
EpisodeHook = Callable[["Memory", int, bool], None]


def default_embedding_provider() -> EmbeddingProvider:
    from emem_ros.embeddings.sentence_transformer import SentenceTransformerProvider

    return SentenceTransformerProvider()


class Memory(ToolsMixin, ConsolidationMixin):
    def __init__(
        self,
        db_path: Optional[str] = None,
        config: Optional[MemoryConfig] = None,
        embedding_provider: Optional[EmbeddingProvider] = None,
        llm_client: Any = None,
        get_current_time: Optional[Callable[[], float]] = None,
    ) -> None:
        config = replace(config) if config is not None else MemoryConfig()
        if db_path is not None:
            config.db_path = str(db_path)
        self.config = config.validate()
        self.embedder = embedding_provider or default_embedding_provider()
        self.llm_client = llm_client
        self._clock = get_current_time or time.time
        self._embed_memo: dict[str, np.ndarray] = {}
        self.store = MemoryStore(self.config, self.embedder.dim, provider_name(self.embedder))
        try:
            self._open_rest()
        except BaseException:  # a failed open must not leave threads, files or the process lock behind
            for name in ("_wm", "_index_saver"):
                part = getattr(self, name, None)
                if part is not None:
                    part.stop()
            self.store.close()
            raise

    def _open_rest(self) -> None:
        if self.store.needs_reembed:
            self.store.reembed_all(self._embed_texts)
        self._backfill_vectors("at open")
        self.embed_query = QueryEmbedder(self.embedder)
        self._episode_lock = threading.RLock()
        self._episodes: list[int] = self._resume_active_episodes()
        self._episode_end_hooks: list[EpisodeHook] = []
        self._ledger = None
        self._ledger_lock = threading.Lock()
        self._closed = False
        self.last_write: Optional[WriteReport] = None
        self.stats = {"flushes": 0, "observations_written": 0, "texts_embedded": 0, "dead_lettered": 0,
                      "stored_without_vector": 0}
        self.dead_letter_path = dead_letter_path(self.config.db_path)
        self._wm = WorkingMemory(self._write_batch, self.config.working_memory_size,
                                 self.config.flush_batch_size, self.config.flush_interval,
                                 dead_letter=self._dead_letter)
        self._index_saver: Optional[PeriodicThread] = None
        if self.config.index_save_interval > 0:
            self._index_saver = PeriodicThread(
                "emem-index-save", self.config.index_save_interval, self.store.save_indexes).start()
        self._init_tools()
        self._init_consolidation()

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        """The memory's clock: the ROS clock on a robot, bag time in a replay."""
        return float(self._clock())

    def set_clock(self, get_current_time: Callable[[], float]) -> None:
        self._clock = get_current_time

    def resolve_time(self, value: TimeLike) -> Optional[float]:
        return parse_time(value, self.now())

    # ------------------------------------------------------------------ ingestion
    def add(
        self,
        text: str,
        x: Optional[float] = None,
        y: Optional[float] = None,
        z: Optional[float] = 0.0,
        timestamp: Optional[float] = None,
        layer_name: str = "default",
        source_type: str = "manual",
        confidence: float = 1.0,
        metadata: Optional[dict[str, Any]] = None,
        embedding: Optional[np.ndarray] = None,
        *,
        frame_id: Optional[str] = None,
        value: Optional[float] = None,
    ) -> str:
        """Buffer one observation and return its id; x=y=None means 'position unknown'."""
        self._check_open()
        position = finite_position(x, y, z)
        observation = NewObservation(
            id=0,
            text=self._clean_text(text),
            stamp=self._stamp(timestamp),
            layer=self._clean_layer(layer_name),
            source_type=self._clean_source_type(source_type),
            position=position,
            frame_id=frame_id or self.config.frame_id,
            confidence=self._clean_confidence(confidence),
            episode_id=self.active_episode_number,
            value=self._clean_value(value),
            metadata_json=self._stored_metadata(metadata),
            embedding=self._clean_embedding(embedding),
        )
        observation.id = self.store.allocate_observation_id()
        self._wm.add(observation)
        return make_id(NodeKind.OBSERVATION, observation.id)

    def add_body_state(
        self,
        text: str,
        layer_name: str,
        x: Optional[float] = None,
        y: Optional[float] = None,
        z: Optional[float] = 0.0,
        timestamp: Optional[float] = None,
        confidence: float = 1.0,
        metadata: Optional[dict[str, Any]] = None,
        *,
        value: Optional[float] = None,
    ) -> str:
        """An interoception reading: only ``body_status`` ever returns it."""
        return self.add(text, x, y, z, timestamp, layer_name, SourceType.INTEROCEPTION.value,
                        confidence, metadata, value=value)

    def add_draft(self, draft: ObservationDraft, robot_position: Optional[Position] = None) -> str:
        """The ROS and replay path: a draft's own position wins over the robot's."""
        position = draft.position if draft.position is not None else robot_position
        x, y, z = position if position is not None else (None, None, None)
        metadata = dict(draft.metadata)
        if draft.position is None and robot_position is not None:
            metadata.setdefault("position_source", "odometry")
        return self.add(draft.text, x, y, z, draft.stamp, draft.layer, draft.source_type,
                        draft.confidence, metadata or None, frame_id=draft.frame_id, value=draft.value)

    def flush(self) -> int:
        """Store everything buffered now; raises (batch kept) if storing fails."""
        self._check_open()
        written = self._wm.flush()
        self.store.apply_deferred()  # logged experiences reach SQLite too (other processes read it)
        return written

    def flush_for_query(self) -> int:
        """Best-effort flush before answering a question; returns how many observations still wait.

        A question must not fail because the embedder is down (spatial, temporal
        and body questions need no embedding at all): the failure is logged and
        the answer covers what is stored (``unstored_note`` says what is not).
        With a flush timer running and the last flush failed, it does not even
        try: the timer retries in the background, and a query must not wait for
        an embedder's timeout. Read-your-writes holds whenever storing works.
        """
        self._check_open()
        if len(self._wm) and not (self._wm.has_timer and self._wm.failing):
            was_failing = self._wm.failing
            try:
                self._wm.flush()
            except Exception as exc:  # warned when the failure begins, not on every question
                log.log(logging.DEBUG if was_failing else logging.WARNING,
                        "answering from what is stored; %d observations still wait to be stored: %s",
                        len(self._wm), exc)
        try:
            self.store.apply_deferred()
        except Exception as exc:  # still in the operation log: applied with the next write
            log.warning("could not apply logged transactions before a query: %s", exc)
        return len(self._wm)

    def unstored_note(self) -> Optional[str]:
        """A sentence for an answer when observations wait because storing fails; None otherwise."""
        waiting = len(self._wm)
        error = self._wm.last_error
        if not waiting or error is None:
            return None
        what = "the embedding model is unavailable" if isinstance(error, EmbeddingUnavailableError) \
            else f"storing fails: {type(error).__name__}: {error}"
        return (f"{waiting} observation{'s are' if waiting != 1 else ' is'} still waiting to be stored"
                f" ({what}); this answer covers only what is stored")

    @property
    def pending(self) -> int:
        return len(self._wm)

    def recent_buffered(self, n: Optional[int] = None) -> list[NewObservation]:
        return self._wm.recent(n)

    def _write_batch(self, batch, *, defer_vectors: bool = False) -> None:
        report = self.store.write_observations(batch, self._embed_texts, defer_vectors=defer_vectors)
        self.last_write = report
        self.stats["flushes"] += 1
        self.stats["observations_written"] += report.observations
        self.stats["texts_embedded"] += report.embedded
        self.stats["stored_without_vector"] += report.deferred_vectors
        memo = self._embed_memo
        if memo:
            for o in batch:
                memo.pop(o.text, None)
        if report.embedded and self.store.vectors_pending:
            self._backfill_vectors("after a flush")  # the embedder works again

    def _write_batch_deferring(self, batch) -> None:
        self._write_batch(batch, defer_vectors=True)

    def _backfill_vectors(self, when: str) -> None:
        if not self.store.vectors_pending:
            return
        try:
            self.store.backfill_vectors(self._embed_texts)
        except Exception as exc:  # the flag stays: the next open or successful flush tries again
            log.warning("texts stored without a vector are still not embedded (%s): %s", when, exc)

    def _dead_letter(self, items) -> None:
        """Set aside observations that can never be stored (WorkingMemory found them by bisection)."""
        write_dead_letters(self.dead_letter_path, items)
        self.stats["dead_lettered"] += len(items)
        for observation, reason in items:
            log.error("observation %s (%r) cannot be stored (%s: %s); set aside in %s",
                      make_id(NodeKind.OBSERVATION, observation.id), observation.text[:80],
                      type(reason).__name__, reason, self.dead_letter_path)

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        """Embed through the provider, remembering vectors until their texts are stored.

        A provider that fails to answer raises EmbeddingUnavailableError (an
        outage: everything is kept for retry); one whose answer we refuse
        raises EmbeddingRejectedError (about the data). Vectors of a batch that
        failed for another reason are reused when it is retried or bisected.
        """
        texts = list(texts)
        memo = self._embed_memo
        found: dict[str, np.ndarray] = {}
        for text in texts:
            vector = memo.get(text)
            if vector is not None:
                found[text] = vector
        misses = [t for t in dict.fromkeys(texts) if t not in found]
        if misses:
            try:
                raw = self.embedder.embed(list(misses))
            except Exception as exc:
                if is_rejection(exc):
                    raise
                raise EmbeddingUnavailableError(
                    f"the embedding provider ({provider_name(self.embedder)}) failed: {type(exc).__name__}: {exc}"
                ) from exc
            vectors = check_embeddings(raw, misses, self.embedder.dim)
            if len(memo) + len(misses) > EMBED_MEMO_LIMIT:
                memo.clear()
            for text, vector in zip(misses, vectors):
                found[text] = vector
                memo[text] = vector
        if not texts:
            return np.empty((0, self.embedder.dim), dtype=np.float32)
        return np.stack([found[t] for t in texts])

    # ------------------------------------------------------------------ validation
    def _clean_text(self, text: Any) -> str:
        if not isinstance(text, str):
            raise InvalidInputError(f"text must be a string, got {type(text).__name__}")
        cleaned = text.strip()
        if not cleaned:
            raise InvalidInputError("text is empty; an observation needs words")
        if "\x00" in cleaned:
            raise InvalidInputError("text contains a NUL character")
        if len(cleaned) > self.config.max_text_length:
            raise InvalidInputError(
                f"text is {len(cleaned)} characters, over max_text_length "
                f"({self.config.max_text_length}); split it or raise the limit"
            )
        return cleaned

    def _stamp(self, timestamp: Optional[float]) -> float:
        if timestamp is None:
            return self.now()
        seconds = real_number(timestamp)
        if seconds is None:
            raise InvalidInputError(f"timestamp must be epoch seconds, got {timestamp!r}")
        if not math.isfinite(seconds):
            raise InvalidInputError(f"timestamp must be finite, got {timestamp!r}")
        try:
            return check_epoch(seconds, timestamp)  # a stored 1e30 would break every answer that prints it
        except TimeExpressionError as exc:
            raise InvalidInputError(f"timestamp: {exc}") from None

    @staticmethod
    def _clean_layer(layer: Any) -> str:
        if not isinstance(layer, str) or not layer.strip():
            raise InvalidInputError(f"layer_name must be a non-empty string, got {layer!r}")
        return layer.strip()

    @staticmethod
    def _clean_source_type(source_type: Any) -> str:
        if source_type not in _SOURCE_TYPES:
            raise InvalidInputError(
                f"unknown source_type {source_type!r}; use one of {', '.join(sorted(_SOURCE_TYPES))}"
            )
        return str(source_type)

    @staticmethod
    def _clean_confidence(confidence: Any) -> float:
        number = real_number(confidence)
        if number is None or not math.isfinite(number) or not 0.0 <= number <= 1.0:
            raise InvalidInputError(f"confidence must be a number in [0, 1], got {confidence!r}")
        return number

    @staticmethod
    def _clean_value(value: Any) -> Optional[float]:
        if value is None:
            return None
        if isinstance(value, (bool, np.bool_)):
            return float(value)
        number = real_number(value)
        if number is None or not math.isfinite(number):
            raise InvalidInputError(f"value must be a finite number, got {value!r}")
        return number

    @staticmethod
    def _clean_metadata(metadata: Any) -> Optional[dict[str, Any]]:
        """The metadata dict, checked with the encoder the store uses (episodes keep the dict)."""
        Memory._stored_metadata(metadata)
        return metadata

    @staticmethod
    def _stored_metadata(metadata: Any) -> Optional[str]:
        """The JSON the store will keep, encoded once, now, with the store's own encoder.

        Whatever could fail at flush (keys of mixed types, NaN) fails here, as the
        caller's error, and a dict the caller changes after ``add`` changes nothing.
        """
        if metadata is None:
            return None
        if not isinstance(metadata, dict):
            raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}")
        try:
            return codec.dumps(metadata, strict=True)
        except (TypeError, ValueError, RecursionError) as exc:
            hint = "; the keys of one dict must all be strings (or all numbers)" \
                if "not supported between" in str(exc) else ""
            raise InvalidInputError(f"metadata must be JSON-serialisable: {exc}{hint}") from exc

    def _clean_embedding(self, embedding: Any) -> Optional[np.ndarray]:
        if embedding is None:
            return None
        try:
            return check_embeddings(embedding, ["embedding"], self.embedder.dim)[0]
        except EmemError as exc:
            raise InvalidInputError(f"embedding rejected: {exc}") from exc

    # ------------------------------------------------------------------ episodes
    def _resume_active_episodes(self) -> list[int]:
        """After a restart, episodes left active are active again (outermost first)."""
        rows = self.store.reader().execute(
            "SELECT id, parent_id FROM episodes WHERE status = ? ORDER BY start, id",
            (EpisodeStatus.ACTIVE.value,),
        ).fetchall()
        return [r[0] for r in rows]

    @property
    def active_episode_number(self) -> Optional[int]:
        with self._episode_lock:
            return self._episodes[-1] if self._episodes else None

    @property
    def active_episode_id(self) -> Optional[str]:
        number = self.active_episode_number
        return make_id(NodeKind.EPISODE, number) if number is not None else None

    def start_episode(self, name: str, parent_episode_id: Optional[str] = None,
                      goal: Optional[str] = None, metadata: Optional[dict[str, Any]] = None) -> str:
        """Open an episode; with a parent it is a SUBTASK_OF it, and FOLLOWS its last sibling."""
        self._check_open()
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError("an episode needs a non-empty name")
        parent = self._episode_number(parent_episode_id) if parent_episode_id else None
        self._flush_before_episode_change()
        with self._episode_lock:
            number = self.store.create_episode(name.strip(), self.now(), parent, goal,
                                               self._clean_metadata(metadata))
            self._episodes.append(number)
        return make_id(NodeKind.EPISODE, number)

    def end_episode(self, consolidate: bool = True, result: Optional[str] = None,
                    reflection: Optional[str] = None, success: Optional[bool] = None) -> Optional[str]:
        """Close the innermost active episode; returns its id, or None if none was active."""
        self._check_open()
        with self._episode_lock:
            if not self._episodes:
                return None
            self._flush_before_episode_change()
            number = self._episodes.pop()
        self.store.finish_episode(number, self.now(), result=result, reflection=reflection, success=success)
        for hook in list(self._episode_end_hooks):
            try:
                hook(self, number, consolidate)
            except Exception:
                log.exception("episode-end hook failed for episode %s", number)
        return make_id(NodeKind.EPISODE, number)

    def _flush_before_episode_change(self) -> None:
        """Store what the ending episode saw, best-effort: an episode boundary must not fail
        because the embedder is down. Buffered observations already carry the episode
        they were added in, so storing them later keeps the boundary right."""
        try:
            self._wm.flush()
        except Exception as exc:
            log.warning("episode change with %d observations still waiting to be stored (they keep their"
                        " episode): %s", len(self._wm), exc)

    def on_episode_end(self, hook: EpisodeHook) -> None:
        self._episode_end_hooks.append(hook)

    @staticmethod
    def _episode_number(episode_id: str) -> int:
        try:
            kind, number = parse_id(episode_id)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        if kind is not NodeKind.EPISODE:
            raise InvalidInputError(f"{episode_id} is not an episode id (those look like 'ep-3')")
        return number

    # ------------------------------------------------------------------ experiences
    @property
    def ledger(self):
        """The experience ledger (created on first use: most robots never need it)."""
        with self._ledger_lock:
            if self._ledger is None:
                from emem_ros.agent.ledger import ExperienceLedger

                self._check_open()
                self._ledger = ExperienceLedger(self, embed_interval=0.5 if self.config.flush_interval > 0 else 0.0)
            return self._ledger

    def record_experience(self, goal: str, action: str = "", result: str = "", reflection: str = "",
                          success: Optional[bool] = None, **kwargs: Any) -> str:
        """Append an immutable experience; returns its content id (SHA-256)."""
        self._check_open()
        return self.ledger.record(goal, action, result, reflection, success, **kwargs)

    # ------------------------------------------------------------------ lifecycle
    def save(self) -> None:
        self.flush()
        self.store.save_indexes()

    def close(self) -> None:
        """Flush, stop timers, save indexes, close files. Safe to call twice."""
        if self._closed:
            return
        self._close_consolidation()
        if self._ledger is not None:
            self._ledger.close()
        self._closed = True
        self._wm.stop()
        if self._index_saver is not None:
            self._index_saver.stop()
        try:
            self._final_flush()
        finally:
            self.store.close()

    def _final_flush(self) -> None:
        """Store the buffer before closing; nothing may be lost here.

        1. the usual flush; 2. if it fails (the embedder is down), store the
        texts without their vectors: the next open, or the next successful
        embedding, adds them (``store.backfill_vectors``); 3. whatever still
        cannot be stored goes to the dead-letter file, with a logged error.
        Raises only when even that file cannot be written.
        """
        try:
            self._wm.flush()
            return
        except Exception as exc:
            log.warning("final flush failed (%s); storing %d observations without their vectors", exc,
                        len(self._wm))
        try:
            self._wm.flush(sink=self._write_batch_deferring)
            return
        except Exception as exc:
            reason = exc
        items = self._wm.take_all()
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

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise EmemError("this memory is closed")

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def get_observation(self, node_id: str):
        try:
            return self.store.get_observation(node_id)
        except ValueError as exc:
            raise UnknownNodeError(str(exc)) from exc
