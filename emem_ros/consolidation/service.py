"""Wiring: the engines, the worker, the episode hook and the optional maintenance timer."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, TypeVar, Union

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
from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import InvalidInputError, StoreError
from emem_ros.core.periodic import PeriodicThread

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.engine import Engine
    from emem_ros.forgetting.forget import ForgetReport

log = logging.getLogger(__name__)


@dataclass
class MaintenanceReport:
    entities: EntityReport = field(default_factory=EntityReport)
    consolidation: ConsolidationReport = field(default_factory=ConsolidationReport)
    archive: ArchiveReport = field(default_factory=ArchiveReport)
    retention: Optional[ForgetReport] = None
    """What the retention policies forgot, or None without policies."""
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return self.entities.complete and self.consolidation.complete and self.archive.complete


JobReport = Union[MaintenanceReport, ConsolidationReport, EntityReport, ArchiveReport, EpisodeReport]
"""What a consolidation job returns."""
R = TypeVar("R", bound=JobReport)


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


def check_config(config: MemoryConfig) -> None:
    """The consolidation fields ``MemoryConfig.validate`` does not know about."""
    for name in ("consolidation_min_dwell", "consolidation_close_timeout", "maintenance_interval"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise InvalidInputError(f"{name} must be zero or a positive number of seconds, got {value!r}")
    size = config.archive_batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidInputError(f"archive_batch_size must be a positive integer, got {size!r}")


class ConsolidationService:
    def __init__(self, engine: "Engine", llm_client: object = None) -> None:
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
        self.retention: Optional[Callable[[], Optional[ForgetReport]]] = None
        """Run after archival by maintenance (the facade sets it to apply the retention policies)."""
        gc_pause = engine.config.consolidation_gc_pause
        self.worker = ConsolidationWorker(pause=engine.questions.writer_turn,  # questions go first
                                          collector=CollectorPause(gc_pause) if gc_pause > 0 else None)
        self.last: dict[str, JobReport] = {}
        self._timer: Optional[PeriodicThread] = None
        for number in self.book.snapshot().pending:  # abandoned at the last shutdown (or a crash)
            self.submit_episode(number)
        if engine.config.maintenance_interval > 0:
            self._timer = PeriodicThread("emem-maintenance-timer", engine.config.maintenance_interval,
                                         self._timer_tick).start()

    def forget_memos(self) -> None:
        """After a forget, on the worker: drop the rows, entities and names kept between runs, here and in the
        maintenance process (replaced at its next request), so nothing forgotten stays in RAM."""
        self.rows.clear()
        self.entities.forget_memos()
        if self.offload is not None:
            self.offload.renew()

    # ------------------------------------------------------------------ jobs
    # One typed method per job, on the worker (``submit_*``: a Future; the bare name: wait for it) or, from
    # the worker itself, inline. A job without options has its name as key: an equal one still queued is
    # not queued twice (its Future is returned).
    def _job(self, name: str, fn: Callable[[threading.Event], R]) -> Callable[[threading.Event], R]:
        def run(stop: threading.Event) -> R:
            result = fn(stop)
            self.last[name] = result
            return result
        return run

    def _submit(self, kind: str, fn: Callable[[threading.Event], R], key: Optional[str]) -> Future[R]:
        return self.worker.submit(kind, self._job(kind, fn), key=key)

    def _wait(self, inline: Callable[[threading.Event], R], queue: Callable[[], Future[R]],
              timeout: Optional[float]) -> R:
        """Run a job on the worker and wait; from the worker itself, run inline.

        On ``timeout`` this raises ``concurrent.futures.TimeoutError`` and the
        job carries on in the background (it is not cancelled half-way).
        """
        if self.worker.in_worker():
            return inline(self.worker.stop_event)
        return queue().result(timeout)

    def submit_maintenance(self) -> Future[MaintenanceReport]:
        return self._submit("maintenance", self._maintenance, "maintenance")

    def submit_time_window(self) -> Future[ConsolidationReport]:
        return self._submit("time_window", self._time_window, "time_window")

    def submit_entities(self, final: bool = False) -> Future[EntityReport]:
        return self._submit("entities", lambda stop: self.entities.run(stop, final=final),
                            None if final else "entities")

    def submit_archive(self) -> Future[ArchiveReport]:
        return self._submit("archive", self._archive, "archive")

    def submit(self, kind: str) -> Future[JobReport]:
        """A job by name (for timers configured by name): 'maintenance', 'time_window', 'entities', 'archive'."""
        jobs: dict[str, Callable[[threading.Event], JobReport]] = {
            "maintenance": self._maintenance,
            "time_window": self._time_window,
            "entities": self._entities,
            "archive": self._archive_and_retention,
        }
        if kind not in jobs:
            raise InvalidInputError(f"unknown consolidation job {kind!r}; use one of {', '.join(jobs)}")
        return self._submit(kind, jobs[kind], kind)

    def maintenance(self, timeout: Optional[float] = None) -> MaintenanceReport:
        return self._wait(self._maintenance, self.submit_maintenance, timeout)

    def time_window_gists(self, timeout: Optional[float] = None) -> ConsolidationReport:
        return self._wait(self._time_window, self.submit_time_window, timeout)

    def extract_entities(self, timeout: Optional[float] = None, final: bool = False) -> EntityReport:
        return self._wait(lambda stop: self.entities.run(stop, final=final),
                          lambda: self.submit_entities(final), timeout)

    def archive(self, timeout: Optional[float] = None) -> ArchiveReport:
        return self._wait(self._archive, self.submit_archive, timeout)

    def submit_episode(self, number: int) -> Future[EpisodeReport]:
        def run(stop: threading.Event) -> EpisodeReport:
            try:
                return self.episodes.run(number, stop)
            except Exception:
                if not (stop.is_set() or self.engine.store.closed):
                    log.exception("consolidating episode %d failed; its observations go to the time window", number)
                    self.book.release(number)
                raise
        return self.worker.submit(f"episode {number}", self._job("episode", run), key=f"episode:{number}")

    def _time_window(self, stop: threading.Event) -> ConsolidationReport:
        return self.time_window.run(stop)

    def _entities(self, stop: threading.Event) -> EntityReport:
        return self.entities.run(stop)

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

    def _archive_and_retention(self, stop: threading.Event) -> ArchiveReport:
        """The 'archive' job of timers that schedule the steps one by one (the ROS node's archive_period):
        archival, then the retention policies, as ``maintenance`` does. Before issue 26 only
        ``maintenance`` applied them, which the node never queues: retention rules did nothing live."""
        report = self._archive(stop)
        if self.retention is not None and not stop.is_set():
            self.retention()
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
