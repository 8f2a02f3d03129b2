"""Atomic snapshot files named by their high-water mark.

An index is saved as ``<stem>.<hwm>.<ext>`` through a temp file and a rename,
so a crash leaves either the old snapshot or the new one, never half of one.
The high-water mark in the name tells the opener what it must catch up on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Optional


def snapshot_path(folder: Path, stem: str, hwm: int, ext: str) -> Path:
    return folder / f"{stem}.{hwm}.{ext}"


def list_snapshots(folder: Path, stem: str, ext: str) -> list[tuple[int, Path]]:
    """Snapshots of one index, newest (highest mark) first."""
    pattern = re.compile(rf"^{re.escape(stem)}\.(\d+)\.{re.escape(ext)}$")
    found = []
    if folder.is_dir():
        for entry in folder.iterdir():
            match = pattern.match(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
    return sorted(found, reverse=True)


def write_snapshot(folder: Path, stem: str, hwm: int, ext: str, writer: Callable[[str], None]) -> Path:
    """Write through ``writer(temp_path)``, fsync, rename, then drop older snapshots."""
    folder.mkdir(parents=True, exist_ok=True)
    final = snapshot_path(folder, stem, hwm, ext)
    temp = folder / f".{final.name}.tmp-{os.getpid()}"
    try:
        writer(str(temp))
        if not temp.exists():  # hnswlib's save_index fails silently on an unwritable folder
            raise OSError(f"could not write the index snapshot {temp} (is {folder} writable?)")
        with open(temp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, final)
    finally:
        if temp.exists():
            try:
                temp.unlink()
            except OSError:
                pass
    fsync_dir(folder)
    for _mark, old in list_snapshots(folder, stem, ext):
        if old != final:
            old.unlink(missing_ok=True)
    return final


def newest_snapshot(folder: Path, stem: str, ext: str) -> Optional[tuple[int, Path]]:
    snaps = list_snapshots(folder, stem, ext)
    return snaps[0] if snaps else None


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in ``folder`` durable (best effort: not every file system allows it)."""
    fsync_path(folder)


def fsync_path(path: Path) -> None:
    """fsync a file or folder by path, best effort (it may be gone, or the file system may refuse)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
