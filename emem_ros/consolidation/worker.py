"""The one background thread that runs consolidation and every LLM call.

Ingest and query threads only enqueue work here and get a ``Future`` back,
so a slow LLM or a big consolidation never sits on their path. Jobs run one
at a time, in order. A job submitted with a ``key`` while an equal one is
still queued returns the queued job's future (timer ticks coalesce instead of
piling up behind a slow run).

Shutdown (``close``): no new jobs; queued jobs get until the deadline to
finish; then the stop event is set — the running job stops at its next safe
point (between transactions, never inside one) — and whatever is still
queued is cancelled. Work that matters across restarts (episode requests,
progress marks) is durable in the store, so abandoning is safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, TypeVar

from emem_ros.core.collector import CollectorPause
from emem_ros.core.errors import EmemError

log = logging.getLogger(__name__)

T = TypeVar("T")
Job = Callable[[threading.Event], T]
JOIN_GRACE = 2.0
"""Seconds close() waits for a job that was told to stop (an LLM call in flight ends at its timeout)."""


@dataclass
class _Entry(Generic[T]):
    name: str
    key: Optional[str]
    fn: Job[T]
    future: Future[T]


class WorkerClosedError(EmemError):
    """The consolidation worker is shut down; the request was not queued."""


class _StopEvent(threading.Event):
    """The stop event jobs check between their steps; each check first lets a running question go first.

    Jobs already look at it between steps (``stop.is_set()``), so that is
    where a job pauses (bounded, see ``engine/questions.py``) while a question
    is answered, instead of competing with it for the interpreter and the
    writer lock.
    """

    def __init__(self, pause: Optional[Callable[[], None]], collector: Optional[CollectorPause] = None) -> None:
        super().__init__()
        self._pause = pause
        self._collector = collector

    def is_set(self) -> bool:
        if self._collector is not None:
            self._collector.check()
        if self._pause is not None and not super().is_set():
            self._pause()
        return super().is_set()


class ConsolidationWorker:
    """``collector``: automatic garbage collection is off while a job runs (see ``core/collector.py``)."""

    def __init__(self, name: str = "emem-consolidation", pause: Optional[Callable[[], None]] = None,
                 collector: Optional[CollectorPause] = None) -> None:
        self.name = name
        self.collector = collector
        self._queue: deque[_Entry[Any]] = deque()
        """Jobs of any result type; each entry's future is typed where it is submitted."""
        self._cond = threading.Condition()
        self._stop: threading.Event = _StopEvent(pause, collector)
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._running: Optional[_Entry[Any]] = None
        self.completed = 0
        self.failed = 0
        self.last_error: Optional[BaseException] = None

    # ------------------------------------------------------------------ submitting
    def submit(self, name: str, fn: Job[T], key: Optional[str] = None) -> Future[T]:
        """Queue ``fn``; a ``key`` names a kind of job, so jobs with the same key must return the same type."""
        with self._cond:
            if self._closed:
                raise WorkerClosedError(f"cannot queue '{name}': the consolidation worker is shut down")
            if key is not None:
                for entry in self._queue:
                    if entry.key == key:
                        return entry.future
            new = _Entry(name, key, fn, Future[T]())
            self._queue.append(new)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return new.future

    def in_worker(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    @property
    def stop_event(self) -> threading.Event:
        return self._stop

    @property
    def busy(self) -> bool:
        with self._cond:
            return bool(self._queue) or self._running is not None

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "running": self._running.name if self._running else None,
                "queued": [e.name for e in self._queue],
                "completed": self.completed,
                "failed": self.failed,
                "last_error": repr(self.last_error) if self.last_error else None,
                "closed": self._closed,
            }

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """True once nothing is queued or running; False if ``timeout`` passed first."""
        if self.in_worker():
            raise EmemError("wait_for_consolidation() was called from the consolidation worker itself")
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and self._running is None, timeout)

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:  # closed and drained
                    self._running = None
                    self._cond.notify_all()
                    return
                entry = self._queue.popleft()
                self._running = entry
            try:
                if entry.future.set_running_or_notify_cancel():
                    self._execute(entry)
            finally:
                with self._cond:
                    self._running = None
                    self._cond.notify_all()

    def _execute(self, entry: _Entry[Any]) -> None:
        started = time.perf_counter()
        try:
            if self.collector is None:
                result = entry.fn(self._stop)
            else:
                with self.collector.paused():
                    result = entry.fn(self._stop)
        except BaseException as exc:  # the thread must survive any job; the caller sees the error
            self.failed += 1
            self.last_error = exc
            if self._stop.is_set():
                log.warning("consolidation job '%s' abandoned at shutdown: %s", entry.name, exc)
            else:
                log.exception("consolidation job '%s' failed", entry.name)
            entry.future.set_exception(exc)
            return
        self.completed += 1
        log.debug("consolidation job '%s' done in %.3f s", entry.name, time.perf_counter() - started)
        entry.future.set_result(result)

    # ------------------------------------------------------------------ shutdown
    def close(self, timeout: float) -> bool:
        """Let queued work finish for ``timeout`` s, then stop and cancel the rest; True if all finished."""
        with self._cond:
            if self._closed and self._thread is None:
                return True
            self._closed = True
            self._cond.notify_all()
        finished = True
        if self._thread is not None and not self.in_worker():
            with self._cond:
                finished = self._cond.wait_for(lambda: not self._queue and self._running is None, timeout)
        self._stop.set()
        with self._cond:
            cancelled = [e for e in self._queue]
            self._queue.clear()
            self._cond.notify_all()
        for entry in cancelled:
            entry.future.cancel()
        if cancelled:
            log.warning("consolidation: %d queued job(s) abandoned at shutdown (%s); durable requests resume "
                        "on the next open", len(cancelled), ", ".join(e.name for e in cancelled))
        thread = self._thread
        if thread is not None and not self.in_worker():
            thread.join(JOIN_GRACE)
            if thread.is_alive():
                log.warning("consolidation job '%s' is still running after shutdown (a slow LLM call?); it will "
                            "find the memory closed and stop", self._running.name if self._running else "?")
                finished = False
        return finished and not cancelled
