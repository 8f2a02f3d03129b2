"""CollectorPause: automatic garbage collection is off while consolidation jobs run, and only then."""

from __future__ import annotations

import gc
import threading

import pytest

from emem_ros.consolidation.worker import ConsolidationWorker
from emem_ros.core.collector import CollectorPause
from emem_ros.core.errors import InvalidInputError
from test.support.patrol import open_memory


@pytest.fixture(autouse=True)
def collector_on():
    """Every test starts and ends with the collector on (as a process normally runs)."""
    gc.enable()
    yield
    gc.enable()


def test_paused_turns_collection_off_and_back_on():
    pause = CollectorPause()
    with pause.paused():
        assert not gc.isenabled()
        assert pause.active
        with pause.paused():  # re-entrant: the inner exit does not resume
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    assert not pause.active
    assert pause.pauses == 1


def test_collection_resumes_after_an_exception():
    pause = CollectorPause()
    with pytest.raises(RuntimeError):
        with pause.paused():
            raise RuntimeError("job failed")
    assert gc.isenabled()


def test_an_application_that_disabled_collection_keeps_it_disabled():
    gc.disable()
    pause = CollectorPause()
    with pause.paused():
        assert not gc.isenabled()
        assert not pause.active  # it did not turn it off, so it will not turn it on
    assert not gc.isenabled()
    assert pause.pauses == 0


def test_check_ends_a_pause_that_lasted_max_seconds(monkeypatch):
    from emem_ros.core import collector

    now = [100.0]
    monkeypatch.setattr(collector.time, "monotonic", lambda: now[0])
    pause = CollectorPause(max_seconds=30.0)
    with pause.paused():
        now[0] += 29.0
        pause.check()
        assert not gc.isenabled()
        now[0] += 1.0
        pause.check()
        assert gc.isenabled()
        assert pause.cut_short == 1
        with pause.paused():  # nested entry after the cut does not turn it off again
            assert gc.isenabled()
    assert gc.isenabled()


def test_max_seconds_must_be_positive():
    with pytest.raises(ValueError):
        CollectorPause(0)


def _run(worker: ConsolidationWorker, job) -> object:
    try:
        return worker.submit("probe", job).result(timeout=30)
    finally:
        worker.close(5.0)


def test_worker_jobs_run_with_collection_off_only_with_a_collector():
    seen = _run(ConsolidationWorker(collector=CollectorPause()), lambda stop: gc.isenabled())
    assert seen is False
    assert gc.isenabled()
    assert _run(ConsolidationWorker(), lambda stop: gc.isenabled()) is True


def test_a_jobs_stop_checks_end_an_overlong_pause():
    pause = CollectorPause(max_seconds=1e-9)  # any check is past it

    def job(stop: threading.Event) -> tuple[bool, bool]:
        before = gc.isenabled()
        stop.is_set()  # where jobs check between steps
        return before, gc.isenabled()

    assert _run(ConsolidationWorker(collector=pause), job) == (False, True)
    assert pause.cut_short == 1


def test_memory_config_sets_the_pause(tmp_path):
    clock = lambda: 1_000.0  # noqa: E731
    memory = open_memory(tmp_path / "a.db", clock)
    try:
        collector = memory._consolidation.worker.collector
        assert collector is not None and collector.max_seconds == 30.0
        assert memory.maintenance(timeout=30) is not None
        assert gc.isenabled()
    finally:
        memory.close()
    memory = open_memory(tmp_path / "b.db", clock, consolidation_gc_pause=0.0)
    try:
        assert memory._consolidation.worker.collector is None
    finally:
        memory.close()
    with pytest.raises(InvalidInputError):
        open_memory(tmp_path / "c.db", clock, consolidation_gc_pause=-1.0)


def test_the_timer_ends_a_pause_without_any_check():
    pause = CollectorPause(max_seconds=0.01)
    resumed = threading.Event()
    with pause.paused():
        for _ in range(500):  # the timer thread turns collection back on, no check() needed
            if gc.isenabled():
                resumed.set()
                break
            resumed.wait(0.01)
    assert resumed.is_set()
    assert pause.cut_short == 1
    assert gc.isenabled()
