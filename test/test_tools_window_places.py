"""places_in_window: place aggregates cut to a time window equal a brute-force count of the window."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from emem_ros.tools import window_places
from emem_ros.tools.window_places import places_in_window


def _brute(rows, lo, hi, cell):
    out = {}
    for text_id, layer, x, y, stamp, obs_id in rows:
        if not lo <= stamp <= hi:
            continue
        key = (text_id, layer, math.floor(x / cell), math.floor(y / cell), 0)
        g = out.setdefault(key, [0, 0.0, 0.0, math.inf, -math.inf, (-math.inf, 0)])
        g[0] += 1
        g[1] += x
        g[2] += y
        g[3] = min(g[3], stamp)
        g[4] = max(g[4], stamp)
        g[5] = max(g[5], (stamp, obs_id))
    return {k: (g[0], round(g[1], 6), round(g[2], 6), g[3], g[4], g[5][1]) for k, g in out.items()}


def _as_dict(places):
    return {(int(t), str(la), int(cx), int(cy), int(cz)): (int(n), round(float(sx), 6), round(float(sy), 6),
                                                          float(a), float(b), int(o))
            for t, la, cx, cy, cz, n, sx, sy, a, b, o in zip(
                places.text_id, places.layer, places.cx, places.cy, places.cz, places.count, places.sx,
                places.sy, places.first, places.last, places.last_obs)}


def test_window_places_equal_a_brute_force_count(make_memory, clock):
    memory = make_memory()
    rng = random.Random(3)
    t0 = clock.now - 5000
    names = ["red mug", "blue cup", "door"]
    for i in range(600):
        text = rng.choice(names)
        layer = rng.choice(["detections", "scene"])
        x, y = rng.choice([(1.1, 1.2), (4.3, 0.2), (-2.6, 3.9)])
        memory.add(text, x=x + rng.uniform(0, 0.4), y=y, timestamp=t0 + 3 * i + (i % 2), layer_name=layer,
                   source_type="perception")
    memory.add("battery 40%", x=1.1, y=1.2, timestamp=t0 + 10, layer_name="battery", source_type="interoception")
    memory.flush()
    conn = memory.store.reader()
    text_ids = {text: conn.execute("SELECT id FROM texts WHERE text = ?", (text,)).fetchone()[0] for text in names}
    rows = conn.execute("SELECT text_id, layer, x, y, stamp, id FROM observations WHERE text_id IN (?,?,?)",
                        list(text_ids.values())).fetchall()
    cell = memory.store.cell_size
    for lo, hi in [(t0 + 100, t0 + 900), (t0 + 500, None), (None, t0 + 1000), (t0 - 10, t0 + 99_999)]:
        places = memory.store.place_cache.of_texts(list(text_ids.values()), None, lo, hi)
        got = places_in_window(memory.store, places, lo, hi)
        assert got.capped == []
        expected = _brute(rows, -math.inf if lo is None else lo, math.inf if hi is None else hi, cell)
        assert _as_dict(got.places) == expected
    layered = places_in_window(memory.store, memory.store.place_cache.of_texts(list(text_ids.values()), "scene",
                                                                               t0 + 100, t0 + 900),
                               t0 + 100, t0 + 900, "scene")
    assert set(layered.places.layer.tolist()) == {"scene"}
    assert _as_dict(layered.places) == {k: v for k, v in _brute(rows, t0 + 100, t0 + 900, cell).items()
                                        if k[1] == "scene"}


def test_window_places_read_a_bounded_number_of_observations(make_memory, clock, monkeypatch):
    memory = make_memory()
    t0 = clock.now - 5000
    for i in range(300):
        memory.add("red mug", x=1.0 if i < 250 else 5.0, y=1.0, timestamp=t0 + i, layer_name="detections",
                   source_type="perception")
    memory.flush()
    monkeypatch.setattr(window_places, "WINDOW_ROWS", 100)
    monkeypatch.setattr(window_places, "MIN_ROWS_PER_TEXT", 10)
    text_id = memory.store.reader().execute("SELECT id FROM texts WHERE text = 'red mug'").fetchone()[0]
    places = memory.store.place_cache.of_texts([text_id], None, t0 + 5, None)
    got = places_in_window(memory.store, places, t0 + 5, None)
    assert got.capped == [text_id]
    assert int(got.places.count.sum()) == 100  # the newest hundred: 50 at x=5 and 50 at x=1
    assert sorted(np.round(got.places.sx / got.places.count, 3).tolist()) == [1.0, 5.0]
    result = memory.tools.locate("red mug", time_after=t0 + 5)
    assert any("only the newest sightings" in note for note in result.notes)
    assert result.last_stamp == pytest.approx(t0 + 299)
