"""The facade's consolidation methods hand back the report they promise, from the worker or inline on it."""

import threading

import pytest

from emem_ros.consolidation.archival import ArchiveReport
from emem_ros.consolidation.entities import EntityReport
from emem_ros.consolidation.gists import ConsolidationReport
from emem_ros.consolidation.service import MaintenanceReport
from emem_ros.core.errors import InvalidInputError
from emem_ros.forgetting import ForgetReport

CALLS = [("maintenance", MaintenanceReport), ("consolidate_time_window", ConsolidationReport),
         ("extract_entities", EntityReport), ("archive", ArchiveReport)]


@pytest.mark.parametrize("method,report", CALLS, ids=[c[0] for c in CALLS])
def test_each_job_returns_its_report_from_the_worker_and_inline(make_memory, method, report):
    memory = make_memory()
    memory.add("a red mug", x=1.0, y=2.0)
    memory.flush()
    assert type(getattr(memory, method)(timeout=30)) is report
    inline = memory._consolidation.worker.submit("inline", lambda _stop: getattr(memory, method)())
    assert type(inline.result(30)) is report  # on the worker thread: run in place, not queued behind itself
    assert type(memory.forget(match="red mug", dry_run=True, timeout=30)) is ForgetReport


JOBS = [("maintenance", MaintenanceReport), ("time_window", ConsolidationReport), ("entities", EntityReport),
        ("archive", ArchiveReport)]


def test_a_job_queued_by_name_hands_back_its_report_and_an_unknown_name_is_refused(make_memory):
    memory = make_memory()
    memory.add("a red mug", x=1.0, y=2.0)
    memory.flush()
    for name, report in JOBS:
        assert type(memory.submit_job(name).result(30)) is report
    with pytest.raises(InvalidInputError, match="unknown consolidation job 'gists'"):
        memory.submit_job("gists")


def test_an_equal_job_still_queued_is_not_queued_twice_but_a_final_extraction_is(make_memory):
    memory = make_memory()
    service = memory._consolidation
    gate = threading.Event()
    blocker = service.worker.submit("blocker", lambda _stop: gate.wait(30))
    try:
        assert memory.submit_job("maintenance") is memory.submit_maintenance()
        assert service.submit_entities() is memory.submit_job("entities")
        assert service.submit_entities(final=True) is not service.submit_entities(final=True)
    finally:
        gate.set()
    assert blocker.result(30) is True
    assert memory.wait_for_consolidation(30)
