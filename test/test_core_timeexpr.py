from datetime import datetime, timezone

import pytest

from emem_ros.core.errors import TimeExpressionError
from emem_ros.core.timeexpr import parse_time

NOW = 1_763_800_000.0


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("-10m", NOW - 600),
        ("-2h", NOW - 7200),
        ("-30s", NOW - 30),
        ("- 1.5 min", NOW - 90),
        ("+5s", NOW + 5),
        ("10 minutes ago", NOW - 600),
        ("an hour ago", NOW - 3600),
        ("2 days ago", NOW - 2 * 86400),
        ("now", NOW),
        (1_700_000_000, 1_700_000_000.0),
        (1_700_000_000.5, 1_700_000_000.5),
        ("1700000000.25", 1_700_000_000.25),
    ],
)
def test_expressions_resolve_against_the_memory_clock(expr, expected):
    assert parse_time(expr, NOW) == pytest.approx(expected)


def test_iso_8601_with_and_without_zone():
    utc = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc).timestamp()
    assert parse_time("2026-11-22T10:00:00Z", NOW) == utc
    assert parse_time("2026-11-22T11:00:00+01:00", NOW) == utc
    assert parse_time("2026-11-22T10:00:00", NOW) == utc  # naive = UTC, documented


@pytest.mark.parametrize("empty", [None, "", "   "])
def test_empty_means_unbounded(empty):
    assert parse_time(empty, NOW) is None


@pytest.mark.parametrize(
    "bad, words",
    [
        ("yesterday-ish", "could not read"),
        ("-10 parsecs", "unknown time unit"),
        ("nan", "finite"),
        (float("inf"), "finite"),
        (True, "not a time"),
        ([1, 2], "not a time"),
    ],
)
def test_bad_expressions_say_what_to_use(bad, words):
    with pytest.raises(TimeExpressionError) as info:
        parse_time(bad, NOW)
    assert words in str(info.value)
    assert "-10m" in str(info.value) or "finite" in str(info.value) or "unit" in str(info.value)


UTC_10 = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    "text, expected",
    [
        # Rejected by datetime.fromisoformat on Python 3.10, accepted on 3.11+: our parser reads them everywhere.
        ("2026-11-22T10:00:00.5Z", UTC_10 + 0.5),
        ("20261122T100000Z", UTC_10),
        ("2026-11-22T10:00:00+0100", UTC_10 - 3600),
        ("2026-11-22T10:00:00.123456789Z", UTC_10 + 0.123456),  # beyond microseconds: cut
        ("2026-11-22T10:00:00,25z", UTC_10 + 0.25),
        ("2026-11-22T10Z", UTC_10),
        ("2026-11-22T1000-02", UTC_10 + 7200),
        ("2026-W47-7T10:00:00Z", UTC_10),  # ISO week date: Sunday of week 47
        ("2026-11-22 10:00", UTC_10),
        ("2026-11-22", UTC_10 - 36000),
        ("9999-12-31T23:59:59Z", datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp()),
    ],
)
def test_iso_8601_reads_the_same_on_every_python(text, expected):
    assert parse_time(text, NOW) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    "bad, words",
    [
        ("2026-13-45", "not a real time"),
        ("2026-11-22T25:00", "not a real time"),
        ("2026-11-22T10:00+25:00", "not a real time"),
        (1e30, "outside the years 0001-9999"),
        (-1e30, "outside the years 0001-9999"),
        ("-99999999999999d", "outside the years 0001-9999"),
        ("2026-11-22T10:00:00+0100 tomorrow", "could not read"),
    ],
)
def test_impossible_and_out_of_range_times_are_plain_errors(bad, words):
    with pytest.raises(TimeExpressionError) as info:
        parse_time(bad, NOW)
    assert words in str(info.value)


def test_numpy_numbers_are_epoch_seconds():
    import numpy as np

    assert parse_time(np.int64(1_700_000_000), NOW) == 1_700_000_000.0
    assert parse_time(np.float32(1024.0), NOW) == 1024.0
    with pytest.raises(TimeExpressionError, match="not a time"):
        parse_time(np.bool_(True), NOW)
