"""The facade's consolidation methods hand back the report they promise, from the worker or inline on it."""

import pytest

from emem_ros.consolidation.archival import ArchiveReport
from emem_ros.consolidation.entities import EntityReport
from emem_ros.consolidation.gists import ConsolidationReport
from emem_ros.consolidation.service import MaintenanceReport
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


def test_a_job_result_of_another_type_is_an_error_not_a_wrong_report(make_memory, monkeypatch):
    memory = make_memory()
    monkeypatch.setattr(memory._consolidation, "run", lambda kind, timeout=None, **options: {"kind": kind})
    with pytest.raises(TypeError, match="returned a dict, not a MaintenanceReport"):
        memory.maintenance()
