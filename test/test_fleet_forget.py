"""Forget reaches the fleet: a canary forgotten on a robot is gone from every fleet table after its next sync.

A forget restarts the robot's operation log after a base copy of the cleaned
memory, so the sync falls back to that copy: it ships the copy's rows and
deletes, by key (ids, never content), the robot's rows the copy lacks, texts
no robot points at any more, and corrects the summaries. Checked with the
real PostgreSQL: no text, tsvector or jsonb column of any fleet table holds
the canary's words, no vector column its vector, the robot's rows equal its
file (counts and content hashes), another robot's rows are untouched.
"""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg")

from emem_ros import Memory
from emem_ros.embeddings import HashingEmbeddingProvider
from emem_ros.fleet import db
from emem_ros.fleet.reader import vector_literal
from emem_ros.fleet.schema import init_fleet
from emem_ros.fleet.sync import sync_memory
from test.support.fleet import (
    expected_summaries,
    first_difference,
    fleet_rows,
    fleet_summaries,
    robot_rows,
    same_summary,
    summary,
)
from test.test_forget_proof import (
    ARCHIVED_UNIQUE,
    CANARY,
    LEDGER_UNIQUE,
    UNIQUE,
    _config,
    _fill,
    canary_vector,
)

WORDS = [UNIQUE.decode(), ARCHIVED_UNIQUE.decode(), LEDGER_UNIQUE.decode(), "red jacket"]


def _columns(conn) -> list[tuple[str, str, str]]:
    """(table, column, type) of every text-like and vector column of the fleet's tables (partitions included)."""
    return [tuple(r) for r in conn.execute(
        "SELECT c.table_name, c.column_name, c.udt_name FROM information_schema.columns c "
        "JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
        "WHERE c.table_schema = 'fleet' AND t.table_type = 'BASE TABLE' "
        "AND c.udt_name IN ('text', 'tsvector', 'jsonb', 'vector') ORDER BY 1, 2")]


def _holders(url: str, vector) -> list[str]:
    """Where in the fleet store the canary's words or its vector are."""
    found = []
    literal = vector_literal(vector)
    with db.connect(url) as conn:
        for table, column, kind in _columns(conn):
            if kind == "vector":
                n = conn.execute(f'SELECT count(*) FROM fleet."{table}" WHERE "{column}" IS NOT NULL AND '
                                 f'("{column}" <=> %s::vector) < 1e-4', (literal,)).fetchone()[0]
                if n:
                    found.append(f"{table}.{column}: the canary vector")
                continue
            for word in WORDS:
                n = conn.execute(f'SELECT count(*) FROM fleet."{table}" WHERE "{column}"::text ILIKE %s',
                                 (f"%{word}%",)).fetchone()[0]
                if n:
                    found.append(f"{table}.{column}: {word!r} x{n}")
        conn.rollback()
    return found


def _assert_same(path, url: str, robot_id: str) -> None:
    """The robot's rows equal its file, the archived observations aside (the fleet keeps their text)."""
    robot = robot_rows(path, with_archived_text={})
    with db.connect(url) as conn:
        fleet = fleet_rows(conn, robot_id, archived_marker=True)
        have = fleet_summaries(conn, robot_id)
    want = expected_summaries(fleet)
    assert all(same_summary(have[t].get(k), want[t].get(k)) for t in have for k in set(have[t]) | set(want[t]))
    archived = {row[0] for row in fleet["observations"] if row[12] == "archived"}
    fleet["observations"] = [(r[0], None, *r[2:]) if r[0] in archived else r for r in fleet["observations"]]
    robot_texts = {row[0] for row in robot["texts"]}
    extra = [row for row in fleet["texts"] if row[0] not in robot_texts]
    archived_texts = {row[1] for row in fleet_rows_text(url, robot_id, archived)}
    assert all(row[1] in archived_texts for row in extra), extra  # only texts of archived rows stay extra
    fleet["texts"] = [row for row in fleet["texts"] if row[0] in robot_texts]
    assert summary(fleet) == summary(robot), first_difference(robot, fleet)


def fleet_rows_text(url: str, robot_id: str, ids: set[int]) -> list[tuple[int, str]]:
    with db.connect(url) as conn:
        rows = conn.execute("SELECT o.id, t.text FROM fleet.observations o JOIN fleet.texts t ON t.id = o.text_id "
                            "WHERE o.robot_id = %s AND o.id = ANY(%s)", (robot_id, sorted(ids))).fetchall()
        conn.rollback()
    return rows


@pytest.mark.parametrize("synced_before_forget", [True, False])
def test_a_forgotten_canary_leaves_every_fleet_table_at_the_next_sync(tmp_path, clock, fleet_url,
                                                                      synced_before_forget):
    provider = HashingEmbeddingProvider()
    vector = canary_vector(provider.dim)
    with db.connect(fleet_url) as conn:
        init_fleet(conn, dim=provider.dim)
    other_path = tmp_path / "other.db"
    other = Memory(config=_config(other_path), embedding_provider=provider, get_current_time=clock)
    for i in range(20):  # shares "red mug" and "blue chair" with the robot that forgets
        other.add("red mug" if i % 2 else "blue chair", x=3.0, y=float(i % 4), timestamp=clock.now - 500 + i,
                  layer_name="detections")
    other.close()
    sync_memory(other_path, fleet_url, "other")

    path = tmp_path / "robot.db"
    memory = Memory(config=_config(path), embedding_provider=provider, get_current_time=clock)
    _fill(memory, clock, vector)
    if synced_before_forget:
        sync_memory(path, fleet_url, "robot")
        held = _holders(fleet_url, vector)
        assert any("observations.metadata" in h or "texts.text" in h for h in held), held  # it arrived
        assert any("the canary vector" in h for h in held) and any(LEDGER_UNIQUE.decode() in h for h in held)

    report = memory.forget(match="red jacket", reason="person asked", who="test")
    assert report.observations == 7 and report.log_base_seq is not None
    sync = sync_memory(path, fleet_url, "robot")
    assert sync.snapshot_seq == report.log_base_seq  # the log restarted: shipped from the cleaned copy
    if synced_before_forget:
        assert sync.counts.get("removed observations") == 7 and sync.counts.get("removed texts", 0) >= 2
    assert _holders(fleet_url, vector) == []
    _assert_same(path, fleet_url, "robot")
    _assert_same_other(other_path, fleet_url)

    for i in range(5):  # the robot goes on; the next syncs ship its log as before
        memory.add("green box", x=4.0, y=float(i), timestamp=clock.now + i, layer_name="detections")
    memory.close()
    later = sync_memory(path, fleet_url, "robot")
    assert later.snapshot_seq is None and later.counts.get("observations") == 5
    _assert_same(path, fleet_url, "robot")
    assert _holders(fleet_url, vector) == []


def _assert_same_other(path, url: str) -> None:
    robot = robot_rows(path)
    with db.connect(url) as conn:
        fleet = fleet_rows(conn, "other")
        assert all(same_summary(a, b) for a, b in zip(*[
            [s[t].get(k) for t in ("sightings", "places") for k in sorted(set(fleet_summaries(conn, "other")[t]))]
            for s in (fleet_summaries(conn, "other"), expected_summaries(fleet))]))
    assert summary(fleet) == summary(robot), first_difference(robot, fleet)
    texts = {row[1] for row in robot["texts"]}
    assert {"red mug", "blue chair"} <= texts  # the texts it shares with the robot that forgot stay


def test_a_canary_in_the_log_the_fleet_never_saw_never_arrives(tmp_path, clock, fleet_url):
    """Forgotten before the first sync: the restarted log and its base hold no canary, nor does the fleet."""
    provider = HashingEmbeddingProvider()
    vector = canary_vector(provider.dim)
    with db.connect(fleet_url) as conn:
        init_fleet(conn, dim=provider.dim)
    path = tmp_path / "robot.db"
    memory = Memory(config=_config(path), embedding_provider=provider, get_current_time=clock)
    for i in range(10):
        memory.add(CANARY, x=2.0, y=2.0, timestamp=clock.now - 100 + i, layer_name="scene", embedding=vector)
        memory.add("red mug", x=1.0, y=1.0, timestamp=clock.now - 100 + i, layer_name="detections")
    memory.flush()
    memory.forget(match="red jacket")
    memory.close()
    sync_memory(path, fleet_url, "robot")
    assert _holders(fleet_url, vector) == []
    _assert_same(path, fleet_url, "robot")
