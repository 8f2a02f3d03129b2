"""semantic_search and search_gists on a scene with known ground truth."""

from __future__ import annotations

import math

import pytest

from emem_ros.tools.results import SearchResult
from test.support.scene import OBJECTS, START, add_gist, scene_memory

BODY_LAYERS = ("battery", "cpu_temp")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    memory, clock, scene = scene_memory(tmp_path_factory.mktemp("search"))
    yield memory, clock, scene
    memory.close()


def _texts(result: SearchResult) -> list[str]:
    return [h.text for h in result.hits]


def test_keyword_query_finds_the_sentence_holding_both_words(world):
    memory, _, _ = world
    result = memory.tools.semantic_search("chair kitchen")
    assert result.hits[0].text == "the red chair is in the kitchen"
    assert "the red chair is in the kitchen" in memory.semantic_search("kitchen chair", n_results=3)


def test_repeated_sightings_collapse_into_one_hit_with_the_true_count(world):
    memory, _, scene = world
    result = memory.tools.semantic_search("red chair", n_results=10)
    texts = _texts(result)
    assert len(texts) == len(set(texts)), texts
    chair = next(h for h in result.hits if h.text == "red chair")
    assert chair.count == scene.detections["red chair"] == 300
    assert not chair.count_is_lower_bound
    assert chair.kind == "observation" and chair.id.startswith("obs-") and chair.layer == "detections"
    assert chair.episode_id == scene.episodes["kitchen"].id
    assert math.dist(chair.position[:2], OBJECTS["red chair"][1][:2]) < 0.3
    assert scene.episodes["kitchen"].start < chair.first_stamp < chair.stamp <= scene.episodes["kitchen"].end
    assert "×300" in str(result)


def test_scores_are_ordered_and_normalised(world):
    memory, _, _ = world
    hits = memory.tools.semantic_search("coffee mug").hits
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 < s <= 1.0 for s in scores)
    assert hits[0].text == "coffee mug"


def test_layer_filter_and_helpful_notes(world):
    memory, _, _ = world
    scene_only = memory.tools.semantic_search("red chair", layer="scene")
    assert scene_only.hits and all(h.layer == "scene" for h in scene_only.hits)
    unknown = memory.tools.semantic_search("red chair", layer="vison")
    assert not unknown.hits and "no layer 'vison'" in str(unknown) and "detections" in str(unknown)
    body = memory.tools.semantic_search("battery", layer="battery")
    assert not body.hits and "body_status" in str(body)


def test_time_filter_counts_only_the_window(world):
    memory, _, scene = world
    cut = scene.episodes["kitchen"].start + 301.0
    expected = memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations o JOIN texts t ON t.id = o.text_id"
        " WHERE t.text = 'red chair' AND o.stamp >= ?", (cut,)).fetchone()[0]
    assert 0 < expected < 300
    chair = next(h for h in memory.tools.semantic_search("red chair", time_after=cut).hits if h.text == "red chair")
    assert chair.count == expected and chair.first_stamp >= cut
    later = memory.tools.semantic_search("red chair", time_after=scene.episodes["office"].start)
    assert "red chair" not in _texts(later) and all(h.stamp >= scene.episodes["office"].start for h in later.hits)
    relative = memory.tools.semantic_search("red chair", time_after="-5m")
    assert "red chair" not in _texts(relative)


def test_place_filter(world):
    memory, _, _ = world
    near_office = memory.tools.semantic_search("chair", near_x=3.0, near_y=13.0, spatial_radius=2.0)
    assert _texts(near_office)[0] == "office chair"
    assert "red chair" not in _texts(near_office)
    for hit in near_office.hits:
        assert math.dist(hit.position[:2], (3.0, 13.0)) <= 2.5


def test_episode_filter(world):
    memory, _, scene = world
    office = scene.episodes["office"].id
    result = memory.tools.semantic_search("extinguisher", episode_id=office)
    assert result.hits[0].text == "fire extinguisher" and result.hits[0].episode_id == office
    assert all(h.episode_id == office for h in memory.tools.semantic_search("chair", episode_id=office).hits)
    assert not memory.tools.semantic_search("fire extinguisher", episode_id=scene.episodes["kitchen"].id).hits


def test_body_readings_never_appear_in_semantic_search(world):
    memory, _, _ = world
    for query in ("battery", "battery 50%", "cpu temperature 61 C", "battery low"):
        result = memory.tools.semantic_search(query, n_results=50)
        assert all(h.layer not in BODY_LAYERS for h in result.hits)
        assert not any("battery" in h.text or "cpu temperature" in h.text for h in result.hits)


def test_nonsense_query_stays_below_the_similarity_floor(world):
    memory, _, _ = world
    result = memory.tools.semantic_search("qqzx vvwk")
    assert not result.hits and str(result).startswith("Nothing remembered matches")


def test_filters_do_not_starve_when_matches_rank_far_down(make_memory, clock):
    """The only matching text sits behind thousands of closer ones; every filter path still finds it."""
    memory = make_memory()
    t = clock.now
    for i in range(2500):
        memory.add(f"red chair variant {i}", x=float(i % 50), y=float(i // 50), timestamp=t + i,
                   layer_name="catalogue", source_type="perception")
    for i in range(1100):
        memory.add(f"weather note {i} about wind and rain", timestamp=t + i, layer_name="notes")
    memory.add("a red chair was moved", timestamp=t + 5000, layer_name="notes")
    episode = memory.start_episode("rare")
    memory.add("the red chair looked broken", x=200.0, y=200.0, timestamp=t + 6000, layer_name="catalogue",
               source_type="perception")
    memory.end_episode(consolidate=False)
    clock.now = t + 7000
    # A layer too big to list exactly (hnswlib, growing k).
    assert memory.tools.semantic_search("red chair", layer="notes").hits[0].text == "a red chair was moved"
    # An episode (listed exactly).
    assert memory.tools.semantic_search("red chair", episode_id=episode).hits[0].text == \
        "the red chair looked broken"
    # A small area far from everything else.
    near = memory.tools.semantic_search("red chair", near_x=200.0, near_y=200.0, spatial_radius=1.0)
    assert [h.text for h in near.hits] == ["the red chair looked broken"]
    # A short time window.
    window = memory.tools.semantic_search("red chair", time_after=t + 5999, time_before=t + 6001)
    assert [h.text for h in window.hits] == ["the red chair looked broken"]
    # A long window whose only perception sits near its start.
    late = memory.tools.semantic_search("red chair", time_after=t + 4000)
    assert {h.text for h in late.hits} == {"a red chair was moved", "the red chair looked broken"}


def test_without_recency_weight_age_does_not_matter(make_memory, clock):
    t = clock.now
    memory = make_memory(recency_weight=0.0)
    memory.add("blue mug", x=0.0, y=0.0, timestamp=t)
    memory.add("green mug", x=1.0, y=0.0, timestamp=t + 3600)
    clock.now = t + 3600
    hits = memory.tools.semantic_search("mug").hits
    assert {h.text for h in hits} == {"blue mug", "green mug"}
    assert hits[1].score > 0.9 * hits[0].score


def test_recency_weight_orders_by_age(make_memory, clock):
    t = clock.now
    memory = make_memory(recency_weight=1.0, recency_halflife=600.0)
    memory.add("blue mug", x=0.0, y=0.0, timestamp=t)
    memory.add("green mug", x=1.0, y=0.0, timestamp=t + 3600)
    clock.now = t + 3600
    hits = memory.tools.semantic_search("mug").hits
    assert [h.text for h in hits] == ["green mug", "blue mug"]
    assert hits[1].score < 0.1 * hits[0].score


def test_search_gists_finds_a_summary_among_thousands_of_similar_observations(make_memory, clock):
    memory = make_memory()
    t = clock.now
    for i in range(2000):
        memory.add(f"the kitchen counter is clean, check {i}", x=3.0, y=3.0, timestamp=t + i,
                   layer_name="scene", source_type="perception")
    for k in range(30):
        add_gist(memory, f"the hallway was empty during round {k}", (20.0, 0.0, 0.0), 2.0, t + k, t + k + 10)
    target = add_gist(memory, "a red chair stood next to the blue kitchen table", (2.5, 3.2, 0.0), 1.5,
                      t + 100, t + 400, episode=None)
    clock.now = t + 3000
    result = memory.tools.search_gists("red chair next to the kitchen table")
    assert result.hits[0].id == f"gist-{target}" and result.hits[0].kind == "gist"
    assert "[summary, detections]" in str(result)
    # semantic_search includes gists too.
    assert f"gist-{target}" in [h.id for h in memory.tools.semantic_search("red chair kitchen table").hits]
    # Time filters compare the window with the gist's time span.
    assert not memory.tools.search_gists("red chair", time_after=t + 500).hits
    assert memory.tools.search_gists("red chair", time_after=t + 300, time_before=t + 350).hits[0].id \
        == f"gist-{target}"


def test_search_gists_without_gists_says_so(world):
    memory, _, _ = world
    text = memory.search_gists("anything")
    assert "no summaries exist yet" in text


def test_body_only_gists_stay_out_of_perception(make_memory, clock):
    memory = make_memory()
    memory.add_body_state("battery 50%", "battery", value=0.5)
    memory.add("a chair", x=0.0, y=0.0)
    add_gist(memory, "battery drained from 90% to 50%", None, 0.0, START, START + 10, layers=("battery",))
    hits = memory.tools.semantic_search("battery drained", n_results=20).hits
    assert all("battery" not in h.text for h in hits)


def test_keyword_query_of_two_common_words_finds_the_text_holding_both(make_memory, clock):
    """Both words in far more texts than DF_CEILING: the AND pass must still run and rank that text first."""
    from emem_ros.tools.hybrid import DF_CEILING, KeywordIndex

    memory = make_memory()
    t = clock.now
    per_word = DF_CEILING + 500
    for i in range(per_word):
        memory.add(f"a grey chair by the wall, frame {i}", x=float(i % 30), y=0.0, timestamp=t + i,
                   layer_name="scene", source_type="perception")
        memory.add(f"the kitchen counter with a plate, frame {i}", x=float(i % 30), y=5.0, timestamp=t + i,
                   layer_name="scene", source_type="perception")
    memory.add("the red chair is in the kitchen", x=3.0, y=3.0, timestamp=t + 2 * per_word, layer_name="scene",
               source_type="perception")
    memory.flush()
    clock.now = t + 3 * per_word
    conn = memory.store.reader()
    target = conn.execute("SELECT id FROM texts WHERE text = 'the red chair is in the kitchen'").fetchone()[0]
    index = KeywordIndex("texts_fts")
    assert not index.plan(conn, "chair kitchen").every_by_bm25  # too common to rank by BM25: newest first
    for query in ("chair kitchen", "kitchen chair", "Chairs in the kitchen?"):
        assert index.search(conn, query, 10)[0] == target, query
        texts = [h.text for h in memory.tools.semantic_search(query, n_results=5).hits]
        assert "the red chair is in the kitchen" in texts[:2], (query, texts)
