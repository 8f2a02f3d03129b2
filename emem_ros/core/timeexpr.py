"""Time expressions a planner or a person types: '-10m', '10 minutes ago', 'yesterday', ISO-8601, epoch.

Relative expressions resolve against the memory's clock (the ROS clock on a
robot, bag time in replay), never against the wall clock behind its back;
day words and clock times ('today', 'this morning', 'since 9:00') also in
the memory's time zone (``MemoryConfig.timezone``, UTC by default). A word
naming a period means when that period begins (see ``timewords.py``).

ISO-8601 is read by our own parser, not ``datetime.fromisoformat``: that one
accepts far less on Python 3.10 than on 3.11+ ('...00.5Z', '20261122T100000Z',
'+0100' fail on 3.10), and a planner's time string must mean the same on
every robot. Accepted: extended or basic date (2026-11-22, 20261122) or ISO
week date (2026-W47-1), then optionally 'T' or a space and a time (10, 10:00,
10:00:00, 100000, with a fraction of any length after '.' or ','), then
optionally 'Z' or an offset (+01:00, +0100, +01). No zone means the
memory's time zone (UTC unless configured).
Every time must fall in the years 0001-9999 (what a date can name).
"""

from __future__ import annotations

import math
import numbers
import re
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import Optional, Union

import numpy as np

from emem_ros.core.errors import TimeExpressionError
from emem_ros.core.timewords import time_words

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
_LAST = re.compile(r"^\s*(?:in\s+|during\s+|since\s+)?(?:the\s+)?(?:last|past)\s+(?:(\d+(?:\.\d+)?|an?|one)\s+)?([a-z]+)\s*$")
_ISO = re.compile(
    r"^(?:(?P<y>\d{4})-?(?P<mo>\d{2})-?(?P<d>\d{2})"
    r"|(?P<wy>\d{4})-?w(?P<w>\d{2})(?:-?(?P<wd>[1-7]))?)"
    r"(?:[t ](?P<h>\d{2})(?::?(?P<mi>\d{2})(?::?(?P<s>\d{2})(?:[.,](?P<f>\d+))?)?)?)?"
    r"\s*(?P<z>z|[+-]\d{2}(?::?\d{2})?)?$"
)
EARLIEST = datetime(1, 1, 1, tzinfo=timezone.utc).timestamp()
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp()
"""The times a UTC date can name: answers print every time they mention."""
FORMS = (
    "a relative time ('-10m', '-2h', '-30s', '10 minutes ago', 'last hour', 'last 30 minutes'), "
    "a day word ('today', 'yesterday', 'this morning', 'this afternoon', 'this evening', 'last night'), "
    "a clock time ('since 9:00', 'at 14:30', 'yesterday at 18:00'), "
    "an ISO-8601 time ('2026-11-22T10:00:00Z'), 'now', or epoch seconds"
)
"""Every form ``parse_time`` reads, in the words an error shows."""
_HELP = f"use {FORMS}"


def parse_time(value: TimeLike, now: float, zone: tzinfo = timezone.utc) -> Optional[float]:
    """Resolve ``value`` to epoch seconds; None and '' mean 'unbounded'.

    ``zone`` is the memory's time zone: day words, clock times and ISO times
    without an offset are read in it.
    """
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise TimeExpressionError(f"{value!r} is not a time; {_HELP}")
    if isinstance(value, numbers.Real):  # numpy scalars too
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
        return _finite(now - seconds if sign == "-" else now + seconds, value)
    match = _AGO.match(text)
    if match:
        amount, unit = match.groups()
        count = 1.0 if amount in ("a", "an", "one") else float(amount)
        return _finite(now - count * _unit(unit, value), value)
    match = _LAST.match(text)
    if match and match.group(2) != "night":  # 'last hour', 'the past 10 minutes': from then until now
        amount, unit = match.groups()
        count = 1.0 if amount in (None, "a", "an", "one") else float(amount)
        return _finite(now - count * _unit(unit, value), value)
    worded = time_words(text, now, zone)
    if worded is not None:
        return _finite(worded, value)
    parsed = parse_iso(value, zone)
    if parsed is None:
        raise TimeExpressionError(f"could not read the time {value!r}; {_HELP}")
    return _finite(parsed, value)


def parse_iso(text: str, zone: tzinfo = timezone.utc) -> Optional[float]:
    """Epoch seconds of an ISO-8601 string (see the module doc), None if it is not one.

    Raises TimeExpressionError for a well-formed string naming an impossible
    time (month 13, hour 25).
    """
    match = _ISO.match(text.strip().lower())
    if match is None:
        return None
    g = match.groupdict()
    try:
        if g["y"] is not None:
            day = date(int(g["y"]), int(g["mo"]), int(g["d"]))
        else:
            day = date.fromisocalendar(int(g["wy"]), int(g["w"]), int(g["wd"] or 1))
        micros = int((g["f"] + "000000")[:6]) if g["f"] else 0  # beyond microseconds: cut, as 3.11+ does
        hour, minute, second = int(g["h"] or 0), int(g["mi"] or 0), int(g["s"] or 0)
        moment = datetime(day.year, day.month, day.day, hour, minute, second, micros, tzinfo=_zone(g["z"], zone))
        return moment.timestamp()
    except (ValueError, OverflowError) as exc:
        raise TimeExpressionError(f"{text!r} is not a real time ({exc}); {_HELP}") from None


def _zone(zone: Optional[str], default: tzinfo = timezone.utc) -> tzinfo:
    if zone is None:
        return default
    if zone == "z":
        return timezone.utc
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if hours > 23 or minutes > 59:
        raise ValueError(f"offset {zone} is out of range")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def time_zone(name: str) -> tzinfo:
    """The time zone a memory reads day words in: 'UTC', an IANA name ('Europe/Berlin') or an offset ('+01:00').

    Raises TimeExpressionError naming what is accepted.
    """
    text = name.strip() if isinstance(name, str) else ""
    if text.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    if re.fullmatch(r"[+-]\d{2}(?::?\d{2})?", text):
        try:
            return _zone(text)
        except ValueError as exc:
            raise TimeExpressionError(f"time zone {name!r}: {exc}") from None
    try:
        from zoneinfo import ZoneInfo  # the system's tz database (or the tzdata package)

        return ZoneInfo(text)
    except Exception:  # ZoneInfoNotFoundError, ValueError (a path), an empty name
        raise TimeExpressionError(
            f"unknown time zone {name!r}; use 'UTC', an IANA name like 'Europe/Berlin', or an offset like '+01:00'"
        ) from None


def _unit(unit: str, original: str) -> float:
    try:
        return _UNIT_SECONDS[unit]
    except KeyError:
        raise TimeExpressionError(f"unknown time unit {unit!r} in {original!r}; {_HELP}") from None


def _finite(seconds: float, original: object) -> float:
    return check_epoch(seconds, original)


def check_epoch(seconds: float, original: object = None) -> float:
    """``seconds`` when it is a time a date can name; a plain-words error otherwise.

    Without the bound, 1e30 passes as "finite" and fails much later, deep in a
    tool, as an OverflowError when the answer prints the time.
    """
    shown = seconds if original is None else original
    if not math.isfinite(seconds):
        raise TimeExpressionError(f"{shown!r} is not a finite time; {_HELP}")
    if not EARLIEST <= seconds <= LATEST:
        raise TimeExpressionError(
            f"{shown!r} is outside the years 0001-9999 (epoch seconds from {EARLIEST:.0f} to {LATEST:.0f});"
            f" {_HELP}"
        )
    return seconds
