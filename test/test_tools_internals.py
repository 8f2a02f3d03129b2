"""The parts under the tools: the text catalog, keyword plans, fusion, clustering, rendering."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emem_ros.storage.store import NewObservation
from emem_ros.tools.clusters import components
from emem_ros.tools.hybrid import DF_BUDGET, MAX_FUSED, KeywordIndex, query_tokens, recency_factor, rrf
from emem_ros.tools.results import Hit, fmt_age, fmt_time


# ---------------------------------------------------------------------- catalog
def test_catalog_catches_up_after_new_writes(make_memory, clock):
    memory = make_memory()
    memory.add("chair", x=0.0, y=0.0, layer_name="detections")
    memory.add("battery 50%", layer_name="battery", source_type="interoception")
    memory.tools.warm()
    catalog = memory.tools.env.catalog
    chair = memory.store.reader().execute("SELECT id FROM texts WHERE text='chair'").fetchone()[0]
    assert catalog.stats(chair).count == 1 and catalog.body_layers == ["battery"]
    assert catalog.layers == ["detections"]
    episode = memory.start_episode("count chairs")
    for _ in range(4):
        memory.add("chair", x=0.0, y=0.0, layer_name="detections")
    memory.add("chair", layer_name="speech")
    memory.end_episode(consolidate=False)
    memory.tools.warm()
    number = int(episode.split("-")[1])
    assert catalog.stats(chair).count == 6
    assert catalog.stats(chair, layer="detections").count == 5
    assert catalog.stats(chair, layer="speech").count == 1
    assert catalog.stats(chair, episode=number).count == 5
    assert catalog.stats(chair, layer="speech", episode=number).count == 1
    assert catalog.stats(chair, layer="scene") is None
    assert "×6" in memory.semantic_search("chair")


def test_catalog_sees_rows_written_out_of_id_order(make_memory, clock):
    memory = make_memory()
    memory.add("table", x=1.0, y=1.0)
    memory.tools.warm()
    first, second = memory.store.allocate_observation_id(), memory.store.allocate_observation_id()

    def row(obs_id, text):
        return NewObservation(obs_id, text, clock.now, "detections", "perception", (2.0, 2.0, 0.0), "map")

    memory.store.write_observations([row(second, "lamp")], memory.engine.embed_texts)
    assert "lamp" in memory.semantic_search("lamp")
    memory.store.write_observations([row(first, "vase")], memory.engine.embed_texts)
    assert '"vase"' in memory.semantic_search("vase")


def test_catalog_rebuilds_after_invalidate(make_memory):
    memory = make_memory()
    for _ in range(3):
        memory.add("chair", x=0.0, y=0.0)
    assert "×3" in memory.semantic_search("chair")
    with memory.store.write() as conn:
        conn.execute("UPDATE observations SET tier='archived', text_id=NULL WHERE id IN (1, 2)")
        memory.store.announce(reshaped=True)  # what archival says: the per-text catalog rebuilds
    result = memory.tools.semantic_search("chair")
    assert result.hits[0].count == 1


def test_a_second_reader_thread_sees_the_same_answers(make_memory):
    import threading

    memory = make_memory()
    memory.add("chair", x=0.0, y=0.0)
    answers = []
    memory.semantic_search("chair")
    memory.add("chair", x=0.0, y=0.0)
    thread = threading.Thread(target=lambda: answers.append(memory.semantic_search("chair")))
    thread.start()
    thread.join()
    assert "×2" in answers[0] and "×2" in memory.semantic_search("chair")


# ---------------------------------------------------------------------- keywords and fusion
def test_query_tokens_drop_stop_words_but_never_everything():
    assert query_tokens("Where is the red chair?") == ["red", "chair"]
    assert query_tokens("the") == ["the"]
    assert query_tokens("mug mug MUG") == ["mug"]


def test_keyword_plan_keeps_rare_words_and_every_word_in_the_and_pass(make_memory):
    memory = make_memory()
    for i in range(DF_BUDGET + 50):
        memory.add(f"kitchen view {i}", layer_name="scene")
    memory.add("the red chair is in the kitchen", layer_name="scene")
    memory.flush()
    index = KeywordIndex("texts_fts")
    conn = memory.store.reader()
    plan = index.plan(conn, "chair kitchen")
    assert plan.any == '"chair"' and plan.every == '"chair" AND "kitchen"'
    ids = index.run(conn, plan, 5)
    text = conn.execute("SELECT text FROM texts WHERE id=?", (ids[0],)).fetchone()[0]
    assert text == "the red chair is in the kitchen"
    assert plan.every_by_bm25  # the words are in few enough texts to rank their AND matches by BM25
    cheap = index.plan(conn, "red chair")
    assert cheap.every == '"red" AND "chair"' and set(cheap.any.split(" OR ")) == {'"red"', '"chair"'}
    assert index.plan(conn, "kitchen").every is None  # one word: the OR pass says it all


def test_rrf_rewards_agreement_between_the_lists():
    fused = rrf([("a", 0.9), ("b", 0.8)], ["b", "c"])
    assert fused["b"].score > fused["a"].score > fused["c"].score
    assert fused["b"].similarity == 0.8 and fused["c"].similarity is None
    both_first = rrf([("x", 1.0)], ["x"])["x"].score
    assert both_first == pytest.approx(MAX_FUSED)


def test_recency_factor():
    assert recency_factor(0.0, 1000.0, 0.0, 100.0) == 1.0
    assert recency_factor(900.0, 1000.0, 1.0, 100.0) == pytest.approx(0.5)
    assert recency_factor(800.0, 1000.0, 0.5, 100.0) == pytest.approx(0.5 + 0.5 * 0.25)
    assert recency_factor(None, 1000.0, 1.0, 100.0) == 1.0


# ---------------------------------------------------------------------- clustering and rendering
def test_components_link_chains_and_keep_far_points_apart():
    xy = np.array([[0.0, 0.0], [0.8, 0.0], [1.6, 0.0], [10.0, 0.0], [10.5, 0.2], [30.0, 30.0]])
    labels = components(xy, 1.0)
    assert labels[0] == labels[1] == labels[2]
    assert labels[3] == labels[4] != labels[0]
    assert len(set(labels.tolist())) == 3
    assert components(np.empty((0, 2)), 1.0).size == 0
    rng = np.random.default_rng(3)
    many = np.concatenate([rng.normal((0, 0), 0.2, (300, 2)), rng.normal((8, 8), 0.2, (300, 2))])
    assert len(set(components(many, 1.0).tolist())) == 2


def test_time_and_hit_rendering():
    assert fmt_age(30) == "30s ago" and fmt_age(600) == "10m ago" and fmt_age(-120) == "in 2m"
    assert fmt_time(1_763_800_000.0, 1_763_800_060.0).endswith("(60s ago)")
    assert "2025-" in fmt_time(1_763_800_000.0, 1_763_800_000.0 + 86_400 * 3)
    hit = Hit("obs-7", "observation", 'a "quoted"\nmug', layer="detections", position=(1.0, 2.0, 0.0),
              stamp=1_763_800_000.0, count=3, first_stamp=1_763_799_000.0, score=0.5, episode_id="ep-1")
    line = hit.line(1_763_800_010.0)
    assert line.startswith('[detections] "a "quoted" mug" ×3 at (1.0, 2.0) last ')
    assert line.endswith("— obs-7, ep-1, match 0.50")


def test_hit_distance_and_gist_lines():
    gist = Hit("gist-2", "gist", "summary text", position=(1.0, 1.0, 0.0), stamp=100.0, first_stamp=40.0,
               count=12, radius=2.0, layers=("detections",))
    assert gist.line(200.0).startswith("[summary of 12 obs, detections] \"summary text\" around (1.0, 1.0) "
                                       "within 2.0 m from")
    entity = Hit("ent-1", "entity", "red chair", position=(2.0, 3.0, 0.0), stamp=100.0, count=4, radius=0.3,
                 entity_type="furniture", distance=math.sqrt(2))
    assert entity.line(160.0) == ('[entity: furniture] "red chair" at (2.0, 3.0) ±0.3 m 1.4 m away seen 4× '
                                  "last 00:01:40 (60s ago) — ent-1")
