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
