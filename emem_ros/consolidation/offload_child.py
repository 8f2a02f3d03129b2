"""The maintenance process's side of ``offload.py``: answer the parent's requests with plain data.

Runs in a fresh interpreter (``offload._CHILD``). It reads the database
through its own read-only connection and never writes; it leaves on end of
file (the parent closed or died), when its parent id changes, and after
``idle_exit`` seconds without a request.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Optional

from emem_ros.consolidation.archive_plan import ArchiveBatch, plan_batch
from emem_ros.consolidation.entities import EntityPlanner, SightingStep
from emem_ros.consolidation.gists import TimeWindowPlanner, WindowStep
from emem_ros.consolidation.rows import RowMemo
from emem_ros.consolidation.summaries import SummaryWriter


class _Planner:
    """The child's side: a read-only connection and the state its plans keep between requests."""

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self._db: Optional[sqlite3.Connection] = None
        self._passes: Optional[tuple[EntityPlanner, TimeWindowPlanner]] = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect(Path(self.db_path).resolve().as_uri() + "?mode=ro", uri=True,
                                       isolation_level=None)
            self._db.execute("PRAGMA busy_timeout=30000")
        return self._db

    def answer(self, name: str, args: dict[str, Any]) -> ArchiveBatch | Optional[SightingStep] | WindowStep:
        if name == "plan_archive":
            return plan_batch(self.db, **args)
        if name == "plan_entities":
            return self.passes()[0].plan_step(self.db, args["config"], args["now"], args["final"])
        if name == "plan_time_window":
            return self.passes()[1].plan_drafts(self.db, args["config"], args["cutoff"])
        raise ValueError(f"unknown request {name!r}")

    def passes(self) -> tuple[EntityPlanner, TimeWindowPlanner]:
        """The entity and time-window passes (reading only), sharing their rows as in the serving process."""
        if self._passes is None:
            rows = RowMemo()
            self._passes = EntityPlanner(None, rows), TimeWindowPlanner(SummaryWriter(None), rows)
        return self._passes


def _serve(conn: Connection, parent: int, db_path: str, idle_exit: float) -> None:
    planner = _Planner(db_path)
    last = time.monotonic()
    while True:
        if not conn.poll(min(1.0, idle_exit)):
            if os.getppid() != parent:  # the parent died (and someone else holds our pipe)
                return
            if time.monotonic() - last >= idle_exit:  # the parent starts a new one when needed
                return
            continue
        try:
            name, args = conn.recv()
        except (EOFError, OSError):  # the parent closed or died
            return
        try:
            answer: tuple[str, object] = ("ok", planner.answer(name, args))
        except Exception:  # reported to the parent, which does the work itself
            answer = ("error", traceback.format_exc(limit=8))
        try:
            conn.send(answer)
        except (OSError, ValueError):
            return
        last = time.monotonic()


def main(argv: list[str]) -> int:
    fd, parent, db_path, idle_exit = int(argv[0]), int(argv[1]), argv[2], float(argv[3])
    # A terminal's Ctrl-C reaches the whole process group: the parent decides when we stop (end of file).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(Connection(fd), parent, db_path, idle_exit)
    return 0
