"""Archival keeps the tools' text catalog up to date by dropping the rows it moves (no rebuild), exactly.

A rebuild reads every observation row, the archived skeletons included, so it grew with the history: on a
week's file (280k rows) each archival part made the next question 45-57 ms slower (issue 26).
"""

from __future__ import annotations

from emem_ros.tools import catalog as catalog_module
from test.support.patrol import age_past_window
from test.test_forget_catalog import _answers, _catalog, _fill, _fresh


def _archive_all(memory, clock) -> int:
    age_past_window(memory, clock)
    memory.consolidate_time_window()
    clock.now += 1
    due = memory.store.reader().execute("SELECT COUNT(*) FROM observations WHERE tier = 'long_term'").fetchone()[0]
    assert memory.archive().observations == due
    return due


def test_the_catalog_after_each_archival_part_equals_a_fresh_one_without_a_rebuild(make_memory, clock, monkeypatch):
    memory = make_memory(archive_after_seconds=0, archive_batch_size=97)
    _fill(memory, clock)
    catalog = _catalog(memory)
    builds = catalog.builds
    assert "battery" in catalog.body_layers
    archiver = memory._consolidation.archiver
    archive_part = archiver._archive
    compared = []

    def and_compare(*args, **kwargs):
        archive_part(*args, **kwargs)
        compared.append(_catalog(memory).snapshot() == _fresh(memory))

    monkeypatch.setattr(archiver, "_archive", and_compare)
    moved = _archive_all(memory, clock)
    assert moved > 400 and len(compared) >= 5 and all(compared)
    assert catalog.builds == builds, "archival made the catalog rebuild"
    hot_battery = memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations WHERE layer = 'battery' AND tier != 'archived'").fetchone()[0]
    assert ("battery" in catalog.body_layers) == (hot_battery > 0)


def test_answers_after_archival_equal_those_of_a_freshly_opened_memory(make_memory, clock):
    memory = make_memory(archive_after_seconds=0, archive_batch_size=97)
    _fill(memory, clock)
    _answers(memory)  # the catalog and the query cache are warm
    _archive_all(memory, clock)
    for i, text in enumerate(("chair", "lamp", "a man at the door 1", "battery 30%")):  # hot rows beside archived
        memory.add(text, x=1.0 + i, y=2.0, timestamp=clock.now - 10 + i, layer_name="detections")
    memory.flush()
    after = _answers(memory)
    assert sum("Nothing remembered" in a or "Could not" in a for a in after) <= 1
    memory.close()
    reopened = make_memory()
    assert _answers(reopened) == after


def test_a_catalog_nobody_asks_holds_a_bounded_list_of_moved_rows(make_memory, clock, monkeypatch):
    monkeypatch.setattr(catalog_module, "_MAX_HEARD", 150)
    memory = make_memory(archive_after_seconds=0, archive_batch_size=97)
    _fill(memory, clock)
    catalog = _catalog(memory)
    builds = catalog.builds
    heard = []
    removed = catalog.removed

    def counting(number, rows):
        removed(number, rows)
        heard.append(sum(len(r) for _, r in catalog._removed))

    monkeypatch.setattr(catalog, "removed", counting)
    _archive_all(memory, clock)
    assert len(heard) >= 5 and max(heard) <= 150 + 97  # never more than the bound and one part
    assert _catalog(memory).snapshot() == _fresh(memory)
    assert catalog.builds == builds + 1  # rebuilt once, when asked


def test_a_build_reads_the_hot_rows_not_the_archived_skeletons(make_memory, clock):
    memory = make_memory(archive_after_seconds=0, archive_batch_size=5000)
    start = clock.now - 20_000
    for i in range(3000):
        memory.add(("chair", "lamp", "desk")[i % 3], x=float(i % 7), y=1.0, timestamp=start + i,
                   layer_name="detections")
    memory.flush()
    assert _archive_all(memory, clock) == 3000
    for i in range(30):
        memory.add(("chair", "box")[i % 2], x=2.0, y=float(i % 3), timestamp=clock.now - 100 + i,
                   layer_name="detections")
    memory.flush()
    fresh = catalog_module.TextCatalog(memory.store)
    conn = memory.store.reader()
    instructions = [0]

    def count() -> int:
        instructions[0] += 100
        return 0

    conn.set_progress_handler(count, 100)
    try:
        fresh.sync()
    finally:
        conn.set_progress_handler(None, 100)
    assert fresh.builds == 1 and {s[0] for s in fresh.snapshot()["all"].values()} == {15}
    assert instructions[0] < 3000, f"{instructions[0]} SQLite instructions: the build read the archived rows"
