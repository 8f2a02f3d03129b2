"""Errors raised by the memory core.

Every error a caller can cause is an ``EmemError`` with a message written for
the person (or LLM) who has to act on it.
"""

from __future__ import annotations


class EmemError(Exception):
    """Base class of all emem_ros errors."""


class InvalidInputError(EmemError, ValueError):
    """An argument was rejected; nothing was stored."""


class TimeExpressionError(InvalidInputError):
    """A time expression could not be understood."""


class EmbeddingMismatchError(EmemError):
    """The memory file was built with another embedding model or dimension."""


class StoreError(EmemError):
    """The memory file cannot be opened or written."""


class UnknownNodeError(EmemError, KeyError):
    """An id names no stored node."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain words.
        return str(self.args[0]) if self.args else "unknown node"


class WorkingMemoryFullError(EmemError):
    """Flushes keep failing and the working-memory buffer is full."""


class EmbeddingUnavailableError(EmemError):
    """The embedding provider failed (unreachable, timed out, crashed): an outage, not bad data.

    Observations waiting to be embedded are kept for retry, never dead-lettered.
    """


class EmbeddingRejectedError(EmemError):
    """The provider answered, but with vectors that cannot be used (zero, NaN, wrong shape)."""


class MemoryInUseError(StoreError):
    """Another process holds the memory file open for writing."""
