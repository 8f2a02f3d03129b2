"""Writers hold the lock briefly: holds are timed per caller, and long maintenance passes commit in parts.

Crash safety of the R-tree tombstones lives here too: the places index is a
cache of SQLite, so a place tombstoned and the process killed is neither
lost nor resurrected on the next open.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from test.support.patrol import age_past_window, open_memory

ROOT = Path(__file__).resolve().parents[1]


def _fill(memory, clock, n: int, labels: int = 60) -> None:
    t0 = clock.now - 3 * 86400
    for i in range(n):
        memory.add(f"thing {i % labels}", x=(i % 97) * 0.37, y=(i % 89) * 0.41, timestamp=t0 + i,
                   layer_name="detections")
    memory.flush()


def _sqlite_places(memory) -> list[int]:
    return [r[0] for r in memory.store.reader().execute("SELECT id FROM places ORDER BY id")]


def test_holds_are_timed_per_caller_and_shown_in_the_stats(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    try:
        _fill(memory, clock, 200)
        memory.set_meta("x", "1") if hasattr(memory, "set_meta") else memory.store.set_meta("x", "1")
        holds = memory.writer_lock_stats["holds"]
        assert holds["ingest_write.write_observations"]["count"] >= 1
        assert holds["store.set_meta"]["count"] == 1
        assert set(memory.stats) >= {"writer_lock_max_ms", "writer_lock_p99_ms"}
        with memory.store.write_lock:  # re-entrant holds count once, under the outermost caller
            with memory.store.write_lock:
                pass
        assert memory.writer_lock_stats["holds"][f"{__name__.rsplit('.', 1)[-1]}."
                                                 "test_holds_are_timed_per_caller_and_shown_in_the_stats"][
            "count"] == 1
        memory.store.write_lock.reset()
        assert memory.writer_lock_stats["holds"] == {}
    finally:
        memory.close()


def test_a_long_archival_pass_commits_in_several_short_transactions(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, archive_after_seconds=0)
    try:
        _fill(memory, clock, 3000)
        age_past_window(memory, clock)
        consolidated = memory.consolidate_time_window()
        assert consolidated.observations > 2500  # promoted to long_term (a few noise points stay short-term)
        clock.now += 1
        commits = []
        memory.store.commits.subscribe(lambda c: commits.append(c) if c.reshaped else None)
        report = memory.archive()
        assert report.observations == consolidated.observations
        assert report.transactions >= 2 and len(commits) == report.transactions  # one 5,000-row batch before
        assert _sqlite_places(memory) == memory.store.places.ids().tolist()
    finally:
        memory.close()


def test_gists_promoting_many_observations_commit_in_several_transactions(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    try:
        _fill(memory, clock, 6000, labels=10)
        age_past_window(memory, clock)
        inserts = []

        def count(commit) -> None:
            if commit.statements and any(sql.startswith("INSERT INTO gists(") for sql, _, _ in commit.statements):
                inserts.append(commit)

        memory.store.commits.subscribe(count)
        report = memory.consolidate_time_window()
        gists = memory.store.reader().execute("SELECT COUNT(*) FROM gists").fetchone()[0]
        assert report.observations > 5000 and gists >= 2
        assert len(inserts) >= 2  # 32 gists and every promotion in one transaction before
    finally:
        memory.close()


def _answers(memory) -> list[str]:
    out = []
    for x, y in ((3.0, 4.0), (10.0, 12.0), (20.0, 30.0)):
        out.append(str(memory.spatial_query(x=x, y=y, radius=4.0)))
    out.append(str(memory.locate("thing 7")))
    out.append(str(memory.locate("thing 44")))
    out.append(str(memory.get_current_context()))
    return out


def test_answers_are_the_same_with_tombstones_pending_compacted_and_reopened(tmp_path, clock):
    path = tmp_path / "m.db"
    memory = open_memory(path, clock, query_cache_enabled=False)
    _fill(memory, clock, 2000)
    memory.forget(match="thing 7", reason="test")
    memory.forget(match="thing 13", reason="test")
    assert memory.store.places.tombstones > 0
    pending = _answers(memory)
    assert "thing 7" not in " ".join(pending[:3])
    memory.store.places.compact(wait=True)
    assert memory.store.places.tombstones == 0
    assert _answers(memory) == pending
    memory.close()
    again = open_memory(path, clock, query_cache_enabled=False)
    try:
        assert _answers(again) == pending
    finally:
        again.close()


CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from test.support.patrol import open_memory
    class Clock:
        now = 1_763_000_000.0
        def __call__(self):
            return self.now
    clock = Clock()
    memory = open_memory({path!r}, clock)
    for i in range(1500):
        memory.add(f"thing {{i % 60}}", x=(i % 97) * 0.37, y=(i % 89) * 0.41, timestamp=clock.now - 5000 + i,
                   layer_name="detections")
    memory.flush()
    memory.save()  # a snapshot holding every place
    memory.forget(match="thing 7", reason="test")  # its places: tombstoned in the R-tree, gone from SQLite
    if {save_after!r}:
        memory.save()  # a snapshot taken with tombstones pending
    memory.add("thing 99", x=1.0, y=2.0, timestamp=clock.now, layer_name="detections")
    memory.flush()  # a place stored after the tombstones
    assert memory.store.places.tombstones > 0
    print(len(memory.store.places), flush=True)
    os._exit(0)  # killed: no close, no compaction, no final snapshot
""")


def test_a_tombstoned_place_is_neither_lost_nor_resurrected_when_the_process_dies(tmp_path, clock):
    for save_after in (False, True):
        path = tmp_path / f"m{int(save_after)}.db"
        child = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), path=str(path),
                                                                   save_after=save_after)],
                               capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert child.returncode == 0, child.stderr
        live_before = int(child.stdout.split()[-1])
        memory = open_memory(path, clock)
        try:
            held = memory.store.places.ids().tolist()
            stored = _sqlite_places(memory)
            assert held == stored and len(held) == live_before  # none lost, none back from the dead
            gone = memory.store.reader().execute(
                "SELECT COUNT(*) FROM places p JOIN texts t ON t.id = p.text_id WHERE t.text = 'thing 7'").fetchone()
            assert gone[0] == 0
            box = (-1e6, -1e6, -1e6, 1e6, 1e6, 1e6)
            assert sorted(memory.store.places.intersection(box).tolist()) == stored
            assert memory.store.places.count(box) == len(stored)
            assert np.isin(memory.store.places.nearest((1.0, 2.0, 0.0, 1.0, 2.0, 0.0), 5), stored).all()
        finally:
            memory.close()


def test_places_shrunk_by_a_forget_match_the_observations_left(tmp_path, clock):
    """Places keep count, sums, first/last stamp and newest id exact, whether or not a boundary row went."""
    memory = open_memory(tmp_path / "m.db", clock)
    try:
        _fill(memory, clock, 3000, labels=5)
        conn = memory.store.reader()
        ids = [r[0] for r in conn.execute("SELECT id FROM observations ORDER BY id")]
        memory.forget(ids=[f"obs-{i}" for i in ids[::7]] + [f"obs-{i}" for i in ids[-40:]], reason="test")
        size = memory.store.cell_size
        expected: dict[tuple, list] = {}
        for text_id, layer, x, y, z, stamp, obs_id in conn.execute(
                "SELECT text_id, layer, x, y, z, stamp, id FROM observations"):
            key = (text_id, layer, int(np.floor(x / size)), int(np.floor(y / size)), int(np.floor((z or 0.0) / size)))
            cell = expected.setdefault(key, [0, 0.0, 0.0, 0.0, stamp, stamp, obs_id])
            cell[0] += 1
            cell[1] += x
            cell[2] += y
            cell[3] += z or 0.0
            cell[4], cell[5], cell[6] = min(cell[4], stamp), max(cell[5], stamp), max(cell[6], obs_id)
        stored = {tuple(r[:5]): list(r[5:]) for r in conn.execute(
            "SELECT text_id, layer, cx, cy, cz, count, sx, sy, sz, first_stamp, last_stamp, last_obs_id FROM places")}
        assert stored.keys() == expected.keys()
        for key, cell in expected.items():
            assert stored[key][0] == cell[0] and stored[key][4:] == cell[4:]
            assert np.allclose(stored[key][1:4], cell[1:4])
    finally:
        memory.close()
