"""The engine: one memory file's store, clock, embedding, ingest path and episodes.

Everything below the ``Memory`` facade (tools, consolidation, the agent
parts) works on an ``Engine``; the facade builds one, composes the rest
around it and owns the close order. Nothing here knows the facade.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

import emem_ros.engine.validation as check
from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import EmemError, UnknownNodeError
from emem_ros.core.periodic import PeriodicThread
from emem_ros.core.timeexpr import TimeLike, parse_time, time_zone
from emem_ros.core.types import NodeKind, Observation, Position, SourceType, finite_position, make_id
from emem_ros.embeddings.base import EmbeddingProvider
from emem_ros.engine.embedding import Embedding
from emem_ros.engine.episodes import EpisodeHook, EpisodeStack, episode_number
from emem_ros.engine.ingest import IngestPath
from emem_ros.engine.positions import SOURCE_KEY, THING, Declarations, LayerPositions
from emem_ros.engine.questions import QuestionGate
from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.storage.store import MemoryStore, NewObservation, WriteReport

log = logging.getLogger(__name__)

Clock = Callable[[], float]
PoseSource = Callable[[], Optional[Position]]


class Engine:
    def __init__(self, config: MemoryConfig, provider: EmbeddingProvider, clock: Optional[Clock] = None) -> None:
        self.config = config
        self.embedding = Embedding(provider)
        self._clock: Clock = clock or time.time
        self.zone = time_zone(config.timezone)
        """The memory's time zone: day words and clock times in questions are read in it."""
        self._live_pose: Optional[PoseSource] = None
        self._closed = False
        self.questions = QuestionGate()
        """Questions in progress: writers wait while one runs (``MemoryTools.call`` enters it)."""
        self.store = MemoryStore(config, self.embedding.dim, self.embedding.name)
        self.ingest: Optional[IngestPath] = None
        self._index_saver: Optional[PeriodicThread] = None
        try:
            if self.store.needs_reembed:
                self.store.reembed_all(self.embedding.embed_texts)
            self.positions = Declarations(self.store)
            """What each layer's positions are (``engine/positions.py``), as ``declare_layer`` said."""
            self.ingest = IngestPath(self.store, self.embedding, config)
            self.ingest.backfill_vectors("at open")
            self.episodes = EpisodeStack(self.store, self.now,
                                         lambda: self._ingest.flush_best_effort("episode change"))
            if config.index_save_interval > 0:
                self._index_saver = PeriodicThread(
                    "emem-index-save", config.index_save_interval, self.store.save_indexes).start()
        except BaseException:  # a failed open must not leave threads, files or the process lock behind
            if self.ingest is not None:
                self.ingest.stop()
            self.store.close()
            raise

    @property
    def _ingest(self) -> IngestPath:
        assert self.ingest is not None  # set in __init__ before anything can call
        return self.ingest

    # ------------------------------------------------------------------ clock and pose
    def now(self) -> float:
        """The memory's clock: the ROS clock on a robot, bag time in a replay."""
        return float(self._clock())

    def set_clock(self, clock: Clock) -> None:
        self._clock = clock

    def resolve_time(self, value: TimeLike) -> Optional[float]:
        return parse_time(value, self.now(), self.zone)

    def set_live_pose(self, source: Optional[PoseSource]) -> None:
        """Where the robot is right now (a ROS node passes its odometry); None: not known live."""
        self._live_pose = source

    def live_pose(self) -> Optional[Position]:
        source = self._live_pose
        if source is None:
            return None
        try:
            return source()
        except Exception:  # a pose is decoration for an answer; never fail a question for it
            log.debug("the live pose source failed", exc_info=True)
            return None

    # ------------------------------------------------------------------ embedding
    @property
    def dim(self) -> int:
        return self.embedding.dim

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        return self.embedding.embed_texts(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embedding.embed_query(text)

    # ------------------------------------------------------------------ ingestion
    def add(self, text: str, x: Any = None, y: Any = None, z: Any = 0.0, timestamp: Any = None,
            layer_name: str = "default", source_type: str = "manual", confidence: Any = 1.0,
            metadata: Optional[dict[str, Any]] = None, embedding: Any = None, *,
            frame_id: Optional[str] = None, value: Any = None, position_is: Any = None,
            view_range: Any = None) -> str:
        """Buffer one observation and return its id; x=y=None means 'position unknown'.

        ``position_is`` ('thing' or 'robot') and ``view_range`` say what the
        position means (``engine/positions.py``); unsaid, the layer's declaration holds.
        """
        self.check_open()
        if self.questions.active:  # a question of another thread goes first (``questions.py``)
            self.questions.writer_turn()
        layer = check.clean_layer(layer_name)
        source = check.clean_source_type(source_type)
        position = finite_position(x, y, z)
        if position is not None and source != SourceType.INTEROCEPTION.value:
            metadata = self.positions.mark(layer, metadata, position_is, view_range)
        observation = NewObservation(
            id=0,
            text=check.clean_text(text, self.config.max_text_length),
            stamp=self.now() if timestamp is None else check.clean_stamp(timestamp),
            layer=layer,
            source_type=source,
            position=position,
            frame_id=frame_id or self.config.frame_id,
            confidence=check.clean_confidence(confidence),
            episode_id=self.episodes.active_number,
            value=check.clean_value(value),
            metadata_json=check.stored_metadata(metadata),
            embedding=check.clean_embedding(embedding, self.dim),
        )
        observation.id = self.store.allocate_observation_id()
        self._ingest.put(observation)
        return make_id(NodeKind.OBSERVATION, observation.id)

    def add_draft(self, draft: ObservationDraft, robot_position: Optional[Position] = None) -> str:
        """The ROS and replay path: a draft's own position wins over the robot's."""
        position = draft.position if draft.position is not None else robot_position
        x, y, z = position if position is not None else (None, None, None)
        metadata = dict(draft.metadata)
        if draft.position is None and robot_position is not None:
            metadata.setdefault(SOURCE_KEY, "odometry")
        # A draft's own position is the thing's (a 3-D detection); the adapters' marks say more and win.
        said = THING if draft.position is not None and SOURCE_KEY not in metadata else None
        return self.add(draft.text, x, y, z, draft.stamp, draft.layer, draft.source_type,
                        draft.confidence, metadata or None, frame_id=draft.frame_id, value=draft.value,
                        position_is=said)

    def declare_layer(self, layer: str, position_is: Any, view_range: Any = None) -> LayerPositions:
        """Say once what a layer's positions are: 'thing' (its own) or 'robot' (where it was perceived from,
        within ``view_range`` metres); kept in the memory file. Observations stored afterwards carry it."""
        self.check_open()
        return self.positions.declare(check.clean_layer(layer), position_is, view_range)

    def add_body_state(self, text: str, layer_name: str, x: Any = None, y: Any = None, z: Any = 0.0,
                       timestamp: Any = None, confidence: Any = 1.0, metadata: Optional[dict[str, Any]] = None,
                       *, value: Any = None) -> str:
        """An interoception reading: only ``body_status`` ever returns it."""
        return self.add(text, x, y, z, timestamp, layer_name, SourceType.INTEROCEPTION.value,
                        confidence, metadata, value=value)

    def flush(self) -> int:
        self.check_open()
        return self._ingest.flush()

    def flush_for_query(self) -> int:
        self.check_open()
        return self._ingest.flush_for_query()

    def unstored_note(self) -> Optional[str]:
        return self._ingest.unstored_note()

    @property
    def pending(self) -> int:
        return self._ingest.pending

    def recent_buffered(self, n: Optional[int] = None) -> list[NewObservation]:
        return self._ingest.recent(n)

    @property
    def ingest_stats(self) -> dict[str, int]:
        return self._ingest.stats

    @property
    def last_write(self) -> Optional[WriteReport]:
        return self._ingest.last_write

    @property
    def dead_letter_path(self) -> Path:
        return self._ingest.dead_letter_path

    def get_observation(self, node_id: str) -> Observation:
        try:
            return self.store.get_observation(node_id)
        except ValueError as exc:
            raise UnknownNodeError(str(exc)) from exc

    # ------------------------------------------------------------------ episodes
    @property
    def active_episode_number(self) -> Optional[int]:
        return self.episodes.active_number

    @property
    def active_episode_id(self) -> Optional[str]:
        return self.episodes.active_id

    def start_episode(self, name: str, parent_episode_id: Optional[str] = None, goal: Optional[str] = None,
                      metadata: Optional[dict[str, Any]] = None) -> str:
        self.check_open()
        return self.episodes.start(name, parent_episode_id, goal, metadata)

    def end_episode(self, consolidate: bool = True, result: Optional[str] = None,
                    reflection: Optional[str] = None, success: Optional[bool] = None) -> Optional[str]:
        self.check_open()
        return self.episodes.end(consolidate, result, reflection, success)

    def on_episode_end(self, hook: EpisodeHook) -> None:
        self.episodes.on_end(hook)

    @staticmethod
    def episode_number(episode_id: Any) -> int:
        return episode_number(episode_id)

    # ------------------------------------------------------------------ lifecycle
    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise EmemError("this memory is closed")

    def save(self) -> None:
        self.flush()
        self.store.save_indexes()

    def close(self) -> None:
        """Stop the timers, store the buffer, save indexes, close files. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._ingest.stop()
        if self._index_saver is not None:
            self._index_saver.stop()
        try:
            self._ingest.final_flush()
        finally:
            self.store.close()


__all__ = ["Engine", "EpisodeHook", "episode_number"]
