"""Which gists the gists' vector graph holds: those that ended within ``gist_graph_hours`` of the newest.

A patrolling robot makes a gist per place visit, a thousand a day; hnswlib keeps each one's vector and
links in RAM (about 1.7 KB), so a graph of every gist grows with the history. The graph holds the recent
past instead. Older gists stay in SQLite with their vectors: a time or place filter scores them exactly from
there (``tools/ranking.py``), and keywords find them. The horizon is measured from the newest gist, not from
a clock, so it needs no time source at open and a replayed bag gives the same graph. (A memory that is fed
older times than it holds, a bag of last month replayed into it, keeps those gists out of the graph: filters and
keywords find them.)
"""

from __future__ import annotations

import math
import sqlite3

import numpy as np


def graph_cutoff(conn: sqlite3.Connection, hours: float) -> float:
    """Gists that ended before this leave the graph (-inf: every gist is in it)."""
    if hours <= 0:
        return -math.inf
    newest = conn.execute("SELECT MAX(time_end) FROM gists").fetchone()[0]
    return -math.inf if newest is None else float(newest) - hours * 3600.0


def graph_gist_ids(conn: sqlite3.Connection, cutoff: float) -> np.ndarray:
    """Ids of the embedded gists the graph holds, ascending."""
    rows = conn.execute("SELECT id FROM gists WHERE embedding IS NOT NULL AND time_end >= ? ORDER BY id",
                        (cutoff,)).fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))


def left_graph_since(conn: sqlite3.Connection, before: float, cutoff: float) -> list[int]:
    """Ids of the gists that ended in [before, cutoff): the ones to take out when the cutoff moves up."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM gists WHERE time_end >= ? AND time_end < ?", (before, cutoff))]
