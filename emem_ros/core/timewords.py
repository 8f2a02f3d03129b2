"""Day words and clock times a person says: 'yesterday', 'this morning', 'last night', 'since 9:00'.

They are read in the memory's time zone, against the memory's clock (not
the wall clock). A word naming a period means when that period begins, so
``time_after="yesterday"`` is "since yesterday began" and
``time_before="today"`` is "before midnight":

- 'today' / 'yesterday': midnight starting that day;
- 'this morning' / 'this afternoon' / 'this evening': 06:00 / 12:00 / 18:00
  today ('yesterday morning' and so on: the day before);
- 'last night' (also 'tonight', 'this night'): 22:00 yesterday (tonight: 22:00 today);
- a clock time, with or without 'at' / 'since' / 'from' / 'after' / 'before'
  ('14:30', 'at 2:30 pm', 'since 9', 'noon', 'midnight'): its latest
  occurrence not after now, unless a day word fixes the day ('today at 18:00',
  'yesterday 9:15').
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Optional

from emem_ros.core.errors import TimeExpressionError

PERIOD_STARTS = {"morning": 6, "afternoon": 12, "evening": 18, "night": 22}
"""Hour (local) at which each named part of a day begins."""

_DAY = r"(?:(?P<day>today|yesterday)\s+)?"
_PERIOD = re.compile(r"^(?:(?P<which>this|today|yesterday|last)\s+(?P<period>morning|afternoon|evening|night)"
                     r"|(?P<tonight>tonight))$")
_CLOCK = re.compile(
    r"^" + _DAY + r"(?:(?P<word>at|since|from|after|before)\s+)?"
    r"(?:(?P<named>noon|midday|midnight)"
    r"|(?P<h>\d{1,2})(?:[:.h](?P<mi>\d{2})(?::(?P<s>\d{2}))?)?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?)"
    r"(?:\s+(?P<day2>today|yesterday))?$"
)


def time_words(text: str, now: float, zone: tzinfo) -> Optional[float]:
    """Epoch seconds ``text`` (lower case, stripped) names, or None when it is not a day word or clock time.

    Raises TimeExpressionError for a clock time that cannot be (25:00, 13 pm).
    """
    text = " ".join(text.split())
    if text in ("today", "yesterday"):
        return _at(_today(now, zone) - timedelta(days=text == "yesterday"), time(0), zone)
    match = _PERIOD.match(text)
    if match:
        if match.group("tonight"):
            return _at(_today(now, zone), time(PERIOD_STARTS["night"]), zone)
        which, period = match.group("which"), match.group("period")
        if which == "last" and period != "night":
            return None  # 'last morning' is not a phrase; the caller's error lists what is
        back = 1 if which in ("yesterday", "last") else 0
        return _at(_today(now, zone) - timedelta(days=back), time(PERIOD_STARTS[period]), zone)
    match = _CLOCK.match(text)
    if match is None:
        return None
    g = match.groupdict()
    if g["h"] is not None and g["mi"] is None and g["ampm"] is None and g["word"] is None and g["day"] is None \
            and g["day2"] is None:
        return None  # a bare number is epoch seconds (read before this)
    if g["day"] is not None and g["day2"] is not None:
        return None
    clock = _clock(g, text)
    day_word = g["day"] or g["day2"]
    today = _today(now, zone)
    if day_word is not None:
        return _at(today - timedelta(days=day_word == "yesterday"), clock, zone)
    moment = _at(today, clock, zone)
    return moment if moment <= now else _at(today - timedelta(days=1), clock, zone)


def _clock(g: dict[str, Optional[str]], text: str) -> time:
    named = g["named"]
    if named is not None:
        return time(0) if named == "midnight" else time(12)
    hour, minute, second = int(g["h"] or 0), int(g["mi"] or 0), int(g["s"] or 0)
    ampm = (g["ampm"] or "").replace(".", "")
    if ampm:
        if not 1 <= hour <= 12:
            raise TimeExpressionError(f"{text!r}: with am/pm the hour is 1-12, got {hour}")
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    if hour > 23 or minute > 59 or second > 59:
        raise TimeExpressionError(f"{text!r} is not a clock time (hours 0-23, minutes and seconds 0-59)")
    return time(hour, minute, second)


def _today(now: float, zone: tzinfo) -> date:
    try:
        return datetime.fromtimestamp(now, zone).date()
    except (OverflowError, OSError, ValueError) as exc:
        raise TimeExpressionError(f"the memory's clock ({now!r}) names no date: {exc}") from None


def _at(day: date, clock: time, zone: tzinfo) -> float:
    """Epoch seconds of ``clock`` on ``day`` in ``zone`` (a time skipped by a DST change moves forward)."""
    try:
        return datetime.combine(day, clock, tzinfo=zone).timestamp()
    except (OverflowError, OSError, ValueError) as exc:
        raise TimeExpressionError(f"{day} {clock} is not a time this memory can name: {exc}") from None
