"""Day words and clock times, in the memory's clock and time zone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from emem_ros import MemoryConfig
from emem_ros.core.errors import InvalidInputError, TimeExpressionError
from emem_ros.core.timeexpr import FORMS, parse_time, time_zone

UTC = timezone.utc
BERLIN = time_zone("Europe/Berlin")
# Wednesday 2026-11-25, 15:20:00 UTC (16:20 in Berlin, CET = UTC+1).
NOW = datetime(2026, 11, 25, 15, 20, tzinfo=UTC).timestamp()


def at(zone, *fields) -> float:
    return datetime(*fields, tzinfo=zone).timestamp()


@pytest.mark.parametrize("words, expected", [
    ("today", at(UTC, 2026, 11, 25)),
    ("Yesterday", at(UTC, 2026, 11, 24)),
    ("this morning", at(UTC, 2026, 11, 25, 6)),
    ("this afternoon", at(UTC, 2026, 11, 25, 12)),
    ("this evening", at(UTC, 2026, 11, 25, 18)),
    ("yesterday evening", at(UTC, 2026, 11, 24, 18)),
    ("last night", at(UTC, 2026, 11, 24, 22)),
    ("tonight", at(UTC, 2026, 11, 25, 22)),
    ("last hour", NOW - 3600),
    ("the last 10 minutes", NOW - 600),
    ("past 2 hours", NOW - 7200),
    ("since 9:00", at(UTC, 2026, 11, 25, 9)),
    ("at 14:30", at(UTC, 2026, 11, 25, 14, 30)),
    ("at 16:00", at(UTC, 2026, 11, 24, 16)),  # not yet today: the latest 16:00 is yesterday's
    ("today at 18:00", at(UTC, 2026, 11, 25, 18)),  # a day word fixes the day, even ahead
    ("yesterday 9:15", at(UTC, 2026, 11, 24, 9, 15)),
    ("since 2:30 pm", at(UTC, 2026, 11, 25, 14, 30)),
    ("since 9", at(UTC, 2026, 11, 25, 9)),
    ("since noon", at(UTC, 2026, 11, 25, 12)),
    ("since midnight", at(UTC, 2026, 11, 25)),
    ("12 am", at(UTC, 2026, 11, 25)),
])
def test_time_words_in_utc(words, expected):
    assert parse_time(words, NOW) == pytest.approx(expected)


@pytest.mark.parametrize("words, expected", [
    ("today", at(BERLIN, 2026, 11, 25)),
    ("this morning", at(BERLIN, 2026, 11, 25, 6)),
    ("since 9:00", at(BERLIN, 2026, 11, 25, 9)),
    ("at 16:00", at(BERLIN, 2026, 11, 25, 16)),  # 16:00 has passed in Berlin (16:20), not in UTC
    ("last night", at(BERLIN, 2026, 11, 24, 22)),
    ("2026-11-22T10:00:00", at(BERLIN, 2026, 11, 22, 10)),  # no offset: the memory's zone
    ("2026-11-22T10:00:00Z", at(UTC, 2026, 11, 22, 10)),  # an offset wins
])
def test_time_words_in_the_memory_time_zone(words, expected):
    assert parse_time(words, NOW, BERLIN) == pytest.approx(expected)


def test_today_after_local_midnight_is_the_local_date():
    late = datetime(2026, 11, 25, 23, 30, tzinfo=UTC).timestamp()  # 00:30 on the 26th in Berlin
    assert parse_time("today", late, BERLIN) == at(BERLIN, 2026, 11, 26)
    assert parse_time("today", late) == at(UTC, 2026, 11, 25)


def test_days_across_a_daylight_saving_change_are_calendar_days():
    after_change = datetime(2026, 3, 30, 12, tzinfo=UTC).timestamp()  # Berlin moved to CEST on the 29th
    today, yesterday = parse_time("today", after_change, BERLIN), parse_time("yesterday", after_change, BERLIN)
    assert today - yesterday == timedelta(hours=23).total_seconds()


@pytest.mark.parametrize("bad", ["at 25:00", "since 9:75", "at 13 pm", "teatime", "last morning", "yesterday-ish",
                                 "today yesterday 9:00"])
def test_unreadable_times_list_the_forms_accepted(bad):
    with pytest.raises(TimeExpressionError) as info:
        parse_time(bad, NOW)
    message = str(info.value)
    assert bad in message or repr(bad) in message
    if "clock time" not in message and "hour is" not in message:
        for form in ("'yesterday'", "'this morning'", "'since 9:00'", "'at 14:30'", "'last hour'", "ISO-8601"):
            assert form in message and form in FORMS


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/Los_Angeles", "+05:30", "-0800"])
def test_time_zones_accepted(zone):
    assert MemoryConfig(timezone=zone).validate().timezone == zone


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "+25:00", "../../etc/passwd"])
def test_unknown_time_zones_are_refused_in_words(zone):
    with pytest.raises(InvalidInputError, match="timezone"):
        MemoryConfig(timezone=zone).validate()


def test_a_memory_reads_time_words_in_its_zone_and_clock(make_memory, clock):
    clock.now = NOW
    memory = make_memory(timezone="Europe/Berlin")
    memory.add("coffee machine on", x=0, y=0, timestamp=at(BERLIN, 2026, 11, 25, 7, 30))
    memory.add("late visitor", x=0, y=0, timestamp=at(BERLIN, 2026, 11, 24, 23, 0))
    memory.add("lunch in the kitchen", x=0, y=0, timestamp=at(BERLIN, 2026, 11, 24, 12, 30))
    assert memory.resolve_time("this morning") == at(BERLIN, 2026, 11, 25, 6)
    answer = memory.temporal_query(time_after="this morning")
    assert "coffee machine on" in answer and "late visitor" not in answer
    answer = memory.temporal_query(time_after="last night", time_before="today")
    assert "late visitor" in answer and "coffee" not in answer and "lunch" not in answer
    answer = memory.temporal_query(time_after="yesterday", time_before="yesterday evening")
    assert "lunch in the kitchen" in answer and "late visitor" not in answer
    error = memory.dispatch_tool_call("temporal_query", {"time_after": "teatime"})
    assert error.startswith("Error:") and "'since 9:00'" in error and "'yesterday'" in error
