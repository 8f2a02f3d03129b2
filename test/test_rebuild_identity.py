"""Rebuild from the operation log alone gives the same memory: every kind of write is logged.

One memory gets every kind of write the issue names (observations, body
states, episode events, episode consolidation, time-window gists, entity
extraction and merges, experiences with their vectors, archival, an agent's
note); then the SQLite file and the indexes are thrown away and regenerated
from the log. Every query tool must answer exactly as before.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from emem_ros.cli.main import main as emem
from emem_ros.storage.rebuild import rebuild_from_log
from test.support.patrol import age_past_window, memory_adder, multi_room_patrol, open_memory

QUERIES = [
    ("semantic_search", {"query": "red mug on the table"}),
    ("semantic_search", {"query": "sofa", "layer": "scene", "n_results": 5}),
    ("spatial_query", {"x": 2.5, "y": 2.0, "radius": 3.0, "n_results": 20}),
    ("temporal_query", {"order": "oldest", "n_results": 25}),
    ("temporal_query", {"last_n_minutes": 30, "n_results": 25}),
    ("episode_summary", {"last_n": 3}),
    ("episode_summary", {"task_name": "morning patrol"}),
    ("get_current_context", {"radius": 4.0, "include_recent_minutes": 30}),
    ("search_gists", {"query": "kitchen"}),
    ("entity_query", {"n_results": 30}),
    ("entity_query", {"name": "chair"}),
    ("locate", {"concept": "mug"}),
    ("recall", {"query": "laptop on the desk"}),
    ("body_status", {}),
]
EXPERIENCE_QUERIES = [
    {"query": "kitchen door closed"},
    {"success": False},
    {"tags": ["dock"]},
]


def build(path: Path, clock) -> None:
    memory = open_memory(path, clock, archive_after_seconds=600.0)
    add = memory_adder(memory)
    memory.start_episode("morning patrol", goal="check every room")
    info = multi_room_patrol(add, 900, start=clock.now - 20_000)
    memory.end_episode(consolidate=True, result="all rooms seen", success=True)  # episode consolidation
    assert memory.wait_for_consolidation(30)
    multi_room_patrol(add, 900, start=info.end + 60, seed=5)
    memory.flush()
    age_past_window(memory, clock)
    report = memory.maintenance(timeout=60)  # gists, entities (with merges), archival pass
    assert report.consolidation.gists > 0 and report.entities is not None
    for i, (goal, ok) in enumerate([("fetch the red mug from the kitchen", True), ("open the kitchen door", False),
                                    ("dock to charge", True)]):
        memory.record_experience(goal, action="drove there", result="door was closed" if not ok else "done",
                                 reflection="the kitchen door is often closed", success=ok,
                                 tags=["dock"] if "dock" in goal else ["kitchen"], timestamp=clock.now - 100 + i)
    memory.ledger.embed_pending()
    clock.now += 3600  # past archive_after_seconds: long-term rows leave the hot tables
    assert memory.archive().observations > 0
    multi_room_patrol(add, 300, start=clock.now - 400, seed=9)  # fresh, hot observations after archival
    assert memory.dispatch_tool_call("store_specific_memory",
                                     {"text": "the spare battery is in the office drawer", "x": 11.0, "y": 2.0}
                                     ).startswith("Stored")
    memory.flush()
    memory.close()


def answers(path: Path, clock) -> dict:
    memory = open_memory(path, clock)
    try:
        out = {f"{name} {args}": memory.dispatch_tool_call(name, args) for name, args in QUERIES}
        for args in EXPERIENCE_QUERIES:
            if "find_experiences" in memory.tools.registry:
                out[f"find_experiences {args}"] = memory.dispatch_tool_call("find_experiences", args)
            found = memory.ledger.find(**args)
            out[f"ledger.find {args}"] = [(e.id, round(score, 6)) for e, score in found]
        out["cold store"] = sorted(r["id"] for r in memory.read_archived())
    finally:
        memory.close()
    return out


def table_rows(path: Path) -> dict:
    """Every row of every real table (FTS shadow tables differ in layout, not in what they find)."""
    conn = sqlite3.connect(path)
    try:
        virtual = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL%'")]
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                  if r[0] not in virtual and not any(r[0].startswith(v + "_") for v in virtual)
                  and not r[0].startswith("sqlite_")]
        rows = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()
    # When the schema was created is the migration's own note, not a logged write.
    rows["meta"] = [r for r in rows["meta"] if not str(r[0]).startswith("migrated_to_")]
    return rows


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from test.conftest import FakeClock

    clock = FakeClock()
    path = tmp_path_factory.mktemp("rebuild") / "robot.db"
    build(path, clock)
    return path, clock


def test_every_answer_is_identical_after_a_rebuild_from_the_log_alone(built, tmp_path):
    source, clock = built
    path = tmp_path / source.name
    for item in source.parent.iterdir():  # a private copy: the module's memory stays untouched
        target = tmp_path / item.name
        shutil.copytree(item, target) if item.is_dir() else shutil.copy2(item, target)
    before_rows = table_rows(path)
    before = answers(path, clock)
    assert "red mug" in before["locate {'concept': 'mug'}"]
    assert before["cold store"], "the scenario must archive something"
    assert any(e for e in before["ledger.find {'query': 'kitchen door closed'}"])
    # Throw away everything but the log (the cold store is the archive, not derived).
    for derived in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        derived.unlink(missing_ok=True)
    shutil.rmtree(path.with_name(path.name + ".idx"), ignore_errors=True)
    report = rebuild_from_log(path, keep_old=False)
    assert report.records > 10 and report.old_file is None
    assert table_rows(path) == before_rows
    assert answers(path, clock) == before


def test_emem_rebuild_cli_prints_a_report_and_keeps_the_old_file(built, tmp_path, capsys):
    source, clock = built
    path = tmp_path / source.name
    for item in source.parent.iterdir():
        target = tmp_path / item.name
        shutil.copytree(item, target) if item.is_dir() else shutil.copy2(item, target)
    before_rows = table_rows(path)
    assert emem(["rebuild", str(path)]) == 0
    out = capsys.readouterr().out
    assert "log record(s)" in out and "before-rebuild" in out and "indexes rebuilt: texts" in out
    assert Path(f"{path}.before-rebuild").exists()
    assert path.with_name(path.name + ".idx").is_dir()  # indexes built now, not at the next open
    assert table_rows(path) == before_rows
    assert emem(["rebuild", str(path), "--no-keep-old", "--no-indexes"]) == 0
    assert "old file removed" in capsys.readouterr().out
    assert table_rows(path) == before_rows


def test_emem_rebuild_cli_without_a_log_is_a_plain_error(tmp_path, capsys):
    path = tmp_path / "nolog.db"
    sqlite3.connect(path).close()
    assert emem(["rebuild", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no operation log" in err and "nolog.db" in err


def test_rebuild_refuses_while_the_memory_is_open_and_changes_nothing(tmp_path, clock):
    from emem_ros.core.errors import MemoryInUseError

    path = tmp_path / "open.db"
    memory = open_memory(path, clock)
    memory.add("red mug", x=1.0, y=2.0, layer_name="detections")
    memory.flush()
    before = path.stat().st_mtime_ns, path.stat().st_size
    with pytest.raises(MemoryInUseError, match="open"):
        rebuild_from_log(path)
    assert (path.stat().st_mtime_ns, path.stat().st_size) == before
    assert not path.with_name(path.name + ".before-rebuild").exists()
    assert "red mug" in memory.semantic_search("red mug")
    memory.close()
    assert rebuild_from_log(path).records > 0
