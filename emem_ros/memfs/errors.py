"""MemFS errors: each message says what is wrong and what to do instead (an LLM acts on it)."""

from __future__ import annotations

import difflib
from typing import Iterable, Optional

from emem_ros.core.errors import InvalidInputError


class FsError(InvalidInputError):
    """A filesystem operation was refused; nothing was changed."""


class NotFound(FsError):
    """The path does not exist."""

    @classmethod
    def at(cls, path: str, candidates: Iterable[str] = ()) -> "NotFound":
        near = nearest(path, candidates)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        return cls(f"{path} does not exist{hint} (fs_ls shows what is there)")


class PermissionDenied(FsError):
    """The agent may not do this here."""


class Conflict(FsError):
    """The file changed since this agent read it (another agent wrote it)."""


class TooLarge(FsError):
    """The content is over the size limit."""


class NotText(FsError):
    """Binary content (NUL bytes, undecodable bytes) is refused: MemFS holds text."""


class IsADirectory(FsError):
    """A file operation on a folder."""


class NotADirectory(FsError):
    """A folder operation on a file."""


class AlreadyExists(FsError):
    """The target path is taken."""


def nearest(path: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Existing paths that look most like ``path`` (by whole path and by last name)."""
    pool = list(dict.fromkeys(candidates))
    if not pool:
        return []
    found = difflib.get_close_matches(path, pool, n=n, cutoff=0.5)
    name = path.rstrip("/").rsplit("/", 1)[-1]
    by_name = {c.rstrip("/").rsplit("/", 1)[-1]: c for c in pool}
    for match in difflib.get_close_matches(name, list(by_name), n=n, cutoff=0.6):
        if by_name[match] not in found:
            found.append(by_name[match])
    return found[:n]


def closest_line(text: str, needle: str) -> Optional[tuple[int, str]]:
    """(line number, line) of ``text`` most like the first line of ``needle``."""
    lines = text.splitlines()
    first = needle.strip().splitlines()[0] if needle.strip() else ""
    best, best_ratio = None, 0.0
    for number, line in enumerate(lines, 1):
        ratio = difflib.SequenceMatcher(None, line.strip(), first).quick_ratio()
        if ratio > best_ratio:
            best, best_ratio = (number, line), ratio
    return best if best_ratio >= 0.4 else None
