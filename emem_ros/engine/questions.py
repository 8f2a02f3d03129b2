"""Questions before writes: while a question is answered, writers pause (briefly), so they cannot starve it.

Three threads adding as fast as they can hold the interpreter lock nearly
all the time; a question among them gets a quarter of one core and waits
seconds. While any question runs, ``Engine.add`` waits for it to finish, at
most ``max_wait`` seconds per add, so questions asked back to back cannot
starve writers either. A thread answering a question never waits for itself
(an action tool that adds, a hook that writes).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class QuestionGate:
    def __init__(self, max_wait: float = 0.25) -> None:
        self.max_wait = max_wait
        self._lock = threading.Lock()
        self._active = 0
        self._idle = threading.Event()
        self._idle.set()
        self._mine = threading.local()
        self.writer_waits = 0
        """How many adds waited for a question (a cost the contention bench reports)."""

    @property
    def active(self) -> int:
        return self._active

    @contextmanager
    def asking(self) -> Iterator[None]:
        """Around answering one question: writers on other threads wait until it is done."""
        depth = getattr(self._mine, "depth", 0)
        self._mine.depth = depth + 1
        if depth == 0:
            with self._lock:
                self._active += 1
                self._idle.clear()
        try:
            yield
        finally:
            self._mine.depth = depth
            if depth == 0:
                with self._lock:
                    self._active -= 1
                    if not self._active:
                        self._idle.set()

    def writer_turn(self) -> None:
        """Called by a writer before it adds: wait while a question (of another thread) runs, bounded."""
        if self._active and not getattr(self._mine, "depth", 0):
            self.writer_waits += 1
            self._idle.wait(self.max_wait)
