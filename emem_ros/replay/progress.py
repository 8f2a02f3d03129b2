"""Progress of a replay: a tqdm bar on a terminal, a few plain lines in a log, nothing in tests."""

from __future__ import annotations

import sys
import time
from typing import Optional, Protocol, TextIO


class Progress(Protocol):
    def update(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


class NoProgress:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class LineProgress:
    """A plain counter for logs and pipes: one line every ``every`` seconds and at the end."""

    def __init__(self, total: int, stream: TextIO, every: float = 5.0, label: str = "replay") -> None:
        self.total = max(0, int(total))
        self.stream = stream
        self.every = every
        self.label = label
        self.done = 0
        self._started = time.monotonic()
        self._last = self._started

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self._line(now)

    def close(self) -> None:
        self._line(time.monotonic())

    def _line(self, now: float) -> None:
        share = f" ({100.0 * self.done / self.total:.0f}%)" if self.total else ""
        print(f"{self.label}: {self.done}/{self.total} messages{share}, {now - self._started:.0f} s",
              file=self.stream, flush=True)


def make_progress(total: int, enabled: bool = True, stream: Optional[TextIO] = None,
                  label: str = "replay") -> Progress:
    """tqdm when it is installed and ``stream`` is a terminal, else a plain counter; nothing when disabled."""
    if not enabled:
        return NoProgress()
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            bar: Progress = tqdm(total=total, file=stream, unit="msg", desc=label, mininterval=0.2,
                                 dynamic_ncols=True, leave=False)
            return bar
    return LineProgress(total, stream, label=label)
