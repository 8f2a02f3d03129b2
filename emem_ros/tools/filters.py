"""Filters shared by the perception tools: layer, time window, area, episode.

A filter is resolved once per call (times against the memory clock, episode
ids to row numbers), so the search code below it only sees numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.numbers import storable_int
from emem_ros.core.types import NodeKind, Position, parse_id

DEFAULT_NEAR_RADIUS = 3.0
"""Metres used when a caller gives near_x/near_y without spatial_radius."""


@dataclass(frozen=True)
class Filters:
    layer: Optional[str] = None
    after: Optional[float] = None
    before: Optional[float] = None
    center: Optional[Position] = None
    radius: Optional[float] = None
    episode: Optional[int] = None

    @property
    def timed(self) -> bool:
        return self.after is not None or self.before is not None

    @property
    def spatial(self) -> bool:
        return self.center is not None

    @property
    def empty(self) -> bool:
        return not (self.layer or self.timed or self.spatial or self.episode is not None)

    @property
    def lo(self) -> float:
        return self.after if self.after is not None else -math.inf

    @property
    def hi(self) -> float:
        return self.before if self.before is not None else math.inf

    def in_window(self, stamp: float) -> bool:
        return self.lo <= stamp <= self.hi

    def overlaps(self, first: float, last: float) -> bool:
        return first <= self.hi and last >= self.lo

    def covers(self, first: float, last: float) -> bool:
        return self.lo <= first and last <= self.hi

    def within(self, x: Optional[float], y: Optional[float]) -> bool:
        if self.center is None:
            return True
        if x is None or y is None:
            return False
        assert self.radius is not None
        return (x - self.center[0]) ** 2 + (y - self.center[1]) ** 2 <= self.radius ** 2

    def sql(self, alias: str = "o", *, time: bool = True, layer: bool = True, episode: bool = True,
            area: bool = True) -> tuple[str, list[Any]]:
        """SQL predicates (joined by AND, never empty) and their parameters."""
        parts: list[str] = []
        params: list[Any] = []
        if layer and self.layer:
            parts.append(f"{alias}.layer = ?")
            params.append(self.layer)
        if time and self.after is not None:
            parts.append(f"{alias}.stamp >= ?")
            params.append(self.after)
        if time and self.before is not None:
            parts.append(f"{alias}.stamp <= ?")
            params.append(self.before)
        if episode and self.episode is not None:
            parts.append(f"{alias}.episode_id = ?")
            params.append(self.episode)
        if area and self.center is not None:
            assert self.radius is not None
            cx, cy, _ = self.center
            r = self.radius
            parts.append(f"{alias}.x BETWEEN ? AND ? AND {alias}.y BETWEEN ? AND ?"
                         f" AND ({alias}.x - ?) * ({alias}.x - ?) + ({alias}.y - ?) * ({alias}.y - ?) <= ?")
            params += [cx - r, cx + r, cy - r, cy + r, cx, cx, cy, cy, r * r]
        return (" AND ".join(parts) or "1"), params

    def describe(self, fmt_time: Callable[[float], str]) -> str:
        """The filter in plain words, for notes on empty answers."""
        words = []
        if self.layer:
            words.append(f"layer '{self.layer}'")
        if self.after is not None:
            words.append(f"after {fmt_time(self.after)}")
        if self.before is not None:
            words.append(f"before {fmt_time(self.before)}")
        if self.center is not None:
            words.append(f"within {self.radius:g} m of ({self.center[0]:.1f}, {self.center[1]:.1f})")
        if self.episode is not None:
            words.append(f"episode ep-{self.episode}")
        return ", ".join(words)


def episode_number(value: Any) -> int:
    """'ep-3', 3 or '3' -> 3; anything else is a plain-words error."""
    if isinstance(value, bool):
        raise InvalidInputError(f"episode_id {value!r} is not an episode id (those look like 'ep-3')")
    if isinstance(value, int):
        if not storable_int(value):
            raise InvalidInputError(f"episode_id {value!r} is beyond what the memory can hold (ids up to 2^63 - 1)")
        return value
    text = str(value).strip()
    if text.isascii() and text.isdigit():
        text = f"ep-{text}"
    try:
        kind, number = parse_id(text)
    except ValueError as exc:
        beyond = "beyond" in str(exc)
        raise InvalidInputError(f"episode_id {value!r} is " + ("beyond what the memory can hold (ids up to 2^63 - 1)"
                                if beyond else "not an episode id (those look like 'ep-3')")) from None
    if kind is not NodeKind.EPISODE:
        raise InvalidInputError(f"{text} is not an episode id (those look like 'ep-3')")
    return number


def area(near_x: Any, near_y: Any, radius: Any, z: Any = 0.0,
         default_radius: float = DEFAULT_NEAR_RADIUS) -> tuple[Optional[Position], Optional[float]]:
    """A (centre, radius) pair from tool arguments, or (None, None) when no place was given."""
    if near_x is None and near_y is None:
        if radius is not None:
            raise InvalidInputError("spatial_radius needs near_x and near_y (the point to measure from)")
        return None, None
    if near_x is None or near_y is None:
        raise InvalidInputError("give both near_x and near_y, or neither")
    center = (_coordinate("x", near_x), _coordinate("y", near_y), _coordinate("z", 0.0 if z is None else z))
    r = default_radius if radius is None else _coordinate("radius", radius)
    if r <= 0:
        raise InvalidInputError(f"radius must be a positive number of metres, got {radius!r}")
    return center, r


def _coordinate(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidInputError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InvalidInputError(f"{name} must be a finite number, got {value!r}")
    return number
