"""How many rows a maintenance write transaction takes, so it holds the writer lock only briefly.

A question that must flush, and every ingest flush, waits for the writer
lock; a maintenance step (archival, gists, forgetting) that writes
thousands of rows in one transaction makes them wait as long. So such a
step writes in transactions sized by what the last ones took: about
``target`` seconds each (the lock is released between them, and whoever
waits gets it). The size is in rows of the step's own unit (observations
archived, observations a gist promotes), adapted multiplicatively.
"""

from __future__ import annotations

TARGET = 0.025
"""Seconds of writer lock a maintenance transaction aims at (questions target p95 < 50 ms)."""


class TransactionBudget:
    """Rows for the next transaction, adapted to ``target`` seconds from the holds measured."""

    def __init__(self, target: float = TARGET, first: int = 256, least: int = 16, most: int = 1 << 20) -> None:
        self.target = target
        self.least = max(1, least)
        self.most = max(self.least, most)
        self.size = min(self.most, max(self.least, first))
        self.transactions = 0
        self.longest = 0.0

    def took(self, rows: int, seconds: float) -> None:
        """A transaction of ``rows`` held the lock ``seconds``: size the next one."""
        self.transactions += 1
        self.longest = max(self.longest, seconds)
        if rows <= 0:
            return
        if seconds > self.target:
            self.size = max(self.least, min(self.size, int(rows * self.target / seconds)))
        elif seconds < self.target / 2 and rows >= self.size:
            self.size = min(self.most, self.size * 2)
