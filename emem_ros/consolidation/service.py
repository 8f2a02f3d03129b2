"""Wiring: the engines, the worker, the episode hook and the optional maintenance timer."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from emem_ros.consolidation.archival import Archiver, ArchiveReport
from emem_ros.consolidation.coldstore import ColdStore
from emem_ros.consolidation.entities import EntityExtractor, EntityReport
from emem_ros.consolidation.episodes import EpisodeBook, EpisodeConsolidator, EpisodeReport
from emem_ros.consolidation.gists import ConsolidationReport, TimeWindowConsolidator
from emem_ros.consolidation.offload import MaintenanceProcess
from emem_ros.consolidation.rows import RowMemo
from emem_ros.consolidation.summaries import SummarizerLike, SummaryWriter, is_summarizer
from emem_ros.consolidation.worker import ConsolidationWorker, WorkerClosedError
from emem_ros.core.collector import CollectorPause
from emem_ros.core.errors import InvalidInputError, StoreError
from emem_ros.core.periodic import PeriodicThread

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)


@dataclass
class MaintenanceReport:
    entities: EntityReport = field(default_factory=EntityReport)
    consolidation: ConsolidationReport = field(default_factory=ConsolidationReport)
    archive: ArchiveReport = field(default_factory=ArchiveReport)
    retention: Any = None
    """What the retention policies forgot (a ForgetReport), or None without policies."""
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return self.entities.complete and self.consolidation.complete and self.archive.complete


def make_summarizer(llm_client: object, max_seconds: Optional[float] = None) -> Optional[SummarizerLike]:
    """None without an LLM; an ``llm.Summarizer`` as is; anything else wrapped in one.

    ``max_seconds`` (config ``llm_timeout``) bounds each summary in wall-clock
    time: a client's own timeout is per read, and a server that trickles bytes
    would otherwise hold the consolidation worker indefinitely.
    """
    if llm_client is None:
        return None
    if is_summarizer(llm_client):
        return llm_client
    from emem_ros.consolidation.llm import Summarizer

    return Summarizer(llm_client, max_seconds=max_seconds)


def check_config(config: Any) -> None:
    """The consolidation fields ``MemoryConfig.validate`` does not know about."""
    for name in ("consolidation_min_dwell", "consolidation_close_timeout", "maintenance_interval"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise InvalidInputError(f"{name} must be zero or a positive number of seconds, got {value!r}")
    size = config.archive_batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidInputError(f"archive_batch_size must be a positive integer, got {size!r}")


class ConsolidationService:
    def __init__(self, engine: "Engine", llm_client: Any = None) -> None:
        check_config(engine.config)
        self.engine = engine
        self.summarizer = make_summarizer(llm_client, engine.config.llm_timeout)
        self.writer = SummaryWriter(self.summarizer)
        self.book = EpisodeBook(engine)
        self.rows = RowMemo()
        """Rows shared by the time-window and entity passes (see ``RowMemo``)."""
        path = Path(engine.config.db_path)
        self.offload = (MaintenanceProcess(path) if engine.config.maintenance_process and path.is_file()
                        else None)
        """The child process that maintenance's reading and planning run in (started at its first request)."""
        self.time_window = TimeWindowConsolidator(engine, self.writer, self.rows, self.offload)
        self.episodes = EpisodeConsolidator(engine, self.writer, self.book)
        self.entities = EntityExtractor(engine, self.summarizer, self.rows, self.offload)
        self.cold = ColdStore(path.with_name(path.name + ".cold"))
        self.archiver = Archiver(engine, self.cold, self.offload)
        self.retention: Optional[Callable[[], Any]] = None
        """Run after archival by maintenance (the facade sets it to apply the retention policies)."""
        gc_pause = engine.config.consolidation_gc_pause
        self.worker = ConsolidationWorker(pause=engine.questions.writer_turn,  # questions go first
                                          collector=CollectorPause(gc_pause) if gc_pause > 0 else None)
        self.last: dict[str, Any] = {}
        self._timer: Optional[PeriodicThread] = None
        for number in self.book.snapshot().pending:  # abandoned at the last shutdown (or a crash)
            self.submit_episode(number)
        if engine.config.maintenance_interval > 0:
            self._timer = PeriodicThread("emem-maintenance-timer", engine.config.maintenance_interval,
                                         self._timer_tick).start()

    # ------------------------------------------------------------------ jobs
    def _job(self, name: str, fn: Callable[[threading.Event], Any]) -> Callable[[threading.Event], Any]:
        def run(stop: threading.Event) -> Any:
            result = fn(stop)
            self.last[name] = result
            return result
        return run

    def submit(self, kind: str, **options: Any) -> Future:
        jobs: dict[str, Callable[[threading.Event], Any]] = {
            "maintenance": self._maintenance,
            "time_window": lambda stop: self.time_window.run(stop),
            "entities": lambda stop: self.entities.run(stop, final=bool(options.get("final"))),
            "archive": self._archive,
        }
        if kind not in jobs:
            raise InvalidInputError(f"unknown consolidation job {kind!r}; use one of {', '.join(jobs)}")
        key = kind if not options else None
        return self.worker.submit(kind, self._job(kind, jobs[kind]), key=key)

    def submit_episode(self, number: int) -> Future:
        def run(stop: threading.Event) -> EpisodeReport:
            try:
                return self.episodes.run(number, stop)
            except Exception:
                if not (stop.is_set() or self.engine.store.closed):
                    log.exception("consolidating episode %d failed; its observations go to the time window", number)
                    self.book.release(number)
                raise
        return self.worker.submit(f"episode {number}", self._job("episode", run), key=f"episode:{number}")

    def run(self, kind: str, timeout: Optional[float] = None, **options: Any) -> Any:
        """Run a job on the worker and wait; from the worker itself, run inline.

        On ``timeout`` this raises ``concurrent.futures.TimeoutError`` and the
        job carries on in the background (it is not cancelled half-way).
        """
        if self.worker.in_worker():
            return self._inline(kind, **options)
        return self.submit(kind, **options).result(timeout)

    def _inline(self, kind: str, **options: Any) -> Any:
        stop = self.worker.stop_event
        if kind == "maintenance":
            return self._maintenance(stop)
        if kind == "time_window":
            return self.time_window.run(stop)
        if kind == "entities":
            return self.entities.run(stop, final=bool(options.get("final")))
        if kind == "archive":
            return self._archive(stop)
        raise InvalidInputError(f"unknown consolidation job {kind!r}")

    def _maintenance(self, stop: threading.Event) -> MaintenanceReport:
        started = time.perf_counter()
        report = MaintenanceReport()
        report.entities = self.entities.run(stop)
        if not stop.is_set():
            report.consolidation = self.time_window.run(stop)
        if not stop.is_set():
            report.archive = self._archive(stop)
        if self.retention is not None and not stop.is_set():
            report.retention = self.retention()
        report.seconds = time.perf_counter() - started
        return report

    def _archive(self, stop: threading.Event) -> ArchiveReport:
        # Entities first: archival removes the texts they are extracted from.
        self.entities.run(stop)
        return self.archiver.run(stop)

    # ------------------------------------------------------------------ hooks and timers
    def on_episode_end(self, number: int, consolidate: bool) -> None:
        """Called by ``end_episode``: record the request durably, queue the work, return."""
        self.book.request(number, consolidate)
        if consolidate:
            try:
                self.submit_episode(number)
            except WorkerClosedError:
                log.info("episode %d will be consolidated when this memory is next opened", number)

    def _timer_tick(self) -> None:
        try:
            self.submit("maintenance")
        except WorkerClosedError:
            pass

    # ------------------------------------------------------------------ lifecycle
    def close(self, timeout: float) -> bool:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        try:
            return self.worker.close(timeout)
        except StoreError:  # pragma: no cover - the worker catches job errors itself
            return False
        finally:
            if self.offload is not None:
                self.offload.close()
