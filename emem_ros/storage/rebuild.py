"""Regenerate a memory file from its operation log (``emem rebuild DB``).

The log is the source of truth: replaying it into an empty file yields the
same rows and ids; the derived indexes are then rebuilt from SQLite on the
next open. The old file is kept beside (``.before-rebuild``) unless told not to.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from emem_ros.core.errors import StoreError
from emem_ros.storage.filelock import ProcessLock
from emem_ros.storage.oplog import OpLog, apply_record
from emem_ros.storage.schema import migrate

log = logging.getLogger(__name__)

BASE_NAME = re.compile(r"^base-(\d{12})\.db$")
RECORDS_PER_TRANSACTION = 256


@dataclass(frozen=True)
class RebuildReport:
    records: int
    base_seq: int
    last_seq: int
    seconds: float
    old_file: Optional[Path]
    log_bytes: int = 0


def newest_base(log_dir: Path) -> Optional[tuple[int, Path]]:
    bases = []
    if log_dir.exists():
        for entry in log_dir.iterdir():
            match = BASE_NAME.match(entry.name)
            if match:
                bases.append((int(match.group(1)), entry))
    return max(bases) if bases else None


def _sidecars(path: Path) -> list[Path]:
    return [path, Path(f"{path}-wal"), Path(f"{path}-shm")]


def rebuild_from_log(db_path: str | os.PathLike[str], keep_old: bool = True) -> RebuildReport:
    """Replace the memory file with one replayed from its log; refuses while the memory is open."""
    path = Path(db_path)
    lock = ProcessLock(path.with_name(path.name + ".lock"), path)
    lock.acquire()  # a running node or another emem command would lose its writes: MemoryInUseError
    try:
        return _rebuild(path, keep_old)
    finally:
        lock.release()


def _rebuild(path: Path, keep_old: bool) -> RebuildReport:
    started = time.perf_counter()
    log_dir = path.with_name(path.name + ".log")
    if not log_dir.is_dir():
        raise StoreError(f"no operation log at {log_dir}: nothing to rebuild {path} from")
    oplog = OpLog(log_dir)
    temp = path.with_name(path.name + ".rebuild")
    for leftover in _sidecars(temp):
        leftover.unlink(missing_ok=True)
    base = newest_base(log_dir)
    base_seq = 0
    if base is not None:
        base_seq = base[0]
        shutil.copyfile(base[1], temp)
    conn = sqlite3.connect(str(temp), isolation_level=None)
    records = 0
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")  # a failed rebuild is simply run again
        migrate(conn)
        pending = 0
        last = base_seq
        conn.execute("BEGIN")
        for record in oplog.records(after=base_seq):
            apply_record(conn, record)
            last = record.seq
            records += 1
            pending += 1
            if pending >= RECORDS_PER_TRANSACTION:
                conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('log_seq', ?)", (str(last),))
                conn.execute("COMMIT")
                conn.execute("BEGIN")
                pending = 0
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('log_seq', ?)", (str(last),))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except BaseException:
        conn.close()
        for leftover in _sidecars(temp):
            leftover.unlink(missing_ok=True)
        raise
    finally:
        oplog.close()
    conn.close()
    old_file = None
    if path.exists():
        if keep_old:
            old_file = path.with_name(path.name + ".before-rebuild")
            for src, dst in zip(_sidecars(path), _sidecars(old_file)):
                dst.unlink(missing_ok=True)
                if src.exists():
                    os.replace(src, dst)
        else:
            for src in _sidecars(path):
                src.unlink(missing_ok=True)
    os.replace(temp, path)
    for leftover in _sidecars(temp)[1:]:
        leftover.unlink(missing_ok=True)
    index_dir = path.with_name(path.name + ".idx")
    if index_dir.exists():
        shutil.rmtree(index_dir)
    log_bytes = sum(p.stat().st_size for p in log_dir.glob("*.seg"))
    report = RebuildReport(records, base_seq, last, time.perf_counter() - started, old_file, log_bytes)
    log.info("rebuilt %s from %d log records in %.2f s", path, records, report.seconds)
    return report
