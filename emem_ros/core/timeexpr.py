"""Time expressions a planner or a person types: '-10m', '10 minutes ago', ISO-8601, epoch.

Relative expressions resolve against the memory's clock (the ROS clock on a
robot, bag time in replay), never against the wall clock behind its back.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Optional, Union

from emem_ros.core.errors import TimeExpressionError

TimeLike = Union[str, int, float, None]

_UNIT_SECONDS = {
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "w": 604800.0, "week": 604800.0, "weeks": 604800.0,
}
_SHORT = re.compile(r"^\s*([+-])\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")
_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?|an?|one)\s+([a-z]+)\s+ago\s*$")
_HELP = (
    "use a relative time like '-10m', '-2h', '-30s' or '10 minutes ago', "
    "an ISO-8601 time like '2026-11-22T10:00:00Z', 'now', or epoch seconds"
)


def parse_time(value: TimeLike, now: float) -> Optional[float]:
    """Resolve ``value`` to epoch seconds; None and '' mean 'unbounded'."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TimeExpressionError(f"{value!r} is not a time; {_HELP}")
    if isinstance(value, (int, float)):
        return _finite(float(value), value)
    if not isinstance(value, str):
        raise TimeExpressionError(f"{value!r} is not a time; {_HELP}")
    text = value.strip().lower()
    if not text:
        return None
    if text == "now":
        return now
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        return _finite(number, value)
    match = _SHORT.match(text)
    if match:
        sign, amount, unit = match.groups()
        seconds = float(amount) * _unit(unit, value)
        return now - seconds if sign == "-" else now + seconds
    match = _AGO.match(text)
    if match:
        amount, unit = match.groups()
        count = 1.0 if amount in ("a", "an", "one") else float(amount)
        return now - count * _unit(unit, value)
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise TimeExpressionError(f"could not read the time {value!r}; {_HELP}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def _unit(unit: str, original: str) -> float:
    try:
        return _UNIT_SECONDS[unit]
    except KeyError:
        raise TimeExpressionError(f"unknown time unit {unit!r} in {original!r}; {_HELP}") from None


def _finite(seconds: float, original: object) -> float:
    if not math.isfinite(seconds):
        raise TimeExpressionError(f"{original!r} is not a finite time; {_HELP}")
    return seconds
