"""Threads that load a memory beside a measurement: started on entering the block, stopped and joined on leaving."""

from __future__ import annotations

import threading
from typing import TypeVar

Self = TypeVar("Self", bound="LoadThreads")


class LoadThreads:
    """Subclasses fill ``threads``; their loops end once ``stop`` is set."""

    stop: threading.Event
    threads: list[threading.Thread]

    def __enter__(self: Self) -> Self:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
