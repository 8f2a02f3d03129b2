"""Time-window consolidation through the Memory facade: gists per room visit, incremental, noise once."""

from __future__ import annotations

import json

import numpy as np

from test.support.patrol import ROOM, ROOMS, age_past_window, gist_rows, open_memory, patrol_into


def test_a_multi_room_patrol_gives_one_gist_per_room_visit(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    info = patrol_into(memory, clock, 8000)
    age_past_window(memory, clock)
    report = memory.consolidate_time_window()
    assert report.gists == info.visits > 25, "one gist per visit, not one for the whole run"
    rows = gist_rows(memory)
    assert [r[1].split(" area")[0] for r in rows] == info.visit_rooms  # the scene names the room
    rooms = {name: cell for name, cell, _, _ in ROOMS}
    for gist_id, room in zip((r[0] for r in rows), info.visit_rooms):  # each gist sits in its room
        centroid = memory.store.get_gists([gist_id])[0].centroid
        cx, cy = rooms[room]
        assert cx * ROOM <= centroid[0] <= (cx + 1) * ROOM and cy * ROOM <= centroid[1] <= (cy + 1) * ROOM
    assert max(r[7] for r in rows) < 7.5  # no gist covers more than a room and its doorway
    # a gist counts what it perceived; the visit's body readings are promoted with it, not summarised
    assert 0 < report.readings <= info.layers["battery"] and report.body_only == 0
    assert sum(r[2] for r in rows) + report.readings == report.observations == info.observations - report.noise
    tiers = dict(memory.store.reader().execute("SELECT tier, COUNT(*) FROM observations GROUP BY tier").fetchall())
    assert tiers["long_term"] == report.observations
    # SUMMARIZES: every consolidated observation points at a gist covering its time
    bad = memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations o JOIN gists g ON g.id = o.gist_id"
        " WHERE o.stamp < g.time_start OR o.stamp > g.time_end").fetchone()[0]
    assert bad == 0
    first = memory.store.get_gists([rows[0][0]])[0]
    assert first.layers == ("detections", "objects3d", "scene")
    assert "battery" not in first.text and first.metadata["body"]["battery"].endswith("%")
    assert first.metadata["summary"] == "fallback" and first.metadata["place"] == "kitchen"
    assert " | " not in first.text and "×" in first.text
    # the gists are searchable by meaning
    labels, sims = memory.store.vectors["gists"].search(memory.embed_query(first.text), 3)
    assert int(labels[0]) == rows[0][0]


def test_only_old_observations_are_consolidated_and_runs_are_incremental(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    first_patrol = patrol_into(memory, clock, 3000)
    age_past_window(memory, clock)
    cutoff = clock.now - memory.config.consolidation_window
    second_patrol = patrol_into(memory, clock, 3000, seed=5)  # recent: inside the window
    report = memory.consolidate_time_window()
    assert report.gists == first_patrol.visits
    recent = memory.store.reader().execute(
        "SELECT COUNT(*), SUM(tier = 'short_term') FROM observations WHERE stamp >= ?", (cutoff,)).fetchone()
    assert recent[0] == recent[1] == second_patrol.observations
    before = gist_rows(memory)

    again = memory.consolidate_time_window()
    assert again.gists == 0 and again.candidates == 0, "nothing new: nothing read"

    age_past_window(memory, clock)
    later = memory.consolidate_time_window()
    assert later.gists == second_patrol.visits
    assert later.candidates == second_patrol.observations, "only the new observations were read"
    assert gist_rows(memory)[: len(before)] == before


def test_noise_is_processed_once_and_late_arrivals_are_not_forgotten(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    t0 = clock.now
    for i in range(60):  # one visit...
        memory.add("chair", x=1.0, y=1.0, timestamp=t0 + i, layer_name="detections")
    memory.add("a lone bird", x=40.0, y=40.0, timestamp=t0 + 500, layer_name="scene")  # ...and one stray point
    memory.flush()
    age_past_window(memory, clock)
    report = memory.consolidate_time_window()
    assert (report.gists, report.noise) == (1, 1)
    assert memory.consolidate_time_window().candidates == 0  # the stray point is not read again
    stray = memory.store.query_observations("t.text = 'a lone bird'")[0]
    assert stray.tier == "short_term"  # noise stays hot and searchable

    for i in range(30):  # a late arrival: old stamps, written after the run
        memory.add("table", x=20.0, y=20.0, timestamp=t0 + 100 + i, layer_name="detections")
    memory.flush()
    late = memory.consolidate_time_window()
    assert (late.gists, late.candidates) == (1, 30)


def test_per_layer_gists_hold_one_layer_each(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, consolidation_per_layer=True)
    patrol_into(memory, clock, 2000)
    age_past_window(memory, clock)
    report = memory.consolidate_time_window()
    layers = [json.loads(r[5]) for r in gist_rows(memory)]
    assert layers and all(len(l) == 1 for l in layers)
    # battery clusters hold body readings only: promoted without a gist
    assert {l[0] for l in layers} == {"detections", "objects3d", "scene"}
    assert report.body_only > 0 and report.readings > 0
    battery = memory.store.reader().execute(
        "SELECT COUNT(*), SUM(tier = 'long_term'), SUM(gist_id IS NULL) FROM observations WHERE layer = 'battery'"
    ).fetchone()
    assert battery[1] == report.readings and battery[2] == battery[0]


def test_consolidation_keeps_working_after_a_restart(tmp_path, clock):
    path = tmp_path / "m.db"
    memory = open_memory(path, clock)
    patrol_into(memory, clock, 2000)
    age_past_window(memory, clock)
    gists = memory.consolidate_time_window().gists
    memory.close()
    memory = open_memory(path, clock)
    assert memory.consolidate_time_window().candidates == 0  # the marks survived
    assert len(memory.store.vectors["gists"]) == gists
    vector = np.asarray(memory.store.vectors["gists"].search(memory.embed_query("kitchen red mug"), 1)[0])
    assert vector.size == 1
    memory.close()
