"""The row memo shared by the time-window and entity passes serves exactly the rows SQLite would.

It exists for speed (each pass used to build tens of thousands of rows from
scratch); what these tests pin is that nothing a pass sees changes: same rows,
same order, every column equal, gist links refreshed, stale or vanished rows
never served, and the same gists and entities with or without it.
"""

from __future__ import annotations

import dataclasses

from emem_ros.consolidation.rows import RowMemo, fetch_rows
from test.support.patrol import age_past_window, open_memory, patrol_into

BASE = "o.text_id IS NOT NULL AND o.tier != 'archived'"


def _fields(rows):
    return [tuple(getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "_metadata") for r in rows]


def test_memo_serves_the_rows_fetch_rows_reads_with_gist_links_refreshed(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    patrol_into(memory, clock, 1500)
    conn = memory.store.reader()
    memo = RowMemo()
    first = memo.fetch(conn, BASE, limit=900, reader="entities")
    assert _fields(first) == _fields(fetch_rows(conn, BASE, limit=900))
    assert memo.reused == 0 and len(memo) == 900
    age_past_window(memory, clock)
    memory._consolidation.rows.clear()  # the memory's own memo must not feed this check
    assert memory.consolidate_time_window().gists > 0  # links rows to gists after the memo read them
    second = memo.fetch(conn, BASE, reader="time_window")  # every row: 900 from the memo, the rest built
    expected = fetch_rows(conn, BASE)
    assert _fields(second) == _fields(expected)
    assert memo.reused == 900
    assert any(r.gist_id is not None for r in second[:900])  # the refreshed links, not the remembered None
    memory.close()


def test_memo_never_serves_a_row_that_no_longer_matches_what_is_stored(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    patrol_into(memory, clock, 400)
    conn = memory.store.reader()
    memo = RowMemo()
    rows = memo.fetch(conn, BASE, reader="entities")
    rows[5].stamp += 1.0  # as if the id now named another observation
    rows[6].text_id = -1
    again = memo.fetch(conn, BASE, reader="time_window")
    assert _fields(again) == _fields(fetch_rows(conn, BASE))
    assert again[5] is not rows[5] and again[6] is not rows[6]
    assert memo.reused == len(rows) - 2
    memory.close()


def test_memo_keeps_at_most_its_capacity_newest_first(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    patrol_into(memory, clock, 400)
    conn = memory.store.reader()
    memo = RowMemo(capacity=100)
    rows = memo.fetch(conn, BASE, limit=300, reader="entities")
    assert len(memo) == 100
    tail = (BASE + " AND (o.stamp > ? OR (o.stamp = ? AND o.id > ?))", [rows[199].stamp, rows[199].stamp, rows[199].id])
    assert _fields(memo.fetch(conn, *tail, limit=100, reader="time_window")) == _fields(rows[200:])
    assert memo.reused == 100  # the newest rows read were the ones kept
    memory.close()


def test_memo_reads_plainly_what_it_mostly_does_not_hold(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    patrol_into(memory, clock, 1000)
    conn = memory.store.reader()
    memo = RowMemo()
    rows = fetch_rows(conn, BASE)
    middle = (BASE + " AND o.stamp >= ?", [rows[400].stamp])
    memo.fetch(conn, *middle, limit=100, reader="entities")
    # starts before what is held, then mostly new rows: both answered by a plain read, still exact
    assert _fields(memo.fetch(conn, BASE, limit=300, reader="time_window")) == _fields(rows[:300])
    assert _fields(memo.fetch(conn, *middle, reader="time_window")) == _fields(fetch_rows(conn, *middle))
    assert memo.reused == 0
    memory.close()


def test_a_pass_never_reuses_its_own_rows_and_a_new_round_starts_over(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    patrol_into(memory, clock, 400)
    conn = memory.store.reader()
    memo = RowMemo()
    rows = memo.fetch(conn, BASE, limit=100, reader="entities")
    memo.fetch(conn, BASE, limit=100, reader="entities")
    assert memo.reused == 0 and len(memo) == 100
    assert _fields(memo.fetch(conn, BASE, limit=100, reader="time_window")) == _fields(rows)
    assert memo.reused == 100
    memo.fetch(conn, BASE, limit=50, reader="entities")  # the next round: only its own rows are held
    assert len(memo) == 50
    memory.close()


def _outcome(memory):
    conn = memory.store.reader()
    gists = conn.execute("SELECT text, cx, cy, radius, time_start, time_end, source_count FROM gists"
                         " ORDER BY id").fetchall()
    entities = conn.execute("SELECT name, x, y, sightings, first_seen, last_seen FROM entities ORDER BY id").fetchall()
    links = conn.execute("SELECT id, gist_id, tier FROM observations ORDER BY id").fetchall()
    return gists, entities, links


def test_passes_sharing_rows_store_what_passes_reading_alone_store(tmp_path, clock):
    outcomes = []
    start = clock.now
    for shared in (True, False):
        clock.now = start  # the same patrol at the same times for both
        memory = open_memory(tmp_path / f"m{shared}.db", clock, maintenance_process=False)  # the memo of this process
        patrol_into(memory, clock, 3000)
        age_past_window(memory, clock)
        service = memory._consolidation
        if not shared:
            service.time_window.rows = service.entities.rows = None
        memory.extract_entities()  # maintenance's order: entities, then the time window
        memory.consolidate_time_window()
        memory.extract_entities()
        if shared:
            assert service.rows.reused > 0
        outcomes.append(_outcome(memory))
        memory.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] and outcomes[0][1]
