"""The experience ledger: content ids, immutability, corrections, retrieval."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from emem_ros.core.errors import InvalidInputError, UnknownNodeError
from emem_ros.storage.rebuild import rebuild_from_log

ROOT = Path(__file__).resolve().parents[1]


def fetch_mug(memory, **overrides):
    values = dict(goal="fetch the red mug from the kitchen", action="drove to kitchen, grasped mug",
                  result="door was closed, pushed it open", reflection="kitchen door is often closed",
                  success=True, tags=["fetch", "kitchen"], timestamp=1000.0)
    values.update(overrides)
    return memory.record_experience(**values)


def test_content_id_is_sha256_and_recording_twice_is_a_no_op(make_memory):
    memory = make_memory()
    first = fetch_mug(memory)
    assert len(first) == 64 and int(first, 16) >= 0
    assert fetch_mug(memory) == first
    assert memory.ledger.count() == 1
    assert fetch_mug(memory, success=False) != first


def test_content_ids_are_stable_across_processes(make_memory):
    memory = make_memory()
    here = fetch_mug(memory, tags=["kitchen", "fetch"])  # tag order does not matter
    code = (
        "from emem_ros.agent.content_ids import content_id\n"
        "print(content_id({'goal': 'fetch the red mug from the kitchen', 'action': 'drove to kitchen, grasped mug',"
        " 'result': 'door was closed, pushed it open', 'reflection': 'kitchen door is often closed',"
        " 'success': True, 'tags': ['fetch', 'kitchen'], 'metadata': {}, 'stamp': 1000.0,"
        " 'episode': None, 'position': None, 'supersedes': None}))"
    )
    there = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert there.stdout.strip() == here


def test_records_are_immutable_even_to_raw_sql(make_memory):
    memory = make_memory()
    record = fetch_mug(memory)
    memory.flush()  # a record is durable in the log at once; another connection sees it after a flush
    conn = sqlite3.connect(memory.config.db_path)
    with pytest.raises(sqlite3.DatabaseError, match="immutable"):
        conn.execute("UPDATE experiences SET result='it went fine' WHERE id=?", (record,))
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM experiences WHERE id=?", (record,))
    conn.close()
    assert memory.ledger.get(record).result == "door was closed, pushed it open"


def test_a_correction_supersedes_without_changing_the_original(make_memory):
    memory = make_memory()
    original = fetch_mug(memory)
    corrected = memory.ledger.correct(original, result="door was locked; asked a person", success=False)
    assert corrected != original
    assert memory.ledger.get(corrected).supersedes == original
    assert memory.ledger.get(original).success is True
    found = [e.id for e, _ in memory.ledger.find(tags=["kitchen"])]
    assert found == [corrected]
    everything = {e.id for e, _ in memory.ledger.find(tags=["kitchen"], include_superseded=True)}
    assert everything == {original, corrected}
    with pytest.raises(UnknownNodeError):
        memory.ledger.correct("0" * 64, result="x")


def test_find_by_filter(make_memory, clock):
    memory = make_memory()
    ep = memory.start_episode("morning chores")
    a = fetch_mug(memory, timestamp=clock.now - 3600, x=2.0, y=3.0)
    memory.end_episode(consolidate=False)
    b = memory.record_experience("charge battery", action="docked", result="charged to 100%", success=True,
                                 tags=["battery"], timestamp=clock.now - 60, x=-4.0, y=0.0)
    c = memory.record_experience("open the garage", action="pushed door", result="too heavy", success=False,
                                 tags=["door"], timestamp=clock.now - 30)
    ids = lambda **kw: {e.id for e, _ in memory.ledger.find(**kw)}  # noqa: E731
    assert ids(success=False) == {c}
    assert ids(success=True) == {a, b}
    assert ids(tags=["battery"]) == {b}
    assert ids(time_after="-10m") == {b, c}
    assert ids(episode_id=ep) == {a}
    assert ids(near_x=2.0, near_y=3.5, radius=1.0) == {a}
    with pytest.raises(InvalidInputError):
        memory.ledger.find(success="maybe")


def test_find_by_meaning(make_memory):
    memory = make_memory()
    mug = fetch_mug(memory)
    memory.record_experience("charge battery", action="docked at station", result="charged", success=True)
    memory.record_experience("water the plants", action="filled can", result="plants watered", success=True)
    memory.ledger.embed_pending()
    best, score = memory.ledger.find("kitchen door closed mug")[0]
    assert best.id == mug and score > 0
    assert [e.goal for e, _ in memory.ledger.find("battery charging station")][0] == "charge battery"


def test_bad_records_are_rejected(make_memory):
    memory = make_memory()
    with pytest.raises(InvalidInputError, match="goal"):
        memory.record_experience("")
    with pytest.raises(InvalidInputError, match="success"):
        memory.record_experience("x", success="yes")
    with pytest.raises(InvalidInputError, match="tag"):
        memory.record_experience("x", tags=[""])
    with pytest.raises(InvalidInputError, match="JSON"):
        memory.record_experience("x", metadata={"v": float("nan")})
    assert memory.ledger.count() == 0


def test_ledger_survives_rebuild_from_log(make_memory):
    memory = make_memory()
    ids = [fetch_mug(memory, timestamp=1000.0 + i, tags=[f"t{i % 3}"]) for i in range(30)]
    memory.ledger.embed_pending()
    before = [[e.id for e, _ in memory.ledger.find("kitchen door", n_results=5)],
              [e.id for e, _ in memory.ledger.find(tags=["t1"], n_results=50)]]
    path = memory.config.db_path
    memory.close()
    rebuild_from_log(path)
    reopened = make_memory(name=Path(path).name)
    assert [[e.id for e, _ in reopened.ledger.find("kitchen door", n_results=5)],
            [e.id for e, _ in reopened.ledger.find(tags=["t1"], n_results=50)]] == before
    assert {e.id for e, _ in reopened.ledger.find(n_results=100)} == set(ids)
