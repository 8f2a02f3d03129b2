"""What every adapter shares: the result type, stamps, numbers, text caps.

Adapters read messages by attribute access only, so an rclpy message and a
``rosbags`` message of the same type go through the same code. An adapter
raises ``SkipMessage`` to drop a message with a reason; ``adapt`` turns that,
and any attribute or type error of a malformed message, into an empty result.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Protocol

from emem_ros.core.numbers import finite_or_none
from emem_ros.core.types import SourceType
from emem_ros.ingest.drafts import ObservationDraft

DEFAULT_MAX_TEXT_LENGTH = 4096
"""Same as MemoryConfig.max_text_length: a capped text is never rejected by the store."""

ELLIPSIS = "…"


class LayerLike(Protocol):
    """The part of ``LayerSpec`` an adapter reads."""

    @property
    def name(self) -> str: ...

    @property
    def is_internal_state(self) -> bool: ...


Adapter = Callable[[Any, LayerLike, float], list[ObservationDraft]]


class SkipMessage(Exception):
    """Raised by an adapter: the message carries nothing to store (the reason says why)."""


_NOTES: ContextVar[Optional[list[str]]] = ContextVar("emem_adapter_notes", default=None)


def note(reason: str) -> None:
    """Record why one item of a message was left out (the rest of the message is kept)."""
    notes = _NOTES.get()
    if notes is not None:
        notes.append(reason)


@contextmanager
def collecting_notes(notes: Optional[list[str]] = None) -> Iterator[list[str]]:
    """Collect the ``note`` calls of the adapter run inside the block into ``notes``."""
    notes = [] if notes is None else notes
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


@dataclass(frozen=True)
class AdaptResult:
    """Drafts made from one message; an empty list always comes with a reason."""

    drafts: list[ObservationDraft] = field(default_factory=list)
    skipped_reason: Optional[str] = None
    """Why the message produced nothing (malformed, empty, NaN, ...)."""
    partial: tuple[str, ...] = ()
    """Why some items of a message were left out (a detection without results, ...)."""
    adapter: str = ""
    """Name of the adapter used ('generic' for the fallback)."""

    @property
    def skipped(self) -> bool:
        return not self.drafts


def source_type(layer: LayerLike) -> str:
    internal = bool(getattr(layer, "is_internal_state", False))
    source: str = (SourceType.INTEROCEPTION if internal else SourceType.PERCEPTION).value
    return source


def stamp_seconds(header: Any) -> Optional[float]:
    """Seconds of ``header.stamp`` (or of a Time), None when absent, zero or invalid."""
    stamp = getattr(header, "stamp", header)
    sec = getattr(stamp, "sec", None)
    nanosec = getattr(stamp, "nanosec", None)
    if sec is None or nanosec is None:
        return None
    try:
        seconds = float(sec) + float(nanosec) * 1e-9
    except (TypeError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds <= 0.0:
        return None
    return seconds


def message_stamp(msg: Any, receive_time: float) -> float:
    """The message's own time when it has a non-zero header stamp, else the receive time."""
    header = getattr(msg, "header", None)
    seconds = stamp_seconds(header) if header is not None else None
    return seconds if seconds is not None else float(receive_time)


def frame_of(msg: Any) -> Optional[str]:
    header = getattr(msg, "header", None)
    frame = getattr(header, "frame_id", None) if header is not None else None
    return frame if isinstance(frame, str) and frame else None


def finite(value: Any, what: str) -> float:
    """``value`` as a finite float, or ``SkipMessage`` naming ``what``."""
    number = as_float(value)
    if number is None:
        raise SkipMessage(f"{what} is not a finite number ({value!r})")
    return number


as_float = finite_or_none
"""A finite float, or None for NaN, inf, None and non-numbers (bools and strings excluded)."""


def byte_value(value: Any) -> int:
    """ROS ``byte`` fields: an int in rosbags, a 1-byte ``bytes`` in rclpy."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) != 1:
            raise TypeError(f"expected one byte, got {value!r}")
        return value[0]
    if isinstance(value, bool):
        raise TypeError(f"expected a byte, got {value!r}")
    return int(value)


def text_field(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    return value


def format_number(value: float) -> str:
    """Compact, stable rendering: 0.73 not 0.7300000190734863, 12 not 12.0."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def cap_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(ELLIPSIS))] + ELLIPSIS


def draft(layer: LayerLike, text: str, stamp: float, **kwargs: Any) -> ObservationDraft:
    """An ObservationDraft of ``layer`` with the layer's source type."""
    return ObservationDraft(text=text, stamp=stamp, layer=layer.name, source_type=source_type(layer), **kwargs)
