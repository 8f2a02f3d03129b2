"""The maintenance process (consolidation/offload.py): same archive as in-process, lazy, never orphaned."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from emem_ros.consolidation.offload import MAX_FAILURES
from emem_ros.core.errors import InvalidInputError
from test.conftest import FakeClock
from test.support.patrol import open_memory, patrol_into

ROOT = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _patrolled(path: Path, clock: FakeClock, **overrides):
    memory = open_memory(path, clock, archive_after_seconds=0, archive_batch_size=97,
                         consolidation_window=60.0, **overrides)
    patrol_into(memory, clock, 1500)
    clock.advance(600)
    return memory


def _state(path: Path) -> dict:
    """Everything archival touches, read straight from the file."""
    conn = sqlite3.connect(str(path))
    try:
        tables = {
            "observations": "SELECT id, tier, tier_since, text_id, metadata, gist_id FROM observations ORDER BY id",
            "texts": "SELECT id, text, refs FROM texts ORDER BY id",
            "places": "SELECT id, text_id FROM places ORDER BY id",
            "gists": "SELECT id, text, source_count FROM gists ORDER BY id",
            "entities": "SELECT * FROM entities ORDER BY id",
            "edges": "SELECT * FROM edges ORDER BY 1, 2, 3",
            "marks": "SELECT key, value FROM meta WHERE key NOT LIKE 'body.%' AND key LIKE '%mark%' ORDER BY key",
            "meta": "SELECT key, value FROM meta WHERE key LIKE 'body.%' ORDER BY key",
            "fts": "SELECT rowid FROM texts_fts ORDER BY rowid",
        }
        return {name: conn.execute(sql).fetchall() for name, sql in tables.items()}
    finally:
        conn.close()


def test_the_child_and_the_serving_process_archive_the_same(tmp_path):
    results = {}
    for process in (True, False):
        clock = FakeClock()
        path = tmp_path / f"{process}" / "m.db"
        path.parent.mkdir()
        memory = _patrolled(path, clock, maintenance_process=process)
        report = memory.maintenance()
        service = memory._consolidation
        if process:
            assert service.offload is not None and service.offload.started == 1
            assert service.offload.answered["plan_archive"] >= 2  # several batches of 97
            assert service.offload.answered["plan_entities"] >= 2
            assert service.offload.answered["plan_time_window"] >= 1
        else:
            assert service.offload is None
        cold = sorted(memory.read_archived(), key=lambda r: r["id"])
        memory.close()
        results[process] = (report.archive.observations, report.archive.texts_removed, report.archive.cold_records,
                            report.archive.places_removed, cold, _state(path))
    offloaded, in_process = results[True], results[False]
    assert offloaded[0] > 500 and offloaded[2] == offloaded[0]
    assert any(key == "body.scales" for key, _ in offloaded[5]["meta"])  # body readings were archived too
    assert offloaded[:4] == in_process[:4]
    assert offloaded[4] == in_process[4]  # every cold-store record, field by field
    assert offloaded[5] == in_process[5]


class _QuietLLM:
    """An LLM that never answers: summaries and entity names fall back, but it is configured."""

    def summarize(self, texts, context):
        return None

    def extract_entities(self, texts):
        return None


def test_with_an_llm_entities_and_gists_are_planned_in_the_serving_process(tmp_path, clock):
    memory = _patrolled(tmp_path / "m.db", clock, llm=_QuietLLM())
    report = memory.maintenance()
    offload = memory._consolidation.offload
    assert report.entities.created > 0 and report.archive.observations > 0
    assert "plan_entities" not in offload.answered and "plan_time_window" not in offload.answered
    assert offload.answered["plan_archive"] >= 1
    memory.close()


def test_the_child_starts_at_the_first_maintenance_request_and_stops_with_close(tmp_path, clock):
    memory = _patrolled(tmp_path / "m.db", clock)
    offload = memory._consolidation.offload
    assert offload is not None and offload.pid is None  # opening and writing start nothing
    memory.consolidate_time_window()
    pid = offload.pid
    assert pid is not None and _alive(pid)
    memory.archive()
    assert offload.pid == pid and offload.started == 1
    memory.close()
    assert not _alive(pid)


def test_the_child_runs_this_copy_whatever_the_working_directory_holds(tmp_path, clock, monkeypatch):
    decoy = tmp_path / "cwd" / "emem_ros"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('a different emem_ros in the working directory')\n")
    monkeypatch.chdir(decoy.parent)
    memory = _patrolled(tmp_path / "m.db", clock)
    report = memory.maintenance()
    offload = memory._consolidation.offload
    assert report.archive.observations > 0 and offload.requests >= 2 and offload.failures == 0
    memory.close()


def test_one_child_serves_every_request_of_a_run(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    memory.add("red mug", x=1.0, y=1.0, timestamp=clock.now)
    memory.flush()
    memory.maintenance()  # entities (twice: before archival too) and one empty archival batch
    offload = memory._consolidation.offload
    assert offload.started == 1 and offload.requests >= 3
    memory.close()
    assert offload.pid is None


def test_an_idle_child_leaves_and_the_next_request_starts_another(tmp_path, clock, caplog):
    memory = _patrolled(tmp_path / "m.db", clock)
    offload = memory._consolidation.offload
    offload.idle_exit = 2.5
    with caplog.at_level(logging.WARNING, logger="emem_ros.consolidation"):
        memory.extract_entities()
        first = offload.pid
        assert first is not None
        assert _wait_gone(first, 10.0)  # on its own, the parent still open
        report = memory.maintenance()
    assert report.archive.observations > 0 and report.consolidation.gists > 0
    assert offload.started == 2 and offload.failures == 0
    assert not [r for r in caplog.records if r.name.startswith("emem_ros.consolidation")]
    memory.close()


def test_the_child_exits_when_its_parent_is_killed(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from test.conftest import FakeClock
        from test.support.patrol import open_memory, patrol_into
        clock = FakeClock()
        memory = open_memory({str(tmp_path / "m.db")!r}, clock, archive_after_seconds=0, consolidation_window=60.0)
        patrol_into(memory, clock, 300)
        clock.advance(600)
        memory.maintenance()
        print(memory._consolidation.offload.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
    try:
        line = parent.stdout.readline()
        assert line.strip().isdigit(), line
        child = int(line)
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert _wait_gone(child), "the maintenance process outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _ready_to_archive_with_a_child(tmp_path, clock):
    """A patrolled memory consolidated (its long_term rows counted) and its maintenance process started."""
    memory = _patrolled(tmp_path / "m.db", clock)
    offload = memory._consolidation.offload
    memory.consolidate_time_window()
    promoted = memory.store.reader().execute("SELECT COUNT(*) FROM observations WHERE tier='long_term'").fetchone()[0]
    offload.request("plan_archive", cutoff=0.0, limit=1, now=clock.now, encode=False)
    return memory, offload, promoted, offload.pid


def test_a_crashed_child_is_logged_and_replaced_and_nothing_is_lost(tmp_path, clock, caplog):
    memory, offload, promoted, first = _ready_to_archive_with_a_child(tmp_path, clock)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while offload._proc.poll() is None and time.monotonic() < deadline:  # dead and reaped: a crash while idle
        time.sleep(0.02)
    with caplog.at_level(logging.ERROR, logger="emem_ros.consolidation"):
        report = memory.archive()
    assert any(f"process {first} exited (code -9)" in r.getMessage() for r in caplog.records)
    assert report.observations == promoted and report.cold_records == promoted
    assert len(list(memory.read_archived())) == promoted
    assert offload.started == 2 and offload.pid not in (None, first)
    memory.close()


def test_a_hung_child_is_killed_and_its_batch_archived_here(tmp_path, clock, caplog):
    memory, offload, promoted, first = _ready_to_archive_with_a_child(tmp_path, clock)
    os.kill(first, signal.SIGSTOP)  # hangs: never answers
    offload.reply_timeout = 0.3
    with caplog.at_level(logging.ERROR, logger="emem_ros.consolidation"):
        report = memory.archive()
    assert any("did not answer" in r.getMessage() for r in caplog.records)
    assert _wait_gone(first)  # killed, not left behind
    assert report.observations == promoted and report.cold_records == promoted
    assert sorted(r["id"] for r in memory.read_archived()) == sorted(
        f"obs-{i}" for (i,) in memory.store.reader().execute("SELECT id FROM observations WHERE tier='archived'"))
    memory.close()


def test_a_child_that_keeps_failing_is_given_up_and_archival_still_completes(tmp_path, clock, caplog):
    memory = _patrolled(tmp_path / "m.db", clock)
    offload = memory._consolidation.offload
    offload.db_path = tmp_path / "missing" / "m.db"  # every request fails in the child
    memory.consolidate_time_window()
    promoted = memory.store.reader().execute("SELECT COUNT(*) FROM observations WHERE tier='long_term'").fetchone()[0]
    with caplog.at_level(logging.ERROR, logger="emem_ros.consolidation.archival"):
        report = memory.archive()
    assert report.observations == promoted and report.cold_records == promoted
    assert offload.failures == MAX_FAILURES and not offload.usable
    assert sum("from now on" in r.getMessage() for r in caplog.records) == 1
    memory.close()


def test_maintenance_process_must_be_a_bool(tmp_path, clock):
    with pytest.raises(InvalidInputError, match="maintenance_process"):
        open_memory(tmp_path / "m.db", clock, maintenance_process="yes")


def test_a_request_the_child_cannot_do_fails_plainly_and_the_child_stays(tmp_path, clock):
    from emem_ros.consolidation.offload import OffloadError

    memory = _patrolled(tmp_path / "m.db", clock)
    offload = memory._consolidation.offload
    memory.extract_entities()
    pid = offload.pid
    with pytest.raises(OffloadError, match="unknown request 'nonsense'"):
        offload.request("nonsense")
    assert offload.pid == pid and offload.failures == 1
    memory.consolidate_time_window()  # the next request works and resets the count
    assert offload.pid == pid and offload.failures == 0
    memory.close()
