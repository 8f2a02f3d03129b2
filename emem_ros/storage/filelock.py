"""One writing process per memory file: an advisory lock on ``<db>.lock``.

Two processes appending to the same operation log would interleave records
and corrupt it, and each would keep its own derived indexes. The store takes
an exclusive, non-blocking ``flock`` at open and drops it at close; the lock
file records the holder's pid so the error can name it. The kernel releases
the lock when the holder dies, so a crash never leaves a stale lock behind.
Where ``fcntl`` does not exist (Windows) the lock is skipped with a warning.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from emem_ros.core.errors import MemoryInUseError

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]  # no fcntl on Windows: the lock falls back to O_EXCL

log = logging.getLogger(__name__)


class ProcessLock:
    def __init__(self, path: Path, memory_path: Path) -> None:
        self.path = path
        self.memory_path = memory_path
        self._fd: Optional[int] = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise MemoryInUseError naming the holder."""
        if fcntl is None:
            log.warning("no fcntl on this platform: memory %s is not protected against a second writer",
                        self.memory_path)
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            log.warning("cannot create the lock file %s (%s): memory %s is not protected against a second"
                        " writer", self.path, exc, self.memory_path)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            if holder == os.getpid():
                raise MemoryInUseError(
                    f"memory {self.memory_path} is already open in this process; close that Memory first"
                ) from None
            who = f"process {holder}" if holder else "another process"
            raise MemoryInUseError(
                f"memory {self.memory_path} is in use by {who} (a robot node or another emem command); "
                "stop it, or query it through its ROS services"
            ) from None
        except OSError as exc:  # e.g. a file system without locks
            os.close(fd)
            log.warning("cannot lock %s (%s): memory %s is not protected against a second writer",
                        self.path, exc, self.memory_path)
            return
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # the pid is only for the error message
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no stale pid for the next reader
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read_pid(fd: int) -> Optional[int]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 64).decode(errors="replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None
