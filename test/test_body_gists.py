"""Body readings never leak into perception answers through gists, and are not lost either.

A patrol interleaves battery and cpu-temperature readings with detections
and scene captions; consolidation (time window and episodes) clusters them
together, and archival then moves every raw text out, so gists are what the
perception tools answer from. No perception tool may mention a body layer or
reading; body_status and the cold store still have every reading.
"""

from __future__ import annotations

import re

import pytest

from test.support.patrol import (
    age_past_window,
    gist_rows,
    memory_adder,
    multi_room_patrol,
    open_memory,
)

BODY = {"battery", "cpu_temp"}
READING = re.compile(r"battery|cpu_temp|\d+(\.\d+)?\s*(%|°C)")
"""Anything that would betray a body reading in an answer (perception texts hold no numbers or %)."""
QUERIES = ("battery temperature", "battery")


def _feed(memory, clock, n: int, **kwargs):
    """A patrol whose every battery reading comes with a cpu temperature reading."""
    add = memory_adder(memory)
    temps = iter(range(10_000))

    def add_body(text, x, y, z, stamp, layer, source, conf, meta, value=None):
        add(text, x, y, z, stamp, layer, source, conf, meta, value)
        celsius = 40.0 + next(temps) % 9
        memory.add_body_state(f"temperature {celsius:.1f} °C", "cpu_temp", x=x, y=y, timestamp=stamp + 0.1,
                              value=celsius)

    info = multi_room_patrol(add, n, start=clock.now, add_body=add_body, **kwargs)
    memory.flush()
    clock.now = info.end
    return info


def _body_rows(memory):
    return memory.store.reader().execute(
        "SELECT id, layer, tier, gist_id, value FROM observations WHERE source_type = 'interoception'"
        " ORDER BY stamp").fetchall()


def _clean(hits) -> None:
    for hit in hits:
        assert hit.layer not in BODY, hit
        assert not set(hit.layers) & BODY, hit
        assert not READING.search(hit.text), hit


def _perception_answers(memory, center):
    """Every perception tool, typed; (result, hits) pairs."""
    tools = memory.tools
    x, y = center
    everything = tools.temporal_query(time_after=0, n_results=100)
    found = tools.semantic_search("kitchen red mug", n_results=30)
    battery = tools.semantic_search("battery", n_results=30)
    gists = tools.search_gists("kitchen", n_results=50)
    battery_gists = tools.search_gists("battery temperature", n_results=50)
    near = tools.spatial_query(x, y, radius=6.0, n_results=50)
    recall = tools.recall("kitchen", n_results=30)
    context = tools.get_current_context(radius=6.0, include_recent_minutes=600)
    located = tools.locate("red mug")
    return [
        (everything, everything.hits), (found, found.hits), (battery, battery.hits), (gists, gists.hits),
        (battery_gists, battery_gists.hits), (near, near.hits),
        (recall, recall.matches + recall.nearby + recall.gists + recall.entities),
        (context, context.nearby + context.entities + context.gists + context.recent),
        (located, located.evidence),
    ]


def _text_without_body_section(result) -> str:
    """get_current_context ends with its own body_status section by design; everything else must be clean."""
    return str(result).split("\nBody status:")[0]


def _assert_no_leak(memory, center) -> int:
    gist_hits = 0
    for result, hits in _perception_answers(memory, center):
        _clean(hits)
        gist_hits += sum(1 for h in hits if h.kind == "gist")
        text = _text_without_body_section(result)
        for query in QUERIES:  # answers may echo the question ('"battery"'); nothing else may name the body
            text = text.replace(query, "")
        assert not READING.search(text), text
    return gist_hits


@pytest.fixture
def patrolled(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, archive_after_seconds=60.0)
    info = _feed(memory, clock, 2500)
    age_past_window(memory, clock)
    report = memory.consolidate_time_window()
    memory.extract_entities(final=True)
    yield memory, info, report
    memory.close()


def test_gists_are_made_of_perception_only(patrolled):
    memory, info, report = patrolled
    rows = gist_rows(memory)
    assert report.gists == len(rows) == info.visits
    for gist in memory.store.get_gists([r[0] for r in rows]):
        assert gist.layers and not set(gist.layers) & BODY
        assert not READING.search(gist.text), gist.text
    # the body readings of each visit are kept, compactly, where no perception tool looks
    digests = [g.metadata["body"] for g in memory.store.get_gists([r[0] for r in rows])]
    assert all(set(d) == BODY for d in digests)
    assert all(re.fullmatch(r"\d+%(→\d+%)?( \(range .*\))?", d["battery"]) for d in digests), digests[:3]
    assert all(re.match(r"\d+ °C", d["cpu_temp"]) for d in digests)
    # source_count is what the text summarises: perception rows only
    perceived = memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations WHERE gist_id IS NOT NULL AND source_type != 'interoception'"
    ).fetchone()[0]
    assert sum(r[2] for r in rows) == perceived == report.observations - report.readings


def test_readings_are_promoted_and_linked_with_their_visit(patrolled):
    memory, info, report = patrolled
    body = _body_rows(memory)
    assert len(body) == 2 * info.layers["battery"]
    linked = [r for r in body if r[3] is not None]
    assert len(linked) == report.readings > 0.9 * len(body)
    assert all(r[2] == "long_term" for r in linked)
    bad = memory.store.reader().execute(  # a reading links to the gist of the visit it was taken in
        "SELECT COUNT(*) FROM observations o JOIN gists g ON g.id = o.gist_id"
        " WHERE o.source_type = 'interoception' AND (o.stamp < g.time_start OR o.stamp > g.time_end)").fetchone()[0]
    assert bad == 0


def test_no_perception_tool_mentions_a_body_reading_before_or_after_archival(patrolled, clock):
    memory, info, report = patrolled
    kitchen = (2.5, 2.5)
    _assert_no_leak(memory, kitchen)
    clock.now += 120
    archived = memory.archive()
    assert archived.observations == memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations WHERE tier = 'archived'").fetchone()[0] > 0
    assert _assert_no_leak(memory, kitchen) > 0, "after archival the answers come from gists"


def test_body_readings_are_not_lost_by_archival(patrolled, clock):
    memory, info, report = patrolled
    before = {r[0]: r[4] for r in _body_rows(memory) if r[1] == "battery"}
    latest = memory.tools.body_status(["battery"]).readings[0]
    clock.now += 120
    memory.archive()
    cold = {int(rec["id"].split("-")[1]): rec for rec in memory.read_archived()}
    promoted = [i for i, tier in ((r[0], r[2]) for r in _body_rows(memory)) if tier == "archived"]
    assert promoted and all(i in cold and cold[i]["text"] for i in promoted)
    assert all(cold[i]["source_type"] == "interoception" for i in promoted)
    # body_status still answers from the archived rows' values, in the units it always showed
    now = memory.tools.body_status(["battery"]).readings[0]
    assert now.stamp == latest.stamp and now.value == latest.value
    lowest = min(before.values()) * 100
    crossing = memory.tools.body_status(["battery"], below=lowest + 0.1).crossings[0]  # readings step 0.2 %
    assert crossing.after_level == pytest.approx(lowest)


def test_a_cluster_of_body_readings_alone_makes_no_gist(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    t0 = clock.now
    for i in range(60):  # docked: only the battery reports, for ten minutes
        memory.add_body_state(f"battery {20 + i // 3}% (charging)", "battery", x=0.5, y=0.5, timestamp=t0 + 10 * i,
                              value=(20 + i // 3) / 100)
    for i in range(40):  # then a visit with detections and readings
        memory.add("chair", x=9.0, y=9.0, timestamp=t0 + 2000 + i, layer_name="detections")
        if i % 10 == 0:
            memory.add_body_state(f"battery {40 - i // 10}%", "battery", x=9.0, y=9.0, timestamp=t0 + 2000 + i,
                                  value=(40 - i // 10) / 100)
    memory.flush()
    age_past_window(memory, clock)
    report = memory.consolidate_time_window()
    assert (report.gists, report.body_only) == (1, 1)
    (gist,) = memory.store.get_gists([gist_rows(memory)[0][0]])
    assert gist.layers == ("detections",) and gist.source_count == 40
    assert gist.metadata["body"] == {"battery": "40%→37%"}
    docked = memory.store.reader().execute(
        "SELECT COUNT(*), SUM(tier = 'long_term'), SUM(gist_id IS NULL) FROM observations"
        " WHERE layer = 'battery' AND stamp < ?", (t0 + 1000,)).fetchone()
    assert docked == (60, 60, 60)  # promoted without a gist: archival will take them in time
    assert memory.consolidate_time_window().candidates == 0
    answer = memory.tools.search_gists("battery charging", n_results=10)
    _clean(answer.hits)
    assert {h.id for h in answer.hits} <= {gist.id}
    memory.close()


def test_an_episode_keeps_its_body_line_in_its_summary_only(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    episode = memory.start_episode("kitchen patrol")
    t0 = clock.now
    for i in range(60):
        memory.add("red mug", x=1.0, y=1.0, timestamp=t0 + i, layer_name="detections",
                   metadata={"class_id": "red mug"})
        if i % 5 == 0:
            pct = 80 - i // 5
            memory.add_body_state(f"battery {pct}%", "battery", x=1.0, y=1.0, timestamp=t0 + i, value=pct / 100)
    clock.now = t0 + 120
    memory.end_episode(result="all clear")
    assert memory.wait_for_consolidation(10.0)
    number = int(episode.split("-")[1])
    summary = memory.store.get_episode(number).summary
    assert "body: battery 80%→69%" in summary and "result: all clear" in summary
    (gist,) = memory.store.get_gists([gist_rows(memory)[0][0]])
    assert gist.layers == ("detections",) and "battery" not in gist.text and gist.source_count == 60
    assert "battery 80%→69%" in str(memory.tools.episode_summary(episode_id=episode))
    _clean(memory.tools.semantic_search("battery", episode_id=episode).hits)
    unlinked = memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations WHERE episode_id = ? AND gist_id IS NULL", (number,)).fetchone()[0]
    assert unlinked == 0


def test_an_episode_of_body_readings_only_gets_no_gist_but_a_body_line(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    episode = memory.start_episode("charge")
    for i in range(30):
        memory.add_body_state(f"battery {50 + i}%", "battery", timestamp=clock.now + 10 * i, value=(50 + i) / 100)
    clock.now += 400
    memory.end_episode()
    assert memory.wait_for_consolidation(10.0)
    assert gist_rows(memory) == []
    summary = memory.store.get_episode(int(episode.split("-")[1])).summary
    assert "no observations" in summary and "body: battery 50%→79%" in summary
    tiers = memory.store.reader().execute("SELECT DISTINCT tier FROM observations").fetchall()
    assert tiers == [("long_term",)]


def test_the_body_digest_counts_mixed_diagnostics_instead_of_ranging_them():
    from emem_ros.consolidation.rows import ObsRow
    from emem_ros.consolidation.summaries import body_digest

    texts = ["OK motor_left: ok (temperature=44.0)", "OK lidar: ok (frequency=10.0)"] * 3
    texts.append("WARN motor_left: temperature high (temperature=68.0)")
    rows = [ObsRow(i, 100.0 + i, "diagnostics", "interoception", None, None, None, i, t, 1.0, None, 0.0, None)
            for i, t in enumerate(texts)]
    rows.append(ObsRow(99, 50.0, "battery", "interoception", None, None, None, 99, "battery 61% (11.7 V)", 1.0,
                       None, 0.61, None))
    assert body_digest(rows) == {
        "battery": "61%",
        "diagnostics": "OK motor_left: ok (temperature=44.0) ×3, OK lidar: ok (frequency=10.0) ×3, "
                       "WARN motor_left: temperature high (temperature=68.0)"}
