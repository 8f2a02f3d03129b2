"""The tools' fast paths give exactly what the plain code they replace gives."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import numpy as np

from emem_ros.tools.aggregate import Aggregator
from emem_ros.tools.filters import Filters
from emem_ros.tools.perception import _first_seen_rank, timeline
from emem_ros.tools.results import fmt_time


def _reference_clock(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, tz=timezone.utc).strftime("%H:%M:%S")


def test_fmt_time_clock_matches_datetime_including_rounding_into_the_next_second():
    rng = random.Random(3)
    stamps = [1_763_800_000.0 + k + frac for k in (0, 59, 3599, 86_399)
              for frac in (0.0, 0.4999995, 0.5, 0.9999994, 0.9999995, 0.9999996)]
    stamps += [rng.uniform(0.0, 2e9) for _ in range(2000)]
    for stamp in stamps:
        assert fmt_time(stamp, stamp + 30.0).split(" (")[0] == _reference_clock(stamp), stamp
    far = 1_763_800_000.25
    assert fmt_time(far, far + 2 * 86_400).startswith(
        datetime.fromtimestamp(far, tz=timezone.utc).strftime("%Y-%m-%d %H:%M"))


def test_first_seen_rank_numbers_keys_as_they_are_met():
    rng = np.random.default_rng(5)
    text_id = rng.integers(0, 12, size=500)
    layer = np.asarray(rng.choice(["scene", "detections", "objects3d"], size=500), dtype=object)
    rank: dict[tuple[int, str], int] = {}
    expected = [rank.setdefault(key, len(rank)) for key in zip(text_id.tolist(), layer.tolist())]
    assert _first_seen_rank(text_id, layer, layer.tolist()).tolist() == expected


def test_first_seen_rank_of_rows_sorted_by_key_numbers_the_runs():
    rng = np.random.default_rng(6)
    rows = sorted(zip(rng.integers(0, 12, size=400).tolist(),
                      rng.choice(["scene", "detections", "objects3d"], size=400).tolist()))
    text_id = np.asarray([t for t, _ in rows])
    layer = np.asarray([l for _, l in rows], dtype=object)
    rank: dict[tuple[int, str], int] = {}
    expected = [rank.setdefault(key, len(rank)) for key in rows]
    assert _first_seen_rank(text_id, layer, layer.tolist()).tolist() == expected


def test_get_many_equals_get_per_text_under_a_window(make_memory, clock):
    memory = make_memory()
    start = clock.now
    for i in range(300):
        memory.add(f"thing {i % 7}", x=float(i % 5), y=1.0, timestamp=start + i, layer_name="detections")
        if i % 3 == 0:
            memory.add(f"note {i % 4}", x=2.0, y=2.0, timestamp=start + i, layer_name="scene")
    memory.flush()
    clock.now = start + 400
    env = memory.tools.env
    env.prepare()
    texts = env.catalog.texts()
    assert len(texts) == 11
    for f in (Filters(after=start + 50, before=start + 200), Filters(after=start + 250),
              Filters(layer="scene", before=start + 100), Filters()):
        for count in (True, False):
            agg = Aggregator(env.store, env.catalog, f)
            many = agg.get_many(texts, count=count)
            assert many == {t: Aggregator(env.store, env.catalog, f).get(t, count=count) for t in texts}
    # The timeline reads its rows' details after the scan: same hits as the rows themselves say.
    hits = timeline(env, Filters(after=start + 100, before=start + 150), 5, gists=False)
    assert len(hits) == 5
    conn = env.store.reader()
    for hit in hits:
        row = conn.execute("SELECT layer, x, y, stamp FROM observations WHERE id = ?",
                           (int(hit.id.split("-")[1]),)).fetchone()
        assert (row[0], row[1], row[2]) == (hit.layer, hit.position[0], hit.position[1])
        assert start + 100 <= row[3] <= start + 150
