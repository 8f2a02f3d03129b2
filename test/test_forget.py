"""Forget: each selector, combinations, dry runs, derived rows, the ledger, the CLI and the audit trail."""

from __future__ import annotations

import json
import sqlite3

import pytest

from emem_ros.cli.main import main
from emem_ros.core.errors import InvalidInputError, UnknownNodeError
from emem_ros.forgetting import make_selector
from emem_ros.forgetting.forget import Forgetter


def _scene(memory, clock) -> dict[str, list[str]]:
    t0 = clock.now - 1000
    ids: dict[str, list[str]] = {}
    for i in range(10):
        ids.setdefault("jacket", []).append(memory.add("A man in a Red Jacket", x=1.0, y=1.0, timestamp=t0 + i,
                                                       layer_name="scene"))
        ids.setdefault("jackets", []).append(memory.add("red jackets on a rack", x=1.0, y=1.0, timestamp=t0 + i,
                                                        layer_name="scene"))
        ids.setdefault("mug", []).append(memory.add("red mug", x=8.0, y=8.0, timestamp=t0 + 100 + i,
                                                    layer_name="detections"))
        ids.setdefault("chair", []).append(memory.add("chair", x=1.2, y=0.9, timestamp=t0 + 200 + i,
                                                      layer_name="detections"))
    memory.flush()
    return ids


def _texts(memory) -> set[str]:
    return {r[0] for r in memory.store.reader().execute("SELECT text FROM texts")}


def test_match_is_exact_words_in_any_case_and_a_dry_run_changes_nothing(make_memory, clock):
    memory = make_memory()
    ids = _scene(memory, clock)
    dry = memory.forget(match="red JACKET", dry_run=True)
    assert sorted(dry.ids) == sorted(ids["jacket"]) and dry.dry_run
    assert memory.store.counts()["observations"] == 40
    report = memory.forget(match="red jacket")
    assert report.observations == 10 and report.texts == 1
    assert _texts(memory) == {"red jackets on a rack", "red mug", "chair"}
    assert "Red Jacket" not in memory.semantic_search("man in a red jacket", n_results=20)


@pytest.mark.parametrize("criteria, expect", [
    ({"layer": "detections"}, ("mug", "chair")),
    ({"x": 1.0, "y": 1.0, "radius": 0.5}, ("jacket", "jackets", "chair")),
    ({"x": 1.0, "y": 1.0, "radius": 0.5, "layer": "detections"}, ("chair",)),
    ({"match": "red", "layer": "detections"}, ("mug",)),
])
def test_selectors_combine_and_each_must_hold(make_memory, clock, criteria, expect):
    memory = make_memory()
    ids = _scene(memory, clock)
    report = memory.forget(**criteria, dry_run=True)
    assert sorted(report.ids) == sorted(i for name in expect for i in ids[name])


def test_time_range_and_ids(make_memory, clock):
    memory = make_memory()
    ids = _scene(memory, clock)
    t0 = clock.now - 1000
    assert sorted(memory.forget(since=t0 + 100, until=t0 + 109, dry_run=True).ids) == sorted(ids["mug"])
    report = memory.forget(ids=ids["chair"][:3])
    assert report.observations == 3 and report.texts == 0  # seven chairs still use the text
    assert "chair" in _texts(memory)
    assert memory.store.reader().execute("SELECT count FROM places WHERE text_id ="
                                         " (SELECT id FROM texts WHERE text='chair')").fetchone()[0] == 7


def test_by_meaning_selects_texts_above_the_similarity(make_memory, clock):
    memory = make_memory()
    ids = _scene(memory, clock)
    report = memory.forget(similar_to="red mug", min_similarity=0.99, dry_run=True)
    assert sorted(report.ids) == sorted(ids["mug"])


def test_empty_or_bad_selectors_are_refused_in_plain_words(make_memory, clock):
    memory = make_memory()
    _scene(memory, clock)
    with pytest.raises(InvalidInputError, match="say what to forget"):
        memory.forget()
    with pytest.raises(InvalidInputError, match="radius"):
        memory.forget(x=1.0, y=2.0)
    with pytest.raises(InvalidInputError, match="observation ids"):
        memory.forget(ids=["ep-1"])
    with pytest.raises(UnknownNodeError):
        memory.forget(entity="ent-999")
    assert memory.store.counts()["observations"] == 40


def test_gists_are_resummarised_or_removed_and_entities_lose_their_last_sighting(make_memory, clock):
    memory = make_memory(consolidation_window=60.0, consolidation_min_samples=2)
    _scene(memory, clock)
    clock.advance(120)
    memory.consolidate_time_window()
    memory.extract_entities(final=True)
    conn = memory.store.reader()
    assert any("Red Jacket" in t for (t,) in conn.execute("SELECT text FROM gists"))
    mugs = conn.execute("SELECT id FROM entities WHERE name='red mug'").fetchall()
    assert mugs
    report = memory.forget(match="red jacket")
    assert report.gists_resummarised + report.gists_removed >= 1
    assert not any("jacket" in t.lower() and "jackets" not in t.lower() for (t,) in conn.execute("SELECT text FROM gists"))
    memory.forget(entity="red mug")
    assert conn.execute("SELECT COUNT(*) FROM entities WHERE name='red mug'").fetchone()[0] == 0
    assert "red mug" not in _texts(memory)
    assert conn.execute("SELECT COUNT(*) FROM edges WHERE src IN (%s)" % ",".join(f"'ent-{m[0]}'" for m in mugs)
                        ).fetchone()[0] == 0


def test_forget_works_in_short_transactions(make_memory, clock):
    memory = make_memory()
    for i in range(1200):
        memory.add(f"note {i % 7}", x=float(i % 10), y=0.0, timestamp=clock.now - 2000 + i, layer_name="notes")
    memory.flush()
    report = Forgetter(memory.engine, None, batch=100).forget(make_selector(layer="notes"))
    assert report.observations == 1200 and report.transactions >= 12


def test_a_redacted_experience_keeps_its_id_and_the_ledger_stays_immutable(make_memory, clock):
    memory = make_memory()
    first = memory.record_experience("greet the man in the red jacket", result="he waved")
    fix = memory.record_experience("greet the visitor", result="ok", supersedes=first)
    report = memory.forget(match="red jacket")
    assert report.experiences_redacted == 1
    conn = memory.store.reader()
    goal, metadata = conn.execute("SELECT goal, metadata FROM experiences WHERE id=?", (first,)).fetchone()
    assert goal == "[redacted]" and json.loads(metadata)["redacted"]["content_sha256"] == first
    assert conn.execute("SELECT supersedes FROM experiences WHERE id=?", (fix,)).fetchone()[0] == first
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        with memory.store.write() as wconn:
            wconn.execute("UPDATE experiences SET goal='changed' WHERE id=?", (fix,))
    found = memory.ledger.find("red jacket", include_superseded=True)
    assert found and all("jacket" not in e.goal for e, _ in found)


def test_cli_forget_dry_run_forget_and_forget_log(make_memory, clock, tmp_path, capsys):
    memory = make_memory()
    ids = _scene(memory, clock)
    memory.close()
    db = str(tmp_path / "memory.db")
    assert main(["forget", db, "--match", "red jacket", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would forget 10" in out and ids["jacket"][0] in out
    assert main(["forget", db, "--match", "red jacket", "--reason", "asked"]) == 0
    assert "forgot 10" in capsys.readouterr().out
    assert main(["forget-log", db]) == 0
    out = capsys.readouterr().out
    assert "asked" in out and "[withheld]" in out and "jacket" not in out.lower()
    assert main(["forget-log", db, "--json"]) == 0
    entry = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert entry["who"].startswith("cli:") and sorted(entry["ids"]) == sorted(ids["jacket"])


def test_retention_forgets_old_layers_and_old_people_in_maintenance(make_memory, clock):
    memory = make_memory(retention_max_age={"scene": 3600.0},
                         retention_rules=[{"match": "person|man|woman", "max_age": 600.0}])
    now = clock.now
    old_scene = memory.add("a kitchen with a table", x=1.0, y=1.0, timestamp=now - 7200, layer_name="scene")
    new_scene = memory.add("a kitchen with a sofa", x=1.0, y=1.0, timestamp=now - 60, layer_name="scene")
    old_man = memory.add("a man", x=2.0, y=2.0, timestamp=now - 1200, layer_name="detections")
    new_man = memory.add("a man", x=2.0, y=2.0, timestamp=now - 60, layer_name="detections")
    woman = memory.add("a woman waving", x=2.0, y=2.0, timestamp=now - 900, layer_name="detections")
    mug = memory.add("a mug", x=3.0, y=3.0, timestamp=now - 7200, layer_name="detections")
    memory.record_experience("helped a woman with the door", result="ok", timestamp=now - 1000)
    memory.record_experience("helped a man just now", result="ok")
    memory.flush()
    report = memory.maintenance().retention
    assert sorted(report.ids) == sorted([old_scene, old_man, woman]) and report.experiences_redacted == 1
    left = {r[0] for r in memory.store.reader().execute("SELECT id FROM observations")}
    assert {f"obs-{i}" for i in left} == {new_scene, new_man, mug}
    assert memory.maintenance().retention.forget_id is None  # nothing more to forget: no audit row
    entry = memory.forget_log()[-1]
    assert (entry.kind, entry.who) == ("retention", "retention") and "woman" not in json.dumps(entry.selector)


def test_bad_retention_settings_are_refused(make_memory):
    with pytest.raises(InvalidInputError, match="retention_rules"):
        make_memory(retention_rules=[{"words": "man", "max_age": 1}])
    with pytest.raises(InvalidInputError, match="retention_max_age"):
        make_memory(retention_max_age={"scene": -5})


def test_a_file_from_before_secure_delete_is_vacuumed_once(make_memory, clock):
    memory = make_memory()
    _scene(memory, clock)
    assert memory.store.meta("secure_delete") == "from_creation"
    with memory.store.write() as conn:  # as a file migrated from schema v3 looks
        conn.execute("DELETE FROM meta WHERE key='secure_delete'")
    assert memory.forget(match="red jacket").vacuumed
    assert memory.store.meta("secure_delete") == "vacuumed"
    assert not memory.forget(match="red mug").vacuumed


def test_the_log_restarts_after_a_base_keeping_the_records_after_it(tmp_path):
    from emem_ros.storage.oplog import OpLog

    log = OpLog(tmp_path / "x.log", segment_bytes=64)
    for n in range(1, 8):
        log.append([("INSERT INTO meta(key, value) VALUES(?, ?)", [f"k{n}", "secret" if n < 5 else "kept"], False)])
    assert len(log.segments()) > 2
    assert log.restart_after(5) == 2
    assert [r.seq for r in log.records()] == [6, 7] and len(log.segments()) == 1
    assert log.append([("INSERT INTO meta(key, value) VALUES(?, ?)", ["k8", "x"], False)])[0] == 8
    log.close()
    assert b"secret" not in b"".join(p.read_bytes() for _, p in OpLog(tmp_path / "x.log").segments())
    assert [r.seq for r in OpLog(tmp_path / "x.log").records()] == [6, 7, 8]


def test_copies_a_past_rebuild_left_are_deleted(make_memory, clock, tmp_path):
    memory = make_memory()
    _scene(memory, clock)
    stale = tmp_path / "memory.db.before-rebuild"
    stale.write_bytes(b"SQLite format 3\x00 ... A man in a Red Jacket ...")
    report = memory.forget(match="red jacket")
    assert not stale.exists() and report.stale_copies == ["memory.db.before-rebuild"]


def test_words_with_other_criteria_select_the_rows_in_all_of_them(make_memory, clock):
    memory = make_memory()
    ids = _scene(memory, clock)
    t0 = clock.now - 1000
    assert memory.forget(match="red jacket", layer="detections", dry_run=True).ids == []
    assert memory.forget(match="red jacket", ids=ids["jacket"][:2] + ids["mug"][:2], dry_run=True).ids == sorted(
        ids["jacket"][:2])
    assert sorted(memory.forget(match="red jacket", until=t0 + 4, dry_run=True).ids) == sorted(ids["jacket"][:5])
