"""Periodic fleet sync beside a running memory (the ROS node's timer calls ``trigger``).

The timer only starts a sync on this worker's thread and returns: a sync that
waits for a slow network never holds up the node's other timers, its intake
or its queries. Ticks that come while a sync runs are dropped (the running
one ships everything committed by then). An outage is logged once, when it
starts, and once when it ends; the robot keeps working meanwhile and the log
hold keeps every record the fleet has not applied.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Optional

from emem_ros.fleet.errors import FleetError, FleetUnavailableError
from emem_ros.fleet.sync import FleetSync, SyncReport

log = logging.getLogger(__name__)


class FleetSyncWorker:
    def __init__(self, db_path: str | Path, url: str, robot_id: str, *, max_seconds: float = 30.0,
                 logger: Any = None) -> None:
        self.db_path = Path(db_path)
        self.url = url
        self.robot_id = robot_id
        self.max_seconds = max_seconds
        self.log = logger or log
        self._sync: Optional[FleetSync] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._closed = False
        self._down = False
        self._last_error = ""
        self.last_report: Optional[SyncReport] = None
        self.runs = 0

    def start(self) -> None:
        """Hold the whole log from now until the first sync (the fleet may be unreachable for long)."""
        try:
            self._get().hold_from_start()
        except FleetError as exc:
            self.log.warning(f"fleet sync not ready yet: {exc}")

    def _get(self) -> FleetSync:
        if self._sync is None:
            self._sync = FleetSync(self.db_path, self.url, self.robot_id)
        return self._sync

    def trigger(self) -> bool:
        """Start a sync unless one is running; True when one was started."""
        with self._lock:
            if self._closed or (self._thread is not None and self._thread.is_alive()):
                return False
            self._thread = threading.Thread(target=self._run, name="emem-fleet-sync", daemon=True)
            self._thread.start()
            return True

    def run_now(self) -> Optional[SyncReport]:
        """One sync on the caller's thread (tests, shutdown); errors are logged, not raised."""
        self._run()
        return self.last_report

    def _run(self) -> None:
        try:
            report = self._get().run(max_seconds=self.max_seconds)
        except FleetUnavailableError as exc:
            if not self._down:
                self.log.warning(f"fleet sync: {exc}; the robot keeps its memory and the sync retries")
            self._down = True
            return
        except FleetError as exc:
            message = str(exc)
            if message != self._last_error:
                self.log.error(f"fleet sync stopped: {message}")
            self._last_error = message
            return
        except Exception as exc:  # a timer's worker must survive anything
            self.log.error(f"fleet sync failed: {type(exc).__name__}: {exc}")
            return
        finally:
            self.runs += 1
        if self._down:
            self.log.info(f"fleet store reachable again; {report.summary()}")
        self._down = False
        self._last_error = ""
        self.last_report = report

    def close(self, timeout: float = 30.0) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        if self._sync is not None:
            self._sync.close()
