"""Entity writes in short transactions: several commits per step, and a crash between them counts nothing twice."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from emem_ros.consolidation.state import ENTITY_PENDING, ENTITY_PROGRESS, read_value
from emem_ros.storage.budget import TransactionBudget
from test.conftest import FakeClock
from test.support.patrol import open_memory, patrol_into

ROOT = Path(__file__).resolve().parents[1]
PATROL = 3000
PART = 8
"""Statements per transaction in these tests: far fewer than a patrol's step writes."""


def _patrolled(path: Path) -> float:
    """A memory on ``path`` with a patrol stored (same every time); returns the clock time to extract at."""
    clock = FakeClock()
    memory = open_memory(path, clock)
    try:
        patrol_into(memory, clock, PATROL)
    finally:
        memory.close()
    return clock.now + 10_000


def _small_parts(memory) -> None:
    memory._consolidation.entities.budget = TransactionBudget(first=PART, least=PART, most=PART)


def _written(memory) -> tuple[list, list]:
    conn = memory.store.reader()
    entities = conn.execute(
        "SELECT id, name, entity_type, x, y, z, spread, first_seen, last_seen, sightings, confidence, layer, metadata"
        " FROM entities ORDER BY id").fetchall()
    edges = conn.execute("SELECT kind, src, dst, weight, updated FROM edges"
                         " WHERE kind IN ('OBSERVED_IN', 'COOCCURS_WITH') ORDER BY kind, src, dst").fetchall()
    return entities, edges


def test_a_long_entity_step_commits_in_several_short_transactions(tmp_path):
    now = _patrolled(tmp_path / "m.db")
    memory = open_memory(tmp_path / "m.db", FakeClock(now))
    try:
        _small_parts(memory)
        memory.writer_lock_stats  # noqa: B018 - the figures exist before the run
        memory.engine.store.write_lock.reset()
        report = memory.extract_entities(final=True)
        holds = memory.writer_lock_stats["holds"]
        entities, edges = _written(memory)
        assert report.created > 5 and report.complete
        statements = len(entities) + report.observed_in + len({(e[1], e[2]) for e in edges if e[0] == "COOCCURS_WITH"})
        assert holds["entity_journal.apply"]["count"] == report.transactions
        assert report.transactions >= statements // PART > 3
        assert read_value(memory.store.reader(), ENTITY_PENDING) is None  # the journal is gone once done
    finally:
        memory.close()


CHILD = """
import os, sys
sys.path.insert(0, {root!r})
from test.conftest import FakeClock
from test.support.patrol import open_memory
from emem_ros.storage.budget import TransactionBudget

memory = open_memory({path!r}, FakeClock({now!r}))
budget = TransactionBudget(first={part}, least={part}, most={part})
took = budget.took
parts = [0]

def crash_after(rows, seconds):
    took(rows, seconds)
    parts[0] += 1
    if parts[0] == {crash_after}:
        os._exit(17)  # the part is committed; nothing after it runs

budget.took = crash_after
memory._consolidation.entities.budget = budget
memory.extract_entities(final=True)
os._exit(0)
"""


def test_a_crash_between_parts_leaves_the_same_counts_as_an_uninterrupted_run(tmp_path):
    now = _patrolled(tmp_path / "whole.db")
    assert _patrolled(tmp_path / "crashed.db") == now

    whole = open_memory(tmp_path / "whole.db", FakeClock(now))
    try:
        whole.extract_entities(final=True)  # default budget: however many transactions it takes
        expected = _written(whole)
    finally:
        whole.close()

    code = textwrap.dedent(CHILD).format(root=str(ROOT), path=str(tmp_path / "crashed.db"), now=now, part=PART,
                                         crash_after=5)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 17, done.stderr[-2000:]

    crashed = open_memory(tmp_path / "crashed.db", FakeClock(now))
    try:
        conn = crashed.store.reader()
        progress = read_value(conn, ENTITY_PROGRESS)
        assert read_value(conn, ENTITY_PENDING) is not None and progress["done"] == 5 * PART
        assert conn.execute("SELECT COUNT(*) FROM entities").fetchone()[0] > 0  # some parts were committed
        _small_parts(crashed)
        report = crashed.extract_entities(final=True)  # finishes the plan, then finds nothing new
        assert report.complete and report.created == 0
        entities, edges = _written(crashed)
        assert read_value(crashed.store.reader(), ENTITY_PENDING) is None
        assert len(crashed.store.vectors["entities"]) == len(entities)
    finally:
        crashed.close()
    assert entities == expected[0]  # sightings, moments and places counted once
    assert edges == expected[1]  # OBSERVED_IN and COOCCURS_WITH weights added once


def test_a_forget_between_parts_leaves_no_edge_to_what_it_erased(tmp_path, clock):
    """Parts are separate transactions: a forget may commit between them, and later parts skip what it erased."""
    from emem_ros.consolidation import entity_journal
    from emem_ros.consolidation.entity_journal import EntityPlan, encode_vector
    from emem_ros.consolidation.state import Marks

    memory = open_memory(tmp_path / "m.db", clock)
    try:
        for i in range(6):
            memory.add("red mug" if i % 2 else "blue cup", x=1.0, y=1.0, timestamp=clock.now + i)
        memory.flush()
        ids = [r[0] for r in memory.store.reader().execute("SELECT id FROM observations ORDER BY id")]
        vector = encode_vector(memory.engine.embed_texts(["mug"])[0])
        row = ["mug", "object", 1.0, 1.0, 0.0, 0.1, clock.now, clock.now, 3, 0.9, "detections", "{}", vector]
        plan = EntityPlan(marks=Marks(stamp=clock.now + 10, id=ids[-1]), now=clock.now,
                          entities=[[-1, None, *row], [-2, None, *row]],
                          observed=[[-1, oid, 1] for oid in ids], pairs=[[-1, -2, 1]])
        forgotten = []

        def forget_once(created):
            if not forgotten:  # after the first entity's part committed, before the edges
                forgotten.append(memory.forget(match="blue cup", reason="test"))

        applied = entity_journal.apply(memory.store, plan, TransactionBudget(first=1, least=1, most=1),
                                       on_created=forget_once)
        assert applied.finished and applied.transactions == plan.statements
        assert forgotten and forgotten[0].observations == 3
        conn = memory.store.reader()
        alive = {r[0] for r in conn.execute("SELECT id FROM observations")}
        dst = [r[0] for r in conn.execute("SELECT dst FROM edges WHERE kind='OBSERVED_IN'")]
        assert sorted(dst) == sorted(f"obs-{i}" for i in alive) and len(alive) == 3
        assert conn.execute("SELECT COUNT(*) FROM edges WHERE kind='COOCCURS_WITH'").fetchone()[0] == 1
    finally:
        memory.close()
