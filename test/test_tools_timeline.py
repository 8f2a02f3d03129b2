"""temporal_query, episode_summary, body_status and entity_query on the scene's known timeline."""

from __future__ import annotations

import pytest

from test.support.scene import OBJECTS, START, add_entity, add_gist, scene_memory

BODY_LAYERS = ("battery", "cpu_temp")
KITCHEN = {name for name, (room, _) in OBJECTS.items() if room == "kitchen"}
LIVING = {name for name, (room, _) in OBJECTS.items() if room == "living room"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    memory, clock, scene = scene_memory(tmp_path_factory.mktemp("timeline"))
    yield memory, clock, scene
    memory.close()


def _count(memory, text: str, after: float, before: float) -> int:
    return memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations o JOIN texts t ON t.id = o.text_id"
        " WHERE t.text = ? AND o.stamp BETWEEN ? AND ?", (text, after, before)).fetchone()[0]


def test_last_minutes_newest_first_with_window_counts(world):
    memory, clock, scene = world
    result = memory.tools.temporal_query(last_n_minutes=3)
    assert result.hits
    stamps = [h.stamp for h in result.hits]
    assert stamps == sorted(stamps, reverse=True)
    start = clock.now - 180
    for hit in result.hits:
        assert hit.stamp >= start and hit.layer not in BODY_LAYERS and "battery" not in hit.text
        assert hit.count == _count(memory, hit.text, start, clock.now)
        assert hit.text not in KITCHEN | LIVING
    assert len({h.text for h in result.hits}) == len(result.hits)


def test_window_oldest_first(world):
    memory, _, scene = world
    kitchen = scene.episodes["kitchen"]
    result = memory.tools.temporal_query(time_after=kitchen.start, time_before=kitchen.end, order="oldest",
                                         n_results=20)
    texts = {h.text for h in result.hits}
    assert KITCHEN <= texts and not texts & LIVING
    firsts = [h.first_stamp or h.stamp for h in result.hits]
    assert firsts == sorted(firsts)
    chair = next(h for h in result.hits if h.text == "red chair")
    assert chair.count == 300
    relative = memory.tools.temporal_query(time_after="-25m", time_before="-15m", n_results=50)
    assert {h.text for h in relative.hits} & LIVING


def test_window_with_place_and_layer(world):
    memory, _, scene = world
    result = memory.tools.temporal_query(time_after=scene.episodes["kitchen"].start, near_x=2.0, near_y=3.0,
                                         spatial_radius=0.5, layer="detections")
    assert [h.text for h in result.hits] == ["red chair"]


def test_a_window_flooded_by_one_text_still_shows_the_others(make_memory, clock):
    memory = make_memory()
    t = clock.now
    memory.add("door", x=0.0, y=0.0, timestamp=t, source_type="perception")
    for i in range(9000):
        memory.add("chair", x=1.0, y=0.0, timestamp=t + 1 + i, source_type="perception")
    clock.now = t + 9001
    result = memory.tools.temporal_query(time_after=t - 1, n_results=5)
    assert [h.text for h in result.hits] == ["chair", "door"]
    assert result.hits[0].count_is_lower_bound or result.hits[0].count == 9000
    assert result.hits[1].count == 1


def test_archived_windows_fall_back_to_summaries(make_memory, clock):
    memory = make_memory()
    t = clock.now
    ids = [memory.add("red chair", x=2.0, y=3.0, timestamp=t + i, source_type="perception") for i in range(50)]
    memory.add("green sofa", x=12.0, y=3.0, timestamp=t + 3600, source_type="perception")
    memory.flush()
    gist = add_gist(memory, "a red chair stood in the kitchen all morning", (2.0, 3.0, 0.0), 1.0, t, t + 49,
                    observation_ids=[int(i.split("-")[1]) for i in ids])
    with memory.store.write() as conn:  # what archival does: the raw rows lose their text
        conn.execute("UPDATE observations SET tier='archived', text_id=NULL WHERE gist_id=?", (gist,))
        memory.store.announce(reshaped=True)  # what archival says: per-text views rebuild
    clock.now = t + 4000
    window = memory.tools.temporal_query(time_after=t - 1, time_before=t + 100)
    assert [h.kind for h in window.hits] == ["gist"] and window.hits[0].id == f"gist-{gist}"
    found = memory.tools.semantic_search("red chair")
    assert [h.kind for h in found.hits if h.text == "red chair"] == []
    assert found.hits[0].id == f"gist-{gist}"


def test_episode_summary_by_id_name_and_recency(world):
    memory, _, scene = world
    kitchen = scene.episodes["kitchen"]
    result = memory.tools.episode_summary(episode_id=kitchen.id)
    report = result.episodes[0]
    assert report.id == kitchen.id and report.name == "kitchen patrol" and report.status == "completed"
    assert report.goal == "check the kitchen"
    expected = memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations WHERE episode_id = ? AND source_type != 'interoception'",
        (int(kitchen.id.split("-")[1]),)).fetchone()[0]
    assert report.observations == expected
    assert {t for t, _ in report.top_texts[:3]} == {"red chair", "blue table", "coffee mug"}
    named = memory.tools.episode_summary(task_name="office")
    assert [e.id for e in named.episodes] == [scene.episodes["office"].id]
    latest = memory.tools.episode_summary(last_n=2)
    assert [e.name for e in latest.episodes] == ["office patrol", "living room patrol"]
    assert "most seen" in str(latest)
    assert "no episode is named like 'garage'" in memory.episode_summary(task_name="garage")


def test_episode_summary_shows_nesting_outcome_and_gists(make_memory, clock):
    memory = make_memory()
    parent = memory.start_episode("fetch mug", goal="bring the mug to the desk")
    child = memory.start_episode("find mug", parent_episode_id=parent)
    memory.add("coffee mug", x=1.0, y=1.0, source_type="perception")
    clock.advance(30)
    memory.end_episode(consolidate=False, result="found it on the counter", success=True)
    memory.end_episode(consolidate=False, result="delivered", reflection="check the counter first",
                       success=True)
    add_gist(memory, "the mug was on the counter", (1.0, 1.0, 0.0), 0.5, clock.now - 30, clock.now,
             episode=int(child.split("-")[1]))
    text = memory.episode_summary(episode_id=parent)
    assert f"subtasks: {child} 'find mug'" in text and "succeeded" in text and "check the counter first" in text
    child_text = memory.episode_summary(episode_id=child)
    assert f"subtask of {parent}" in child_text and "the mug was on the counter" in child_text


def test_body_status_latest_reading_age_and_trend(world):
    memory, clock, scene = world
    result = memory.tools.body_status()
    by_layer = {r.layer: r for r in result.readings}
    assert set(by_layer) == set(BODY_LAYERS)
    battery = by_layer["battery"]
    last_stamp, last_pct = scene.battery[-1]
    assert battery.stamp == last_stamp and battery.text == f"battery {last_pct:.0f}%"
    first_stamp, first_pct = next((s, p) for s, p in scene.battery if s >= last_stamp - 600)
    shown = float(f"{last_pct:.0f}") - float(f"{first_pct:.0f}")  # the trend reads the numbers in the texts
    assert battery.trend == f"{shown:+.3g}% over {(last_stamp - first_stamp) / 60:.0f} min"
    assert by_layer["cpu_temp"].trend is None
    only = memory.tools.body_status(layers=["battery"])
    assert [r.layer for r in only.readings] == ["battery"]
    text = memory.body_status(["battery", "wheels"])
    assert "no body readings in 'wheels'" in text and "battery" in text


def test_body_status_when_the_battery_rises(make_memory, clock):
    memory = make_memory()
    t = clock.now
    for i, pct in enumerate((40, 45, 52)):
        memory.add_body_state(f"battery {pct}%", "battery", timestamp=t + 120 * i, value=pct / 100)
    clock.now = t + 300
    reading = memory.tools.body_status().readings[0]
    assert reading.trend == "+12% over 4 min"
    assert "battery 52% (+12% over 4 min)" in str(memory.tools.body_status())
    assert memory.body_status() .startswith("Body status:")
    assert "No body readings" in make_memory("empty.db").body_status()


def test_entity_query(world):
    memory, _, scene = world
    kitchen, office = scene.episodes["kitchen"], scene.episodes["office"]
    add_entity(memory, "red chair", "furniture", OBJECTS["red chair"][1], 300, kitchen.start, kitchen.end)
    add_entity(memory, "green sofa", "furniture", OBJECTS["green sofa"][1], 300, kitchen.end, office.start)
    add_entity(memory, "printer", "appliance", OBJECTS["printer"][1], 185, office.start, office.end)
    assert [h.text for h in memory.tools.entity_query(name="CHAIR").hits] == ["red chair"]
    furniture = memory.tools.entity_query(entity_type="furniture")
    assert {h.text for h in furniture.hits} == {"red chair", "green sofa"}
    near = memory.tools.entity_query(near_x=12.0, near_y=3.0)
    assert [h.text for h in near.hits] == ["green sofa"] and near.hits[0].distance < 0.1
    recent = memory.tools.entity_query(last_seen_after=office.start + 1)
    assert [h.text for h in recent.hits] == ["printer"]
    by_meaning = memory.tools.entity_query(name="green sofas")
    assert by_meaning.hits and by_meaning.hits[0].text == "green sofa"
    text = str(memory.tools.entity_query(name="printer"))
    assert "[entity: appliance]" in text and "seen 185×" in text
    assert "No entities" in memory.entity_query(name="unicorn")


def test_start_of_day_has_nothing_recent(make_memory, clock):
    memory = make_memory()
    assert str(memory.tools.temporal_query(last_n_minutes=5)).startswith("Nothing observed")
    memory.add("a chair", x=0.0, y=0.0, timestamp=START)
    clock.now = START + 10
    assert "a chair" in memory.temporal_query(last_n_minutes=5)
