"""The ledger's log-first write path: same ids and rows as the plain path, durable at return."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

from emem_ros.agent.content_ids import canonical_content
from emem_ros.agent.content_ids import record_content as _record_content

ROOT = Path(__file__).resolve().parents[1]


def random_fields(rng: random.Random) -> dict:
    texts = ["", "fetch the red mug", 'quote " and \\ backslash', "tab\tnew\nline\x01", "ünïcödé ☕ 𝄞",
             "\u2028 separator", "x" * 500]
    return {
        "goal": rng.choice(texts[1:]), "action": rng.choice(texts), "result": rng.choice(texts),
        "reflection": rng.choice(texts), "success": rng.choice([None, True, False]),
        "tags": sorted({rng.choice(["kitchen", "dock", "ünï", 'q"t']) for _ in range(rng.randrange(4))}),
        "metadata": rng.choice([{}, {}, {"b": 1, "a": [0.5, None]}]),
        "stamp": rng.choice([0.0, -1.5, 1e22, 1e-7, 1_763_800_000.123456, rng.uniform(-1e9, 1e9)]),
        "episode": rng.choice([None, "ep-3"]),
        "position": rng.choice([None, None, [1.0, -2.5, 0.0]]),
        "supersedes": rng.choice([None, "a" * 64]),
    }


def test_the_fast_content_text_is_byte_identical_to_canonical_json():
    rng = random.Random(7)
    for _ in range(2000):
        fields = random_fields(rng)
        assert _record_content(fields) == canonical_content(fields)


def test_rows_made_from_the_content_hold_every_field(make_memory, clock):
    memory = make_memory()
    episode = memory.start_episode("chores")
    first = memory.record_experience("fetch the mug", action="drove", result="door closed", reflection="push it",
                                     success=False, tags=["Kitchen", "fetch"], metadata={"try": 2, "who": "ünï"},
                                     timestamp=1000.5, x=1.5, y=-2.0, z=0.25)
    second = memory.ledger.correct(first, success=True, timestamp=1000.5)
    memory.end_episode(consolidate=False)
    memory.flush()
    row = sqlite3.connect(memory.config.db_path).execute(
        "SELECT goal, action, result, reflection, success, tags, metadata, stamp, episode_id, x, y, z, supersedes"
        " FROM experiences WHERE id=?", (second,)).fetchone()
    assert row[:5] == ("fetch the mug", "drove", "door closed", "push it", 1)
    assert row[5] == '["fetch","kitchen"]' and row[6] == '{"try":2,"who":"ünï"}'
    assert row[7:] == (1000.5, int(episode.split("-")[1]), 1.5, -2.0, 0.25, first)
    bare = memory.record_experience("charge", timestamp=5.0)
    memory.flush()
    assert sqlite3.connect(memory.config.db_path).execute(
        "SELECT success, tags, metadata, episode_id, x FROM experiences WHERE id=?", (bare,)).fetchone() == \
        (None, "[]", None, None, None)


def test_keyword_index_holds_each_record_once(make_memory):
    memory = make_memory()
    first = memory.record_experience("open the zebra gate", action="pushed", timestamp=1.0)
    assert memory.record_experience("open the zebra gate", action="pushed", timestamp=1.0) == first
    memory.flush()
    conn = sqlite3.connect(memory.config.db_path)
    assert conn.execute("SELECT rowid FROM experiences_fts WHERE experiences_fts MATCH 'zebra'").fetchall() == [(1,)]
    assert conn.execute("SELECT COUNT(*) FROM experiences_fts_docsize").fetchone()[0] == 1


def test_a_keyword_index_left_empty_by_an_older_version_is_rebuilt(tmp_path, make_memory):
    memory = make_memory("old.db")
    memory.record_experience("calibrate the zebra arm", timestamp=1.0)
    memory.close()
    conn = sqlite3.connect(tmp_path / "old.db")
    conn.execute("INSERT INTO experiences_fts(experiences_fts) VALUES('delete-all')")
    conn.commit()
    conn.close()
    reopened = make_memory("old.db")
    found = reopened.ledger.find("zebra")
    assert [e.goal for e, _ in found] == ["calibrate the zebra arm"]


def test_a_search_by_meaning_skips_superseded_records(make_memory):
    memory = make_memory()
    old = memory.record_experience("water the plants", result="too much water", success=False, timestamp=1.0)
    new = memory.ledger.correct(old, result="half a can is enough", success=True)
    ids = [e.id for e, _ in memory.ledger.find("water the plants")]
    assert ids == [new]
    assert set(e.id for e, _ in memory.ledger.find("water the plants", include_superseded=True)) == {old, new}


SCRIPT = """
import os, sys
from emem_ros import Memory, MemoryConfig
from emem_ros.embeddings import HashingEmbeddingProvider
memory = Memory(config=MemoryConfig(db_path=sys.argv[1], flush_interval=0.0, index_save_interval=0.0),
                embedding_provider=HashingEmbeddingProvider())
ids = [memory.record_experience(f"deliver parcel {i}", action="drove", result="ok", success=True,
                                timestamp=100.0 + i) for i in range(700)]
print("\\n".join(ids), flush=True)
os._exit(0)  # killed: no close, no flush; 700 > one apply batch, so part is only in the log
"""


def test_records_are_durable_when_the_call_returns(tmp_path, make_memory):
    db = tmp_path / "killed.db"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(db)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    ids = done.stdout.split()
    assert len(ids) == 700
    memory = make_memory("killed.db")
    assert memory.store.redone > 0  # the tail SQLite never saw came back from the log
    assert memory.ledger.count() == 700
    assert memory.ledger.get(ids[-1]).goal == "deliver parcel 699"
    assert [e.goal for e, _ in memory.ledger.find("parcel 699", n_results=1)] == ["deliver parcel 699"]
