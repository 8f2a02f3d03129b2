"""Consolidation entry points of the Memory facade.

Everything here hands work to the one consolidation worker thread (see
``worker.py``); the blocking calls wait for it, the ``submit_*`` calls return
a ``concurrent.futures.Future``. Timers (a ROS node's, or the built-in one
when ``maintenance_interval > 0``) call ``maintenance`` or the finer entry
points; ``end_episode`` queues its episode and returns at once.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Iterable, Iterator, Optional

from emem_ros.consolidation.archival import ArchiveReport
from emem_ros.consolidation.entities import EntityReport
from emem_ros.consolidation.gists import ConsolidationReport
from emem_ros.consolidation.service import ConsolidationService, MaintenanceReport
from emem_ros.core.errors import EmemError


class ConsolidationMixin:
    _consolidation: ConsolidationService

    def _init_consolidation(self) -> None:
        """Called once by Memory.__init__ after the store is open."""
        self._consolidation = ConsolidationService(self)  # type: ignore[arg-type]
        self.on_episode_end(self._consolidation.on_episode_end)  # type: ignore[attr-defined]

    def _close_consolidation(self) -> None:
        """Called by Memory.close before the final flush: finish or abandon pending work."""
        service = getattr(self, "_consolidation", None)
        if service is not None:
            service.close(float(self.config.consolidation_close_timeout))  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ blocking entry points
    def maintenance(self, timeout: Optional[float] = None) -> MaintenanceReport:
        """Extract entities, consolidate the time window, archive; on the worker, waiting for it."""
        self._check_consolidation_open()
        return self._consolidation.run("maintenance", timeout)

    def consolidate_time_window(self, timeout: Optional[float] = None) -> ConsolidationReport:
        """Gists from short-term observations older than ``consolidation_window`` (outside active episodes)."""
        self._check_consolidation_open()
        return self._consolidation.run("time_window", timeout)

    def extract_entities(self, timeout: Optional[float] = None, final: bool = False) -> EntityReport:
        """Entities from observations written since the last run; ``final`` also closes the visit in progress."""
        self._check_consolidation_open()
        return self._consolidation.run("entities", timeout, **({"final": True} if final else {}))

    def archive(self, timeout: Optional[float] = None) -> ArchiveReport:
        """Move long-term observations older than ``archive_after_seconds`` (since promotion) to the cold store."""
        self._check_consolidation_open()
        return self._consolidation.run("archive", timeout)

    # ------------------------------------------------------------------ non-blocking entry points
    def submit_maintenance(self) -> Future:
        self._check_consolidation_open()
        return self._consolidation.submit("maintenance")

    def submit_job(self, job: str) -> Future:
        """Queue one job ('maintenance', 'entities', 'time_window', 'archive') and return at once.

        For timers that schedule the steps separately (a ROS node's
        consolidation and archive periods); an equal job still queued is not
        queued twice.
        """
        self._check_consolidation_open()
        return self._consolidation.submit(job)

    def consolidate_episode(self, episode_id: str) -> Future:
        """Queue (again) the consolidation of an ended episode; a Future of its EpisodeReport."""
        self._check_consolidation_open()
        number = self._episode_number(episode_id)  # type: ignore[attr-defined]
        return self._consolidation.submit_episode(number)

    def wait_for_consolidation(self, timeout: Optional[float] = None) -> bool:
        """Block until queued consolidation work is done; False if ``timeout`` passed first."""
        return self._consolidation.worker.wait_idle(timeout)

    @property
    def consolidation_status(self) -> dict[str, Any]:
        service = self._consolidation
        status = service.worker.status()
        status["pending_episodes"] = service.book.snapshot().pending if not self.store.closed else []  # type: ignore[attr-defined]
        status["llm"] = service.summarizer is not None
        status["summaries"] = {"llm": service.writer.stats.llm, "fallback": service.writer.stats.fallback,
                               "llm_failures": service.writer.stats.llm_failures}
        return status

    # ------------------------------------------------------------------ the cold store
    def read_archived(self, ids: Optional[Iterable[str]] = None) -> Iterator[dict[str, Any]]:
        """Archived raw observations from the cold store (``{"id": "obs-12", "text": ..., ...}``)."""
        return self._consolidation.cold.iter_records(ids)

    def _check_consolidation_open(self) -> None:
        if getattr(self, "_closed", False):
            raise EmemError("this memory is closed")
