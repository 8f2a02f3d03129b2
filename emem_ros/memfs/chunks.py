"""Files cut into line-range chunks, each with a content hash, so only changed chunks are re-embedded.

Boundaries depend on the content (blank lines and headings), not on fixed
offsets: inserting a line changes the chunk it lands in, not every chunk
after it. A chunk is at most ``MAX_LINES`` lines / ``MAX_CHARS`` characters.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

MAX_LINES = 40
MAX_CHARS = 2000
MIN_LINES = 4
"""A paragraph shorter than this joins the next one (tiny chunks embed poorly)."""


@dataclass(frozen=True)
class Chunk:
    start: int
    """First line, 1-based."""
    end: int
    """Last line, inclusive."""
    text: str

    @property
    def hash(self) -> str:
        return content_hash(self.text)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split(text: str) -> list[Chunk]:
    """Chunks covering every non-blank line of ``text`` in order."""
    lines = text.splitlines()
    chunks: list[Chunk] = []
    start = 0  # index of the chunk's first line
    size = 0
    n = 0
    for i, line in enumerate(lines):
        boundary = False
        if i > start:
            taken = i - start
            if taken >= MAX_LINES or size + len(line) > MAX_CHARS:
                boundary = True
            elif taken >= MIN_LINES and (not line.strip() or line.lstrip().startswith("#")):
                boundary = True
        if boundary:
            _emit(chunks, lines, start, i)
            start, size = i, 0
        size += len(line) + 1
        n = i + 1
    if n > start:
        _emit(chunks, lines, start, n)
    return chunks


def _emit(chunks: list[Chunk], lines: list[str], start: int, stop: int) -> None:
    body = lines[start:stop]
    while body and not body[0].strip():
        body, start = body[1:], start + 1
    while body and not body[-1].strip():
        body = body[:-1]
    if body:
        chunks.append(Chunk(start + 1, start + len(body), "\n".join(body)))
