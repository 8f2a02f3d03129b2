"""Archival: age counts from promotion, raw text goes to the cold store, gists stay searchable."""

from __future__ import annotations

import gzip
import json
import sqlite3

from emem_ros.consolidation.coldstore import ColdStore
from test.support.patrol import age_past_window, open_memory


def _old_visits(memory, clock, texts=("red mug", "table"), days_ago: float = 3.0, n: int = 40) -> float:
    """Observations stamped days ago (a replayed bag, say), consolidated now."""
    t0 = clock.now - days_ago * 86400
    for i in range(n):
        memory.add(texts[i % len(texts)], x=1.0, y=1.0, timestamp=t0 + i, layer_name="detections",
                   metadata={"class_id": texts[i % len(texts)], "score": 0.9})
    memory.flush()
    age_past_window(memory, clock)
    report = memory.consolidate_time_window()
    assert report.observations == n
    return clock.now


def _tiers(memory) -> dict:
    return dict(memory.store.reader().execute("SELECT tier, COUNT(*) FROM observations GROUP BY tier").fetchall())


def test_age_counts_from_promotion_not_from_the_observation_time(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, archive_after_seconds=3600)
    promoted = _old_visits(memory, clock)  # three days old, promoted just now
    assert memory.archive().observations == 0
    clock.now = promoted + 3599
    assert memory.maintenance().archive.observations == 0
    assert _tiers(memory) == {"long_term": 40}
    clock.now = promoted + 3601
    report = memory.archive()
    assert (report.observations, report.texts_removed, report.cold_records) == (40, 2, 40)
    assert _tiers(memory) == {"archived": 40}


def test_archived_text_leaves_the_hot_tables_but_not_the_cold_store(tmp_path, clock):
    path = tmp_path / "m.db"
    memory = open_memory(path, clock, archive_after_seconds=0)
    _old_visits(memory, clock)
    gist = memory.store.get_gists([1])[0]
    memory.add("table", x=5.0, y=5.0, timestamp=clock.now, layer_name="detections")  # a hot reference
    memory.flush()
    clock.now += 1
    memory.archive()
    conn = memory.store.reader()
    skeleton = conn.execute(
        "SELECT tier, text_id, metadata, stamp, layer, x, gist_id FROM observations ORDER BY id LIMIT 1").fetchone()
    assert skeleton[:3] == ("archived", None, None) and skeleton[4:] == ("detections", 1.0, 1)
    texts = [r[0] for r in conn.execute("SELECT text FROM texts")]
    assert texts == ["table"]  # the mug text went; the table is still referenced by a hot observation
    assert conn.execute("SELECT COUNT(*) FROM texts_fts WHERE texts_fts MATCH 'mug'").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM places p JOIN texts t ON t.id = p.text_id"
                        " WHERE t.text = 'red mug'").fetchone()[0] == 0
    assert len(memory.store.vectors["texts"]) == 1
    labels, sims = memory.store.vectors["texts"].search(memory.embed_query("red mug"), 1)
    assert float(sims[0]) < 0.9  # the mug vector is gone

    # the gist is still found by meaning and by words
    labels, _ = memory.store.vectors["gists"].search(memory.embed_query(gist.text), 1)
    assert int(labels[0]) == 1
    assert conn.execute("SELECT COUNT(*) FROM gists_fts WHERE gists_fts MATCH 'mug'").fetchone()[0] == 1

    # the raw observations are in the cold store, readable with plain gzip
    cold = list(memory.read_archived())
    assert len(cold) == 40 and {r["text"] for r in cold} == {"red mug", "table"}
    assert cold[0]["metadata"] == {"class_id": "red mug", "score": 0.9} and cold[0]["gist_id"] == "gist-1"
    segment = next((tmp_path / "m.db.cold").glob("seg-*.jsonl.gz"))
    with gzip.open(segment, "rt") as handle:
        assert len(handle.read().splitlines()) == 40

    # the same string seen again later is a fresh, searchable text
    memory.add("red mug", x=1.0, y=1.0, timestamp=clock.now, layer_name="detections")
    memory.flush()
    labels, sims = memory.store.vectors["texts"].search(memory.embed_query("red mug"), 1)
    assert float(sims[0]) > 0.99
    memory.close()
    reopened = open_memory(path, clock)  # indexes agree with SQLite after the deletions
    assert reopened.store.open_report["texts"]["caught_up"] == 0
    assert len(reopened.store.vectors["texts"]) == 2
    assert sqlite3.connect(str(path)).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    reopened.close()


def test_drop_retention_keeps_no_cold_copy(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, archive_after_seconds=0, archive_retention="drop")
    _old_visits(memory, clock)
    clock.now += 1
    report = memory.archive()
    assert report.observations == 40 and report.cold_records == 0
    assert not (tmp_path / "m.db.cold").exists()
    assert _tiers(memory) == {"archived": 40}


def test_archival_extracts_entities_before_the_text_leaves(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, archive_after_seconds=0)
    _old_visits(memory, clock)
    clock.now += 1
    memory.archive()
    names = sorted(r[0] for r in memory.store.reader().execute("SELECT name FROM entities"))
    assert names == ["red mug", "table"]


def test_a_torn_cold_segment_loses_only_the_torn_batch(tmp_path):
    cold = ColdStore(tmp_path / "cold")
    cold.append([{"id": "obs-1", "text": "a"}, {"id": "obs-2", "text": "b"}])
    cold.append([{"id": "obs-3", "text": "c"}])
    segment = cold.segments()[0]
    data = segment.read_bytes()
    segment.write_bytes(data[:-7])  # a crash in the middle of the second batch
    assert [r["id"] for r in cold.iter_records()] == ["obs-1", "obs-2"]
    # a new process appends to a new segment, never behind a torn one
    ColdStore(tmp_path / "cold").append([{"id": "obs-3", "text": "c"}])
    assert [r["id"] for r in ColdStore(tmp_path / "cold").iter_records()] == ["obs-1", "obs-2", "obs-3"]
    # a batch written twice (crash between fsync and commit) reads once
    cold.append([{"id": "obs-2", "text": "b"}])
    assert json.dumps(sorted(r["id"] for r in cold.iter_records())) == '["obs-1", "obs-2", "obs-3"]'
