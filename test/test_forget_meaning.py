"""Forget by meaning reaches what has no vector in the index: archived records (cold store) and dead letters.

The cold store keeps archived texts but no vectors; ``forgetting/meaning.py``
embeds them at selection time in bounded batches. An archived canary is
found by ``similar_to`` and erased from every file, with the episode text
quoting it; other archived records stay.
"""

from __future__ import annotations

import pytest

from emem_ros.embeddings import HashingEmbeddingProvider
from emem_ros.forgetting import make_selector
from emem_ros.forgetting.meaning import MeaningFilter, cold_similar
from emem_ros.forgetting.select import record_selected
from emem_ros.ingest.dead_letter import write_dead_letters
from emem_ros.storage.store import NewObservation
from test.support.forget_scan import holders

CANARY = "a man in a red jacket qzxmeaning42 waits by the front door"
UNIQUE = b"qzxmeaning42"
QUERY = "man in a red jacket waiting at the front door"
OTHERS = ("a kitchen with a table", "a blue chair by the window", "a red mug on the counter")


class CountingProvider(HashingEmbeddingProvider):
    """The hashing embedder, counting how many texts each call embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def embed(self, texts):
        self.calls.append(len(texts))
        return super().embed(texts)


def _archived_memory(make_memory, clock, provider):
    memory = make_memory(provider=provider, consolidation_window=60.0, consolidation_min_samples=2,
                         archive_after_seconds=60.0)
    t0 = clock.now - 7200
    for i in range(40):
        memory.add(CANARY if i == 5 else OTHERS[i % 3], x=1.0 + (i % 3), y=1.0, timestamp=t0 + i, layer_name="scene")
    memory.start_episode("watch the door")
    memory.end_episode(result=f"saw {CANARY}", success=True)
    memory.flush()
    clock.advance(120)
    memory.consolidate_time_window()
    clock.advance(120)
    assert memory.archive().observations >= 40
    return memory


def test_an_archived_canary_is_found_by_meaning_and_erased_from_every_file(make_memory, clock, tmp_path):
    provider = CountingProvider()
    memory = _archived_memory(make_memory, clock, provider)
    db = tmp_path / "memory.db"
    write_dead_letters(memory.dead_letter_path, [
        (NewObservation(id=999_999, text=CANARY, stamp=clock.now, layer="scene", source_type="camera",
                        position=None, frame_id="map"), "set aside"),
        (NewObservation(id=999_998, text=OTHERS[0], stamp=clock.now, layer="scene", source_type="camera",
                        position=None, frame_id="map"), "set aside")])
    memory.save()
    assert any(".cold" in name for name in holders(db, [UNIQUE])), "the canary is archived"
    assert not memory.store.reader().execute("SELECT 1 FROM texts WHERE text = ?", (CANARY,)).fetchone()
    cold_before = memory._consolidation.cold.count()
    chair = memory.locate("blue chair")

    dry = memory.forget(similar_to=QUERY, min_similarity=0.6, dry_run=True)
    assert dry.archived == 1 and dry.observations == 1 and dry.dead_letters == 1, dry
    provider.calls.clear()
    report = memory.forget(similar_to=QUERY, min_similarity=0.6, reason="asked")
    assert report.observations == 1 and report.cold_records == 1 and report.dead_letters == 1
    assert report.episodes_scrubbed == 1 and report.episodes_resummarised == 1  # its result quoted the archived text
    assert holders(db, [UNIQUE, CANARY.encode()]) == {}
    assert memory._consolidation.cold.count() == cold_before - 1  # the other archived records stay
    assert memory.locate("blue chair") == chair
    assert "qzx" not in memory.episode_summary() and "[forgotten]" in memory.episode_summary()


def test_by_meaning_in_the_cold_store_embeds_each_distinct_text_once_in_bounded_batches(make_memory, clock):
    provider = CountingProvider()
    memory = _archived_memory(make_memory, clock, provider)
    cold = memory._consolidation.cold
    provider.calls.clear()
    selector = make_selector(similar_to=QUERY, min_similarity=0.6)
    found = cold_similar(memory.engine, cold, selector, record_selected, batch=2)
    assert len(found) == 1
    embedded = sum(provider.calls) - 1  # the query itself is one call of one text
    assert embedded == len(set(OTHERS)) + 1 and max(provider.calls) <= 2  # 4 distinct texts of 40 records
    only_other_layer = make_selector(similar_to=QUERY, min_similarity=0.6, layer="detections")
    provider.calls.clear()
    assert cold_similar(memory.engine, cold, only_other_layer, record_selected) == set()
    assert sum(provider.calls) <= 1  # the other criteria are checked first: nothing was embedded but the query


@pytest.mark.parametrize("threshold, expect", [(0.6, {CANARY}), (0.999, set())])
def test_the_meaning_filter_keeps_texts_at_or_above_the_similarity(make_memory, threshold, expect):
    memory = make_memory()
    meaning = MeaningFilter(memory.engine, make_selector(similar_to=QUERY, min_similarity=threshold), batch=1)
    assert meaning.similar([CANARY, *OTHERS, CANARY]) == expect
    assert meaning.embedded == 1 + len(OTHERS)
