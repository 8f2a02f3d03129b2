"""Keep Python's cyclic garbage collector out of maintenance jobs.

Why: a full (generation 2) collection walks every tracked object of the
process while holding the interpreter lock: 100-160 ms for a memory of 20k
observations (bench/results/gilhog-2026-11-26.txt). Consolidation and
archival create tens of thousands of medium-lived objects (fetched rows,
plans, cold-store records); collections during a job promote them to the
old generation, and past a quarter of its size that triggers a full
collection: 17 of them in 6 s of maintenance beside writers. Every thread
stops for each one, and a question waiting on an ingest flush that holds
the writer lock waits for all of them.

Those objects die by reference counting at the end of each step, so the
collector need not see them: ``CollectorPause`` turns automatic collection
off while a job runs and back on after it (only if it was on, so an
application that disabled it keeps it disabled). A pause never outlasts
``max_seconds``: a timer (and ``check()``, called where jobs check their stop
event) ends it early, so a long job (an LLM call) does not let cycles from
other threads pile up.
"""

from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

DEFAULT_MAX_SECONDS = 30.0


class CollectorPause:
    """Automatic cyclic collection off inside ``paused()`` (re-entrant, any thread), bounded in time."""

    def __init__(self, max_seconds: float = DEFAULT_MAX_SECONDS) -> None:
        if max_seconds <= 0:
            raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
        self.max_seconds = max_seconds
        self._lock = threading.Lock()
        self._depth = 0
        self._since: Optional[float] = None  # set while this object has the collector off
        self._timer: Optional[threading.Timer] = None
        self.pauses = 0
        self.cut_short = 0

    @property
    def active(self) -> bool:
        """True while this pause holds the collector off."""
        return self._since is not None

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            self._depth += 1
            if self._depth == 1 and gc.isenabled():
                gc.disable()
                self._since = time.monotonic()
                self.pauses += 1
                self._timer = threading.Timer(self.max_seconds, self._expire)
                self._timer.daemon = True
                self._timer.start()
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._resume()

    def check(self) -> None:
        """End the pause early once it has lasted ``max_seconds`` (collection resumes for the rest)."""
        with self._lock:
            if self._since is not None and time.monotonic() - self._since >= self.max_seconds:
                self.cut_short += 1
                self._resume()

    def _expire(self) -> None:
        with self._lock:
            if self._since is not None:
                self.cut_short += 1
                self._resume()

    def _resume(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._since is not None:
            self._since = None
            gc.enable()
