"""Memory: the facade a robot node, a bag replay or any Python agent talks to.

Ingestion mirrors the peer ``emem`` package (``add``, ``add_body_state``,
``start_episode``, ``end_episode``, ``flush``, ``close``) and so do the tool
methods (``memory.locate(...)`` answers text), so code written for it runs
unchanged. The facade only composes: the ``Engine`` (store, clock,
embedding, ingest path, episodes), the tools and their query cache, the
consolidation service and the experience ledger; and it owns the close order.
Nothing below it imports it. Failure behaviour is described in
``engine/ingest.py``.
"""

from __future__ import annotations

import inspect
import threading
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np

from emem_ros.agent.ledger import ExperienceLedger
from emem_ros.agent.tools import AGENT_TOOLS, AgentEnv
from emem_ros.agent.transfer import ExportReport, ImportReport, export_memory, import_file
from emem_ros.consolidation.archival import ArchiveReport
from emem_ros.consolidation.entities import EntityReport
from emem_ros.consolidation.episodes import EpisodeReport
from emem_ros.consolidation.gists import ConsolidationReport
from emem_ros.consolidation.service import ConsolidationService, JobReport, MaintenanceReport
from emem_ros.core.config import MemoryConfig
from emem_ros.core.timeexpr import TimeLike
from emem_ros.core.types import Observation, Position
from emem_ros.embeddings.base import EmbeddingProvider
from emem_ros.engine import Engine, EpisodeHook
from emem_ros.forgetting import ForgetReport, Forgetter, make_selector
from emem_ros.forgetting.audit import ForgetEntry, entries
from emem_ros.forgetting.retention import apply_retention, has_policies
from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.memfs import MemFS
from emem_ros.memfs.tools import FS_TOOLS
from emem_ros.storage.store import MemoryStore, NewObservation, WriteReport
from emem_ros.tools.api import MemoryTools
from emem_ros.tools.query_cache import QueryCache
from emem_ros.tools.registry import ToolSpec
from emem_ros.tools.spec import ToolDef
from emem_ros.tools.specs import TOOL_SPECS


def default_embedding_provider() -> EmbeddingProvider:
    """The bundled all-MiniLM-L6-v2: on ONNX Runtime where it is installed, else sentence-transformers."""
    from emem_ros.embeddings.factory import make_embedder

    return make_embedder("auto")


class Memory:
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
        config.validate()
        self.llm_client = llm_client
        self.engine = Engine(config, embedding_provider or default_embedding_provider(), get_current_time)
        self._ledger: Optional[ExperienceLedger] = None
        self._ledger_lock = threading.Lock()
        self._fs: Optional[MemFS] = None
        try:
            self._cache = QueryCache.for_engine(self.engine)
            env = AgentEnv(self.engine, ledger=lambda: self.ledger, cache=self._cache)
            env.forget = self.forget
            env.memfs = lambda: self.fs
            agent_tools = tuple(replace(t, llm=True) if t.name == "forget" and config.allow_llm_forget else t
                                for t in AGENT_TOOLS)
            self.tools = MemoryTools(env, (*TOOL_SPECS, *agent_tools, *FS_TOOLS), self._cache)
            self._consolidation = ConsolidationService(self.engine, llm_client)
            if has_policies(config):
                self._consolidation.retention = self._apply_retention
            self.engine.on_episode_end(self._consolidation.on_episode_end)
        except BaseException:  # a failed open must not leave threads, files or the process lock behind
            self.engine.close()
            raise

    # ------------------------------------------------------------------ the parts, as eMEM names them
    @property
    def config(self) -> MemoryConfig:
        return self.engine.config

    @property
    def store(self) -> MemoryStore:
        return self.engine.store

    @property
    def embedder(self) -> EmbeddingProvider:
        return self.engine.embedding.provider

    @property
    def stats(self) -> dict[str, int]:
        """Ingest counters, plus the writer lock's longest hold and worst per-caller p99 (ms) since open."""
        lock = self.engine.store.write_lock.stats()
        return {**self.engine.ingest_stats, "writer_lock_max_ms": round(lock["max_hold_ms"]),
                "writer_lock_p99_ms": round(max((h["p99_ms"] for h in lock["holds"].values()), default=0.0))}

    @property
    def writer_lock_stats(self) -> dict[str, Any]:
        """How long each writer (``module.function``) held the writer lock and waited for it (``WriterLock``)."""
        return self.engine.store.write_lock.stats()

    @property
    def last_write(self) -> Optional[WriteReport]:
        return self.engine.last_write

    @property
    def dead_letter_path(self) -> Path:
        return self.engine.dead_letter_path

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        """The memory's clock: the ROS clock on a robot, bag time in a replay."""
        return self.engine.now()

    def set_clock(self, get_current_time: Callable[[], float]) -> None:
        self.engine.set_clock(get_current_time)

    def resolve_time(self, value: TimeLike) -> Optional[float]:
        return self.engine.resolve_time(value)

    def set_live_pose(self, source: Optional[Callable[[], Optional[Position]]]) -> None:
        """Where the robot is now (get_current_context reports it); a ROS node passes its odometry."""
        self.engine.set_live_pose(source)

    def embed_query(self, text: str) -> np.ndarray:
        return self.engine.embed_query(text)

    # ------------------------------------------------------------------ ingestion
    def add(self, text: str, x: Optional[float] = None, y: Optional[float] = None, z: Optional[float] = 0.0,
            timestamp: Optional[float] = None, layer_name: str = "default", source_type: str = "manual",
            confidence: float = 1.0, metadata: Optional[dict[str, Any]] = None, embedding: Optional[np.ndarray] = None,
            *, frame_id: Optional[str] = None, value: Optional[float] = None, position_is: Optional[str] = None,
            view_range: Optional[float] = None) -> str:
        """Buffer one observation and return its id; x=y=None means 'position unknown'.

        ``position_is``: 'thing' (x, y is where the thing itself is) or 'robot' (where the robot stood
        when it perceived it, within ``view_range`` metres); unsaid, the layer's ``declare_layer``
        holds, and with neither the position is read as where it was perceived from (docs/locate.md).
        """
        return self.engine.add(text, x, y, z, timestamp, layer_name, source_type, confidence, metadata, embedding,
                               frame_id=frame_id, value=value, position_is=position_is, view_range=view_range)

    def declare_layer(self, layer: str, position_is: str, view_range: Optional[float] = None) -> None:
        """Say once what a layer's positions mean: 'thing' or 'robot' (and how far it perceives, metres).

        Kept in the memory file: every later ``add`` to the layer (and every process opening the file) reads it.
        """
        self.engine.declare_layer(layer, position_is, view_range)

    def add_body_state(self, text: str, layer_name: str, x: Optional[float] = None, y: Optional[float] = None,
                       z: Optional[float] = 0.0, timestamp: Optional[float] = None, confidence: float = 1.0,
                       metadata: Optional[dict[str, Any]] = None, *, value: Optional[float] = None) -> str:
        """An interoception reading: only ``body_status`` ever returns it."""
        return self.engine.add_body_state(text, layer_name, x, y, z, timestamp, confidence, metadata, value=value)

    def add_draft(self, draft: ObservationDraft, robot_position: Optional[Position] = None) -> str:
        """The ROS and replay path: a draft's own position wins over the robot's."""
        return self.engine.add_draft(draft, robot_position)

    def flush(self) -> int:
        """Store everything buffered now; raises (batch kept) if storing fails."""
        return self.engine.flush()

    def flush_for_query(self) -> int:
        """Best-effort flush before answering a question; returns how many observations still wait."""
        return self.engine.flush_for_query()

    def unstored_note(self) -> Optional[str]:
        return self.engine.unstored_note()

    @property
    def pending(self) -> int:
        return self.engine.pending

    def recent_buffered(self, n: Optional[int] = None) -> list[NewObservation]:
        return self.engine.recent_buffered(n)

    def get_observation(self, node_id: str) -> Observation:
        return self.engine.get_observation(node_id)

    # ------------------------------------------------------------------ episodes
    @property
    def active_episode_number(self) -> Optional[int]:
        return self.engine.active_episode_number

    @property
    def active_episode_id(self) -> Optional[str]:
        return self.engine.active_episode_id

    def start_episode(self, name: str, parent_episode_id: Optional[str] = None,
                      goal: Optional[str] = None, metadata: Optional[dict[str, Any]] = None,
                      agent_id: Optional[str] = None) -> str:
        """Open an episode; with a parent it is a SUBTASK_OF it, and FOLLOWS its last sibling.

        With ``agent_id`` the agent's MemFS session opens too and ends with the episode.
        """
        episode_id = self.engine.start_episode(name, parent_episode_id, goal, metadata)
        if agent_id:
            self.fs.open_for_episode(agent_id, episode_id)
        return episode_id

    def end_episode(self, consolidate: bool = True, result: Optional[str] = None,
                    reflection: Optional[str] = None, success: Optional[bool] = None) -> Optional[str]:
        """Close the innermost active episode (consolidated in the background); its id, or None."""
        return self.engine.end_episode(consolidate, result, reflection, success)

    def on_episode_end(self, hook: EpisodeHook) -> None:
        """``hook(episode_number, consolidate)`` after every end_episode."""
        self.engine.on_episode_end(hook)

    # ------------------------------------------------------------------ experiences
    @property
    def ledger(self) -> ExperienceLedger:
        """The experience ledger (created on first use: most robots never need it)."""
        with self._ledger_lock:
            if self._ledger is None:
                self.engine.check_open()
                self._ledger = ExperienceLedger(self.engine,
                                                embed_interval=0.5 if self.config.flush_interval > 0 else 0.0)
            return self._ledger

    # ------------------------------------------------------------------ MemFS
    @property
    def fs(self) -> MemFS:
        """The planners' own filesystem (``emem_ros/memfs``), made on first use: ``memory.fs.session(agent_id)``."""
        with self._ledger_lock:
            if self._fs is None:
                self.engine.check_open()
                self._fs = MemFS(self.engine)
                self.engine.on_episode_end(self._fs.on_episode_end)
            return self._fs

    def record_experience(self, goal: str, action: str = "", result: str = "", reflection: str = "",
                          success: Optional[bool] = None, **kwargs: Any) -> str:
        """Append an immutable experience; returns its content id (SHA-256)."""
        self.engine.check_open()
        return self.ledger.record(goal, action, result, reflection, success, **kwargs)

    # ------------------------------------------------------------------ tool calling
    def get_tool_definitions(self, include_actions: bool = True) -> list[dict[str, Any]]:
        """OpenAI / Ollama ``tools`` entries for the ten tools (and the write actions)."""
        return self.tools.definitions(include_actions)

    def dispatch_tool_call(self, tool_name: str, arguments: Any = None) -> str:
        """Run a tool call (arguments: dict or JSON text); errors come back as text, never raised."""
        return self.tools.dispatch(tool_name, arguments)

    def get_tools_for_registration(self,
                                   include_actions: bool = True) -> list[tuple[Callable[..., str], dict[str, Any]]]:
        return self.tools.for_registration(include_actions)

    def register_tool(self, spec: ToolSpec | ToolDef, replace: bool = False) -> None:
        """Add a tool to the LLM surface: a ``ToolDef`` (run on the tools' env) or a ``ToolSpec`` (any handler)."""
        if isinstance(spec, ToolDef):
            self.tools.add(spec, replace=replace)
        else:
            self.tools.registry.register(spec, replace=replace)

    # ------------------------------------------------------------------ consolidation (on the one worker thread)
    def maintenance(self, timeout: Optional[float] = None) -> MaintenanceReport:
        """Extract entities, consolidate the time window, archive; on the worker, waiting for it."""
        self.engine.check_open()
        return self._consolidation.maintenance(timeout)

    def consolidate_time_window(self, timeout: Optional[float] = None) -> ConsolidationReport:
        """Gists from short-term observations older than ``consolidation_window`` (outside active episodes)."""
        self.engine.check_open()
        return self._consolidation.time_window_gists(timeout)

    def extract_entities(self, timeout: Optional[float] = None, final: bool = False) -> EntityReport:
        """Entities from observations written since the last run; ``final`` also closes the visit in progress."""
        self.engine.check_open()
        return self._consolidation.extract_entities(timeout, final=final)

    def archive(self, timeout: Optional[float] = None) -> ArchiveReport:
        """Move long-term observations older than ``archive_after_seconds`` (since promotion) to the cold store."""
        self.engine.check_open()
        return self._consolidation.archive(timeout)

    def submit_maintenance(self) -> Future[MaintenanceReport]:
        self.engine.check_open()
        return self._consolidation.submit_maintenance()

    def submit_job(self, job: str) -> Future[JobReport]:
        """Queue one job ('maintenance', 'entities', 'time_window', 'archive') and return at once.

        For timers that schedule the steps separately (a ROS node's
        consolidation and archive periods); an equal job still queued is not
        queued twice.
        """
        self.engine.check_open()
        return self._consolidation.submit(job)

    def consolidate_episode(self, episode_id: str) -> Future[EpisodeReport]:
        """Queue (again) the consolidation of an ended episode; a Future of its EpisodeReport."""
        self.engine.check_open()
        return self._consolidation.submit_episode(self.engine.episode_number(episode_id))

    def wait_for_consolidation(self, timeout: Optional[float] = None) -> bool:
        """Block until queued consolidation work is done; False if ``timeout`` passed first."""
        return self._consolidation.worker.wait_idle(timeout)

    @property
    def consolidation_status(self) -> dict[str, Any]:
        service = self._consolidation
        status = service.worker.status()
        status["pending_episodes"] = service.book.snapshot().pending if not self.store.closed else []
        status["llm"] = service.summarizer is not None
        status["summaries"] = {"llm": service.writer.stats.llm, "fallback": service.writer.stats.fallback,
                               "llm_failures": service.writer.stats.llm_failures}
        return status

    def read_archived(self, ids: Optional[Iterable[str]] = None) -> Iterator[dict[str, Any]]:
        """Archived raw observations from the cold store (``{"id": "obs-12", "text": ..., ...}``)."""
        return self._consolidation.cold.iter_records(ids)

    # ------------------------------------------------------------------ export and import
    def export_to(self, out_path: str | Path, since: Any = None, until: Any = None,
                  episode_id: Optional[str] = None) -> ExportReport:
        """Everything (or a time range, or an episode) to a JSON-lines file, embeddings included."""
        return export_memory(self.engine, out_path, since, until, episode_id, ledger=self._ledger)

    def import_from(self, path: str | Path) -> ImportReport:
        """Merge an export into this memory without duplicates (content keys)."""
        return import_file(self.engine, path, cold=self._consolidation.cold)

    # ------------------------------------------------------------------ forgetting
    def forget(self, ids: Optional[Iterable[str] | str] = None, match: Optional[str] = None,
               similar_to: Optional[str] = None, min_similarity: Optional[float] = None,
               entity: Optional[str] = None, x: Optional[float] = None, y: Optional[float] = None,
               radius: Optional[float] = None, since: TimeLike = None, until: TimeLike = None,
               layer: Optional[str] = None, *, reason: str = "", who: Optional[str] = None,
               dry_run: bool = False, timeout: Optional[float] = None) -> ForgetReport:
        """Erase what the criteria name (all must hold) from the memory and every file it keeps.

        ``match``: exact words, case-insensitive; ``similar_to`` + ``min_similarity``: by meaning;
        ``entity``: 'ent-3' or a name; ``x, y, radius``: a region; ``since``/``until``: times;
        ``layer``. ``dry_run`` lists what would go. Runs on the consolidation worker (nothing
        consolidates or archives the rows meanwhile) in short write transactions. See
        ``emem_ros/forgetting``.
        """
        self.engine.check_open()
        selector = make_selector(ids=list(ids) if ids is not None and not isinstance(ids, str) else ids,
                                 match=match, similar_to=similar_to, min_similarity=min_similarity, entity=entity,
                                 x=x, y=y, radius=radius, since=self.resolve_time(since),
                                 until=self.resolve_time(until), layer=layer)
        forgetter = Forgetter(self.engine, self._consolidation.cold, summaries=self._consolidation.writer)

        def job(_stop: Any) -> ForgetReport:
            report = forgetter.forget(selector, reason=reason, who=who, dry_run=dry_run)
            if not dry_run:
                self._forget_memos()
            return report

        worker = self._consolidation.worker
        if worker.in_worker():
            return job(None)
        return worker.submit("forget", job).result(timeout)

    def _apply_retention(self) -> Optional[ForgetReport]:
        """On the consolidation worker (maintenance): forget what the retention policies say is too old."""
        report = apply_retention(self.engine, self._consolidation.cold, self._consolidation.writer)
        if report is not None and report.forget_id is not None:
            self._forget_memos()
        return report

    def forget_log(self, limit: int = 0) -> list[ForgetEntry]:
        """The audit trail: every forget and retention run (never what was forgotten)."""
        return entries(self.store.reader(), limit)

    def _forget_memos(self) -> None:
        """In-memory copies of answers, rows and vectors that may quote forgotten content."""
        self._cache.clear()
        self._consolidation.forget_memos()
        embedding = self.engine.embedding
        with embedding._lock:
            embedding._memo.clear()
        with embedding.embed_query._lock:
            embedding.embed_query._items.clear()

    # ------------------------------------------------------------------ lifecycle
    def save(self) -> None:
        self.engine.save()

    def close(self) -> None:
        """Finish or abandon consolidation, close the ledger, store the buffer, close files. Safe twice."""
        if self.engine.closed:
            return
        self._consolidation.close(float(self.config.consolidation_close_timeout))
        if self._fs is not None:
            self._fs.close()
        if self._ledger is not None:
            self._ledger.close()
        self.engine.close()

    @property
    def closed(self) -> bool:
        return self.engine.closed

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _text_method(tool: ToolDef) -> Callable[..., str]:
    """eMEM's tool method on the facade: the typed tool's answer as text."""
    def method(self: Memory, *args: Any, **kwargs: Any) -> str:
        return str(self.tools.call(tool.name, *args, **kwargs))

    method.__name__ = method.__qualname__ = tool.name
    method.__doc__ = tool.description
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = tool.signature.replace(  # type: ignore[attr-defined]  # for help() and inspect
        parameters=[self_param, *tool.signature.parameters.values()], return_annotation=str)
    return method


for _tool in TOOL_SPECS:  # derived from the declarations, at import: one place says what a tool is
    if _tool.facade:
        setattr(Memory, _tool.name, _text_method(_tool))
