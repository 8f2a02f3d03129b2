"""Path normalisation: absolute or relative, '.' and '..' resolved, nothing escapes '/'."""

from __future__ import annotations

from emem_ros.memfs.errors import FsError

MAX_PATH = 1024
MAX_NAME = 255


def normalise(path: object, cwd: str = "/") -> str:
    """The absolute, clean form of ``path`` (relative to ``cwd``); '..' at the root stays at the root.

    Raises FsError for what cannot be a path (not a string, NUL, too long, empty name parts).
    """
    if not isinstance(path, str):
        raise FsError(f"a path must be a string, got {type(path).__name__}")
    text = path.strip()
    if not text:
        raise FsError("the path is empty; give one like /memory/notes.md")
    if "\x00" in text or any(ord(c) < 32 for c in text):
        raise FsError(f"the path {text!r} holds control characters; use plain names like /memory/notes.md")
    if len(text) > MAX_PATH:
        raise FsError(f"the path is {len(text)} characters long; the limit is {MAX_PATH}")
    if "\\" in text:
        text = text.replace("\\", "/")
    base = [] if text.startswith("/") else [p for p in cwd.split("/") if p]
    parts = base
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        if len(part) > MAX_NAME:
            raise FsError(f"the name {part[:40]!r}... is {len(part)} characters long; the limit is {MAX_NAME}")
        parts.append(part)
    return "/" + "/".join(parts)


def parent_of(path: str) -> str:
    if path == "/":
        return ""
    head = path.rsplit("/", 1)[0]
    return head or "/"


def name_of(path: str) -> str:
    return path.rsplit("/", 1)[-1] if path != "/" else "/"


def join(folder: str, name: str) -> str:
    return (folder.rstrip("/") + "/" + name) if folder != "/" else "/" + name


def is_under(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or inside it."""
    return folder == "/" or path == folder or path.startswith(folder.rstrip("/") + "/")


def ancestors(path: str) -> list[str]:
    """'/a/b/c' -> ['/a', '/a/b'] (the folders above, without the root)."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:n]) for n in range(1, len(parts))]


def prefix_range(folder: str) -> tuple[str, str]:
    """Bounds for ``path >= lo AND path < hi``: everything strictly inside ``folder`` (an index range scan)."""
    lo = folder.rstrip("/") + "/"
    return lo, lo[:-1] + "0"  # '0' is the character after '/'
