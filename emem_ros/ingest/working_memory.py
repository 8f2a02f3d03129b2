"""The working-memory buffer: accepts observations at once, stores them in batches.

Flushes happen when the batch size is reached, on a real timer, and on demand.
A failed flush keeps its batch at the front of the queue for the next try;
only a full buffer whose flushes keep failing refuses new observations, with
an error the caller sees. Nothing is dropped silently.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Callable, Optional, Sequence

from emem_ros.core.errors import WorkingMemoryFullError
from emem_ros.core.periodic import PeriodicThread
from emem_ros.storage.store import NewObservation

log = logging.getLogger(__name__)

Sink = Callable[[Sequence[NewObservation]], object]

# Bigger batches embed faster; this caps one transaction's size.
MAX_CHUNK = 2048


class WorkingMemory:
    def __init__(self, sink: Sink, capacity: int, batch_size: int, interval: float) -> None:
        self._sink = sink
        self._capacity = capacity
        self._batch_size = batch_size
        self._queue: deque[NewObservation] = deque()
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._timer: Optional[PeriodicThread] = None
        if interval > 0:
            self._timer = PeriodicThread("emem-flush", interval, self._timed_flush).start()
        self.failed_flushes = 0
        self.last_error: Optional[BaseException] = None

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, observation: NewObservation) -> None:
        with self._lock:
            full = len(self._queue) >= self._capacity
            if not full:
                self._queue.append(observation)
                due = len(self._queue) >= self._batch_size
        if full:
            # Back-pressure: store what is waiting before taking more.
            try:
                self.flush()
            except Exception as exc:
                raise WorkingMemoryFullError(
                    f"working memory is full ({self._capacity} observations) and flushing fails: {exc}"
                ) from exc
            with self._lock:
                self._queue.append(observation)
            return
        if due:
            if self._timer is not None:
                self._timer.poke()
            else:
                self.flush()

    def recent(self, n: Optional[int] = None) -> list[NewObservation]:
        with self._lock:
            items = list(self._queue)
        return items if n is None else items[-n:]

    def flush(self) -> int:
        """Store everything buffered; raise on failure with the batch kept."""
        stored = 0
        with self._flush_lock:
            while True:
                with self._lock:
                    if not self._queue:
                        return stored
                    chunk = [self._queue.popleft() for _ in range(min(MAX_CHUNK, len(self._queue)))]
                try:
                    self._sink(chunk)
                except BaseException as exc:
                    with self._lock:
                        self._queue.extendleft(reversed(chunk))
                    self.failed_flushes += 1
                    self.last_error = exc
                    raise
                stored += len(chunk)

    def _timed_flush(self) -> None:
        if self._queue:
            try:
                self.flush()
            except Exception as exc:
                log.warning("flush failed, %d observations kept for retry: %s", len(self._queue), exc)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
