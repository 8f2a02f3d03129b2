"""The maintenance process: maintenance's reading and planning, outside the serving interpreter.

Questions and ingest flushes share one interpreter lock with maintenance,
and most of maintenance's interpreter time is reading: decoding tens of
thousands of rows, cutting them into visits and sightings (entities) or
clusters and plain summaries (gists), encoding cold-store records
(archival). Every millisecond of it is one an ingest flush holding the
writer lock may wait for, and its objects feed the garbage collector. So
``MaintenanceProcess`` has a child process do that part and return plain
data (``entities.SightingStep``, ``gists.WindowStep`` with drafts,
``archive_plan.ArchiveBatch``); the serving process keeps embedding, entity
matching and every write (cold store, SQLite, op-log, vector indexes,
caches, announcements). With an LLM configured, entities and gists plan
here (the LLM client lives here); archival still moves.

The child
- starts lazily, at the first request, as a fresh interpreter running
  ``offload_child.main`` (never a fork of this multi-threaded one, and unlike
  multiprocessing's 'spawn' it does not re-run the parent's main script,
  which in the ROS node would import rclpy again);
- reads the database file through its own read-only connection;
- stops by itself when the parent closes its end of the pipe or dies (end
  of file on the pipe; it also checks its parent id every second), and after
  ``IDLE_EXIT`` seconds without a request (its rows and plans, ~200 MB at
  the bench's backlog, are not kept between maintenance runs);
- is replaced after a crash or a hang: the request fails with
  ``OffloadError``, the caller logs it and does the work itself (nothing is
  written by the child, so nothing is lost); after ``MAX_FAILURES`` in a
  row the process is not restarted for this memory.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from emem_ros.core.errors import EmemError

log = logging.getLogger(__name__)

_CHILD = ("import sys; sys.path[:] = [sys.argv[1]] + [p for p in sys.path if p not in ('', '.')]; "
          "from emem_ros.consolidation.offload_child import main; sys.exit(main(sys.argv[2:]))")
"""The child's command: this copy of emem_ros first on its path, whatever the working directory holds."""
REPLY_TIMEOUT = 120.0
"""Seconds a request may take before the child is taken as hung (a batch takes well under one)."""
IDLE_EXIT = 30.0
"""Seconds without a request after which the child exits (its memory goes back between maintenance runs)."""
_IDLE_MARGIN = 2.0
"""A child idle this close to ``IDLE_EXIT`` is replaced rather than sent a request it might not read."""
MAX_FAILURES = 3
"""Failures in a row after which the work stays in the serving process."""
_POLL = 0.1
_ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class OffloadError(EmemError):
    """The maintenance process could not do a request (crashed, hung, failed); do it in-process."""


Plan = TypeVar("Plan")


def planned(offload: Optional["MaintenanceProcess"], name: str, answers: tuple[type[Plan], ...],
            stop: Optional[threading.Event], what: str, here: Callable[[], Plan], **args: Any) -> Plan:
    """A step's plan from the maintenance process when there is one, else ``here()``.

    An answer of none of the ``answers`` types counts as a failure; a
    failure is logged (unless the job is stopping) and the step is planned
    here, so it is never lost.
    """
    if offload is not None and offload.usable:
        try:
            answer = offload.request(name, None if stop is None else stop.is_set, **args)
            if isinstance(answer, answers):
                return answer
            raise OffloadError(f"the maintenance process answered {type(answer).__name__}")
        except OffloadError as exc:
            if stop is None or not stop.is_set():
                log.error("%s: %s; planning this step in the serving process%s", what, exc,
                          "" if offload.usable else " (and from now on)")
    return here()


class MaintenanceProcess:
    """The parent's handle on the child (one request at a time; thread-safe)."""

    def __init__(self, db_path: Path, reply_timeout: float = REPLY_TIMEOUT, idle_exit: float = IDLE_EXIT) -> None:
        self.db_path = Path(db_path)
        self.reply_timeout = reply_timeout
        self.idle_exit = idle_exit
        self._last = 0.0
        """When the child last answered (it leaves after ``idle_exit`` s without a request)."""
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._conn: Optional[Connection] = None
        self._closed = False
        self.failures = 0
        """Failures in a row (a success resets it)."""
        self.requests = 0
        self.answered: dict[str, int] = {}
        """Requests answered, by name."""
        self.started = 0
        """Child processes started so far."""

    # ------------------------------------------------------------------ state
    @property
    def usable(self) -> bool:
        return not self._closed and self.failures < MAX_FAILURES

    @property
    def pid(self) -> Optional[int]:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    # ------------------------------------------------------------------ requests
    def request(self, name: str, stop: Optional[Callable[[], bool]] = None, **args: Any) -> object:
        """Send one request and wait for its answer; ``stop()`` true abandons it (the child is replaced).

        The answer is whatever the child sent (unpickled): the caller checks its type (``planned``)."""
        with self._lock:
            if not self.usable:
                raise OffloadError("the maintenance process is not available")
            try:
                conn = self._ensure()
                conn.send((name, args))
                answer = self._wait(conn, stop)
                self._last = time.monotonic()
            except OffloadError:
                self._fail()
                raise
            except (OSError, EOFError, ValueError) as exc:  # a broken pipe, an unreadable answer
                self._fail()
                raise OffloadError(f"the maintenance process failed: {type(exc).__name__}: {exc}") from exc
            status, value = answer
            if status != "ok":
                self.failures += 1  # the child is fine; the request failed there
                raise OffloadError(f"the maintenance process failed on {name}: {value}")
            self.failures = 0
            self.requests += 1
            self.answered[name] = self.answered.get(name, 0) + 1
            return value

    def _wait(self, conn: Connection, stop: Optional[Callable[[], bool]]) -> Any:
        """The child's answer as unpickled: ("ok", plan) or ("error", traceback) (``offload_child._serve``)."""
        deadline = time.monotonic() + self.reply_timeout
        while not conn.poll(_POLL):
            if self._closed or (stop is not None and stop()):
                raise OffloadError("abandoned: the job was told to stop")
            if self._proc is None or self._proc.poll() is not None:
                code = self._proc.returncode if self._proc is not None else None
                raise OffloadError(f"the maintenance process exited (code {code})")
            if time.monotonic() > deadline:
                raise OffloadError(f"the maintenance process did not answer within {self.reply_timeout:g} s")
        return conn.recv()

    def _ensure(self) -> Connection:
        if self._conn is not None and self._proc is not None:
            code = self._proc.poll()
            if code is None and time.monotonic() - self._last < self.idle_exit - _IDLE_MARGIN:
                return self._conn
            if code:  # 0: it left after IDLE_EXIT, as it should
                log.error("the maintenance process %d exited (code %s) between requests; starting a new one",
                          self._proc.pid, code)
            # else it is about to leave (idle): let it go rather than race its exit with a request
        self._discard()
        if not sys.executable:  # an embedded interpreter that cannot start another
            raise OffloadError("no Python executable to start the maintenance process with")
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        for name in _ONE_THREAD:  # its numpy work is small: no BLAS thread pool (memory, a core each)
            env.setdefault(name, "1")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(Path(__file__).resolve().parents[2]), str(theirs.fileno()),
                 str(os.getpid()), str(self.db_path), repr(self.idle_exit)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, close_fds=True, env=env)
        except OSError as exc:
            ours.close()
            raise OffloadError(f"cannot start the maintenance process: {exc}") from exc
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        self._last = time.monotonic()
        self.started += 1
        log.debug("maintenance process %d started", self._proc.pid)
        return self._conn

    def _fail(self) -> None:
        self.failures += 1
        self._discard()

    def _discard(self) -> None:
        """Close our end (the child exits on end of file); kill it if it does not."""
        conn, proc = self._conn, self._proc
        self._conn = self._proc = None
        if conn is not None:
            try:
                conn.close()
            except OSError:  # pragma: no cover - already closed
                pass
        if proc is not None:
            try:
                proc.wait(1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def renew(self) -> None:
        """Let the child go (its rows may hold what a forget erased); the next request starts a fresh one."""
        with self._lock:
            self._discard()

    def close(self) -> None:
        self._closed = True  # a request in flight sees it within 0.1 s and lets go of the lock
        with self._lock:
            self._discard()
