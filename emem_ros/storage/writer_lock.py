"""The store's writer lock, timing how long each caller holds it.

Every write (an ingest flush, a consolidation step, archival, a forget)
runs under one re-entrant lock, and a question that must flush waits for
it; so the longest hold is the longest a question or a flush can stall.
This lock records each outermost hold (re-entrant acquisitions inside it
do not count) under the name of the code that took it
(``module.function``, found from the caller's frame), keeping a count,
the total, the maximum and a p99 over the most recent holds, and the
same for the time callers waited to get it. Cheap enough to stay on: one
``perf_counter`` pair and a short frame walk per outermost hold.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any, Optional

RECENT = 2048
"""Holds per caller kept for the p99 (the most recent ones)."""

_SKIP = frozenset({__name__, "contextlib", "threading", "emem_ros.storage.transactions"})
"""Modules that only pass the lock on: the caller named is the first frame outside them."""


def _caller(frame: Optional[FrameType]) -> str:
    while frame is not None and frame.f_globals.get("__name__") in _SKIP:
        frame = frame.f_back
    if frame is None:
        return "?"
    module = str(frame.f_globals.get("__name__", "?"))
    return f"{module.rsplit('.', 1)[-1]}.{frame.f_code.co_name}"


@dataclass
class _Series:
    count: int = 0
    total: float = 0.0
    longest: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.longest = max(self.longest, seconds)
        self.recent.append(seconds)

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.recent)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * (len(ordered) - 1) + 0.5))] if ordered else 0.0
        return {"count": self.count, "total_ms": self.total * 1000, "max_ms": self.longest * 1000,
                "p99_ms": p99 * 1000}


class WriterLock:
    """A re-entrant lock (``with lock:``, ``acquire``/``release``) that times outermost holds per caller."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # touched only by the thread holding ``_lock``
        self._since = 0.0
        self._stats_lock = threading.Lock()
        self._holds: dict[str, _Series] = {}
        self._waits: dict[str, _Series] = {}

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(False):
            waited = 0.0
        else:
            if not blocking:
                return False
            began = time.perf_counter()
            if not self._lock.acquire(True, timeout):
                return False
            waited = time.perf_counter() - began
        self._depth += 1
        if self._depth == 1:
            self._since = time.perf_counter()
            if waited > 0.0:
                label = _caller(sys._getframe(1))
                with self._stats_lock:
                    self._waits.setdefault(label, _Series()).add(waited)
        return True

    def release(self) -> None:
        if self._depth == 1:
            held = time.perf_counter() - self._since
            label = _caller(sys._getframe(1))
            with self._stats_lock:
                self._holds.setdefault(label, _Series()).add(held)
        self._depth -= 1
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, kind: Optional[type[BaseException]], value: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.release()

    # ------------------------------------------------------------------ the figures
    def stats(self) -> dict[str, Any]:
        """``holds`` and ``waits``: per caller {count, total_ms, max_ms, p99_ms}; ``max_hold_ms`` overall."""
        with self._stats_lock:
            holds = {label: s.summary() for label, s in self._holds.items()}
            waits = {label: s.summary() for label, s in self._waits.items()}
        return {"holds": holds, "waits": waits,
                "max_hold_ms": max((h["max_ms"] for h in holds.values()), default=0.0),
                "max_wait_ms": max((w["max_ms"] for w in waits.values()), default=0.0)}

    def longest(self) -> tuple[str, float]:
        """(caller, ms) of the longest hold recorded since the last ``reset``."""
        with self._stats_lock:
            if not self._holds:
                return "", 0.0
            label, series = max(self._holds.items(), key=lambda item: item[1].longest)
            return label, series.longest * 1000

    def reset(self) -> None:
        """Start the figures afresh (a bench step, a new measurement window)."""
        with self._stats_lock:
            self._holds.clear()
            self._waits.clear()
