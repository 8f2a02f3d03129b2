"""A named daemon thread that calls a function every ``interval`` seconds.

Errors are logged and the loop goes on: a timer that dies silently is how a
robot stops remembering without anyone noticing.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class PeriodicThread:
    def __init__(self, name: str, interval: float, fn: Callable[[], object]) -> None:
        self.name = name
        self.interval = interval
        self._fn = fn
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.errors = 0

    def start(self) -> "PeriodicThread":
        self._thread.start()
        return self

    def poke(self) -> None:
        """Run now instead of waiting for the period."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self._fn()
            except Exception:  # keep the timer alive; the failure is logged with its traceback
                self.errors += 1
                log.exception("%s failed (will retry next period)", self.name)
