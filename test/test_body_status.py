"""body_status beyond 'now': readings as of a past time, and when a level was crossed.

Ground truth is the scene's draining battery (test/support/scene.py) and
small hand-made battery histories (charging, draining, charging again).
"""

from __future__ import annotations

import math
import time

import pytest

from emem_ros.tools import body
from test.support.scene import scene_memory

PCT = "%"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    memory, clock, scene = scene_memory(tmp_path_factory.mktemp("body"), steps_per_room=200)
    yield memory, clock, scene
    memory.close()


def _iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def _cycles(memory, clock, levels, step: float = 60.0, layer: str = "battery") -> list[tuple[float, float]]:
    """Store one battery reading (percent) per ``step`` seconds; returns (stamp, percent)."""
    t0 = clock.now
    out = []
    for i, pct in enumerate(levels):
        stamp = t0 + i * step
        memory.add_body_state(f"battery {pct:.0f}% (discharging)", layer, x=1.0, y=2.0, timestamp=stamp,
                              value=pct / 100.0)
        out.append((stamp, pct))
    memory.flush()
    clock.now = t0 + len(levels) * step
    return out


# ---------------------------------------------------------------------- as of a past time
def test_at_time_gives_the_last_reading_before_it_with_its_trend(world):
    memory, clock, scene = world
    at = scene.battery[40][0] + 5.0  # between two readings
    result = memory.tools.body_status(["battery"], at_time=at)
    (reading,) = result.readings
    stamp, pct = scene.battery[40]
    assert (reading.stamp, reading.text) == (stamp, f"battery {pct:.0f}%")
    earliest = next(p for s, p in scene.battery if s >= stamp - body.TREND_WINDOW)
    first = next(s for s, _ in scene.battery if s >= stamp - body.TREND_WINDOW)
    shown = float(f"{pct:.0f}") - float(f"{earliest:.0f}")
    assert reading.trend == f"{shown:+.3g}% over {(stamp - first) / 60:.0f} min"
    assert str(result).startswith("Body status at ") and f"battery {pct:.0f}%" in str(result)
    latest = memory.tools.body_status(["battery"]).readings[0]
    assert latest.stamp == scene.battery[-1][0] != reading.stamp


def test_at_time_through_the_registry_reads_time_expressions(world):
    memory, clock, scene = world
    minutes_ago = 15
    at = clock.now - minutes_ago * 60
    expected = max((s, p) for s, p in scene.battery if s <= at)
    relative = memory.dispatch_tool_call("body_status", {"layers": ["battery"], "at_time": f"-{minutes_ago}m"})
    absolute = memory.dispatch_tool_call("body_status", {"layers": "battery", "at_time": _iso(at)})
    assert relative == absolute == str(memory.tools.body_status(["battery"], at_time=at))
    assert f"battery {expected[1]:.0f}%" in relative


def test_at_time_before_any_reading_says_when_the_first_one_came(world):
    memory, clock, scene = world
    result = memory.tools.body_status(["battery"], at_time=scene.battery[0][0] - 60)
    assert result.readings == []
    assert str(result).startswith("No body readings at or before")
    assert any("the first is 'battery" in n for n in result.notes)


def test_a_stale_reading_is_flagged(make_memory, clock):
    memory = make_memory()
    _cycles(memory, clock, [90, 89])
    clock.now += 7200
    result = memory.tools.body_status(at_time=clock.now - 60)
    assert result.readings[0].text.startswith("battery 89%")
    assert any("min earlier" in n for n in result.notes)


# ---------------------------------------------------------------------- crossings on the scene
def test_below_reports_the_crossing_with_the_readings_around_it(world):
    memory, clock, scene = world
    for level in (90, 75, 55):
        result = memory.tools.body_status(["battery"], below=level)
        (crossing,) = result.crossings
        index = next(i for i, (_, pct) in enumerate(scene.battery) if pct < level)
        assert crossing.after.stamp == scene.battery[index][0]
        assert crossing.before is not None and crossing.before.stamp == scene.battery[index - 1][0]
        assert crossing.after_level == pytest.approx(scene.battery[index][1])
        assert crossing.before_level == pytest.approx(scene.battery[index - 1][1])
        assert crossing.unit == PCT and crossing.direction == "below" and result.readings == []
        text = str(result)
        assert text.startswith(f"1 body crossing below {level}%")
        assert f"fell below {level}%: {scene.battery[index][1]:g}%" in text
        assert crossing.after.obs_id in text


def test_the_level_is_exact_where_the_text_rounds(world):
    """0.795 reads 'battery 80%' (rounded) but it is below 80 %: values decide, texts only show."""
    memory, clock, scene = world
    (crossing,) = memory.tools.body_status(["battery"], below=80).crossings
    assert crossing.after_level == 79.5 and crossing.after.text == "battery 80%"


def test_no_crossing_says_how_low_it_went(world):
    memory, clock, scene = world
    lowest = min(p for _, p in scene.battery)
    result = memory.tools.body_status(["battery"], below=lowest - 5)
    assert result.crossings == [] and str(result).startswith(f"No body reading crossed below {lowest - 5:g}%")
    assert any(f"lowest {lowest:g}%" in n for n in result.notes)
    hot = memory.tools.body_status(["cpu_temp"], above=60)
    assert [c.layer for c in hot.crossings] == ["cpu_temp"] and hot.crossings[0].before is None
    assert "already above 60 C at its first reading" in str(hot)


def test_a_fraction_threshold_for_a_percent_layer_gets_a_hint(world):
    memory, clock, scene = world
    result = memory.tools.body_status(["battery"], below=0.3)
    assert result.crossings == []
    assert any("for 30% give below=30" in n for n in result.notes)


def test_a_window_bounds_the_search_and_a_crossing_at_its_start_is_kept(world):
    memory, clock, scene = world
    index = next(i for i, (_, pct) in enumerate(scene.battery) if pct < 70)
    crossed = scene.battery[index][0]
    inside = memory.tools.body_status(["battery"], below=70, time_after=crossed - 1, time_before=crossed + 600)
    (crossing,) = inside.crossings
    assert crossing.before.stamp == scene.battery[index - 1][0] < crossed - 1  # read just before the window
    later = memory.tools.body_status(["battery"], below=70, time_after=crossed + 30)
    assert later.crossings == [] and any("already below 70%" in n for n in later.notes)
    earlier = memory.tools.body_status(["battery"], below=70, time_before=crossed - 1)
    assert earlier.crossings == []


# ---------------------------------------------------------------------- several crossings
def test_each_crossing_newest_first_capped(make_memory, clock):
    memory = make_memory()
    levels = [60, 40, 25, 20, 50, 90, 35, 28, 26, 80, 29, 70]  # below 30: three times
    history = _cycles(memory, clock, levels)
    result = memory.tools.body_status(["battery"], below=30)
    truth = [history[i] for i in range(1, len(levels)) if levels[i] < 30 <= levels[i - 1]]
    assert [c.after.stamp for c in result.crossings] == [s for s, _ in reversed(truth)]
    assert [c.before_level for c in result.crossings] == [80.0, 35.0, 40.0]
    capped = memory.tools.body_status(["battery"], below=30, n_results=2)
    assert [c.after.stamp for c in capped.crossings] == [s for s, _ in reversed(truth)][:2]
    assert any("showing the newest 2 battery crossings" in n for n in capped.notes)
    rising = memory.tools.body_status(["battery"], above=75)
    assert [(c.before_level, c.after_level) for c in rising.crossings] == [(26.0, 80.0), (50.0, 90.0)]
    assert "rose above 75%: 80% at" in str(rising)


def test_a_layer_that_starts_past_the_level(make_memory, clock):
    memory = make_memory()
    _cycles(memory, clock, [20, 25, 40, 28])
    crossings = memory.tools.body_status(["battery"], below=30).crossings
    assert [c.before_level for c in crossings] == [40.0, None]
    assert crossings[1].before is None and crossings[1].after_level == 20.0


def test_the_value_search_is_bounded_and_says_so(make_memory, clock, monkeypatch):
    memory = make_memory()
    levels = [20.0] * 10 + [90 - i * 0.1 for i in range(290)]  # fell below 30 once, 290 readings ago
    history = _cycles(memory, clock, levels, step=10.0)
    found = memory.tools.body_status(["battery"], below=30)
    assert [c.after.stamp for c in found.crossings] == [history[0][0]]  # the very first reading, past already
    monkeypatch.setattr(body, "SCAN_LIMIT", 120)
    capped = memory.tools.body_status(["battery"], below=30)
    assert capped.crossings == []
    assert any(f"searched only the newest 120 battery readings (back to {memory.tools.env.fmt(history[-121][0])})"
               in n for n in capped.notes), capped.notes
    assert any("never went below 30%" in n for n in capped.notes)
    older = memory.tools.body_status(["battery"], below=30, time_before=history[20][0])  # another period
    assert [c.after.stamp for c in older.crossings] == [history[0][0]]
    low = memory.tools.body_status(["battery"], below=95, time_before=history[5][0])
    assert low.crossings[0].before is None  # a window holding only past readings back to the first one


def test_the_text_scan_reads_at_most_scan_limit_rows(make_memory, clock, monkeypatch):
    memory = make_memory()
    t = clock.now
    for i in range(300):  # the value is a status level, the text a temperature: levels come from texts
        memory.add_body_state(f"WARN motor: hot (temp={60 + i % 7}.5)", "motor", timestamp=t + i, value=1.0)
    memory.flush()
    monkeypatch.setattr(body, "SCAN_LIMIT", 120)
    monkeypatch.setattr(body, "SCAN_CHUNK", 50)
    read = []
    real = body._rows

    def counting(env, where, params, order, limit):
        rows = real(env, where, params, order, limit)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(body, "_rows", counting)
    result = memory.tools.body_status(["motor"], below=10)
    assert sum(read) <= 120
    assert any("searched only the newest 120 motor readings" in n for n in result.notes), result.notes


def test_archived_readings_still_count_through_their_values(make_memory, clock):
    memory = make_memory(archive_after_seconds=60.0, consolidation_window=60.0)
    history = _cycles(memory, clock, [50, 40, 31, 29, 27], step=30.0)
    ids = [r[0] for r in memory.store.reader().execute("SELECT id FROM observations ORDER BY id")]
    with memory.store.write() as conn:  # promote as consolidation does, then let archival take them
        conn.execute("UPDATE observations SET tier='long_term', tier_since=?", (clock.now - 1000,))
    assert memory.archive().observations == len(ids)
    assert memory.store.reader().execute("SELECT COUNT(*) FROM observations WHERE text_id IS NULL").fetchone()[0]
    # every text left the hot tables: archival remembered that values x 100 are the shown percent
    (crossing,) = memory.tools.body_status(["battery"], below=30).crossings
    assert crossing.after.stamp == history[3][0] and crossing.after_level == pytest.approx(29.0)
    assert crossing.after.text == "battery 29% (archived)" and crossing.before_level == pytest.approx(31.0)
    latest = memory.tools.body_status().readings
    assert [r.text for r in latest] == ["battery 27% (archived)"]


def test_a_layer_whose_values_are_not_what_its_text_shows_is_read_from_the_text(make_memory, clock):
    memory = make_memory()
    t = clock.now
    for i, temp in enumerate((60.5, 68.0, 71.2, 66.0)):  # value = diagnostic level, text shows a temperature
        memory.add_body_state(f"WARN motor_left: temperature high (temp={temp})", "diagnostics", timestamp=t + i,
                              value=1.0)
    memory.add_body_state("OK lidar", "diagnostics", timestamp=t + 10, value=0.0)
    memory.flush()
    result = memory.tools.body_status(["diagnostics"], above=70)
    (crossing,) = result.crossings
    assert (crossing.before_level, crossing.after_level, crossing.unit) == (68.0, 71.2, "")


def test_a_layer_mixing_quantities_is_not_compared_across_them(make_memory, clock):
    memory = make_memory()
    t = clock.now
    for i in range(6):  # a DiagnosticArray layer: one status per device, each with its own number
        memory.add_body_state(f"OK motor_left: ok (temperature={44 + i}.0)", "diagnostics", timestamp=t + 2 * i,
                              value=0.0)
        memory.add_body_state("OK lidar: ok (frequency=10.0)", "diagnostics", timestamp=t + 2 * i + 1, value=0.0)
    memory.flush()
    result = memory.tools.body_status(["diagnostics"], below=40)
    assert result.crossings == []
    assert any("measure several things (frequency, temperature)" in n for n in result.notes)


def test_a_layer_without_numbers_is_explained(make_memory, clock):
    memory = make_memory()
    memory.add_body_state("all motors nominal", "status", timestamp=clock.now)
    memory.flush()
    result = memory.tools.body_status(["status"], below=3)
    assert result.crossings == [] and any("carry no number" in n for n in result.notes)


# ---------------------------------------------------------------------- bad calls
@pytest.mark.parametrize("arguments, words", [
    ({"below": 30, "above": 70}, "either below or above"),
    ({"below": 30, "at_time": "-1h"}, "at_time cannot be combined"),
    ({"time_after": "-1h"}, "only bound a below/above search"),
    ({"below": 30, "time_after": "-1m", "time_before": "-2h"}, "swap them"),
    ({"below": "thirty"}, "'below' must be a number"),
    ({"above": True}, "'above' must be a number"),
    ({"at_time": "teatime"}, "at_time: could not read the time"),
    ({"below": 30, "n_results": 0}, "'n_results' must be at least 1"),
    ({"layers": 7}, "'layers' must be a list"),
])
def test_bad_calls_get_plain_word_errors(world, arguments, words):
    memory, _, _ = world
    answer = memory.dispatch_tool_call("body_status", arguments)
    assert answer.startswith("Error: ") and words in answer, answer


@pytest.mark.parametrize("value", [math.nan, math.inf, "abc", [30]])
def test_bad_thresholds_in_direct_calls_are_refused_in_words(world, value):
    memory, _, _ = world
    with pytest.raises(ValueError, match="'below' must be a number"):  # the schema's check, as for an LLM's call
        memory.tools.body_status(below=value)


def test_the_schema_lists_the_new_parameters_after_layers():
    from emem_ros.tools.specs import TOOLS

    spec = next(t for t in TOOLS if t.name == "body_status")
    assert list(spec.properties) == ["layers", "at_time", "below", "above", "time_after", "time_before", "n_results"]
    assert spec.required == [] and set(spec.time_params) == {"at_time", "time_after", "time_before"}
    assert "below=30" in spec.description

