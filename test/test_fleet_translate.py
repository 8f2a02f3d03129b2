"""Log statements -> fleet operations (emem_ros/fleet/translate.py), without a database.

The statements are the ones the memory really writes: they are taken from
the operation log of a memory that went through ingest, episodes, the
ledger, consolidation, archival and an import, so a rewording on the writing
side shows up here as an unsupported statement.
"""

from __future__ import annotations

import math

import pytest

from emem_ros.fleet.transform import RigidTransform, parse_transform
from emem_ros.fleet.translate import (
    ExperiencesByID,
    InsertRows,
    LogGapInRecord,
    ModelChangeInLog,
    TextEmbedding,
    Translator,
    TranslatorState,
    UnsupportedStatement,
    UpdateSQL,
)
from emem_ros.storage.oplog import OpLog
from test.support.fleet import robot_workload
from test.support.patrol import open_memory


def _state(**kw) -> TranslatorState:
    return TranslatorState("r1", lambda x, y, z: (x, y, z), lambda blob: blob, **kw)


def _all_records(path):
    log = OpLog(path.with_name(path.name + ".log"))
    try:
        return list(log.records())
    finally:
        log.close()


def test_every_statement_a_memory_writes_translates(tmp_path, clock):
    path = tmp_path / "m.db"
    memory = open_memory(path, clock, archive_after_seconds=0)
    robot_workload(memory, clock, n=600)
    clock.advance(5)
    assert memory.archive().observations > 0
    memory.close()
    from emem_ros.agent.transfer_export import export_file  # an import writes its own statements

    source = open_memory(tmp_path / "src.db", clock)
    robot_workload(source, clock, n=200, seed=3)
    source.close()
    export_file(tmp_path / "src.db", tmp_path / "src.jsonl.gz")
    other = open_memory(tmp_path / "other.db", clock)
    other.import_from(tmp_path / "src.jsonl.gz")
    other.close()
    for db_path in (path, tmp_path / "other.db"):
        state = _state()
        translator = Translator()
        kinds = set()
        for record in _all_records(db_path):
            for op in translator.translate(record.statements, state):
                kinds.add((type(op).__name__, getattr(op, "table", "")))
        assert ("InsertRows", "observations") in kinds and ("InsertRows", "texts") in kinds
        assert ("UpdateSQL", "") in kinds and ("ExperiencesByID", "") in kinds


def test_autoincrement_ids_are_counted_and_checked_against_the_fulltext_rows():
    translator, state = Translator(), _state(last_ids={"texts": 7})
    ops = translator.translate([
        ("INSERT INTO texts(text, embedding) VALUES(?, ?)", [["mug", b"v1"], ["cup", None]], True),
        ("INSERT INTO texts_fts(rowid, text) VALUES(?, ?)", [[8, "mug"], [9, "cup"]], True),
    ], state)
    assert ops[0].columns == ("text", "embedding", "id") and [r[2] for r in ops[0].rows] == [8, 9]
    assert state.last_ids["texts"] == 9
    with pytest.raises(LogGapInRecord, match="whole history"):
        translator.translate([
            ("INSERT INTO texts(text, embedding) VALUES(?, ?)", [["bowl", None]], True),
            ("INSERT INTO texts_fts(rowid, text) VALUES(?, ?)", [[42, "bowl"]], True),
        ], state)


def test_updates_become_robot_scoped_postgresql():
    translator, state = Translator(), _state()
    (op,) = translator.translate([(
        "UPDATE observations SET gist_id=?, tier=?, tier_since=? WHERE id IN (?,?,?) AND tier != 'archived'",
        [4, "long_term", 10.0, 1, 2, 3], False)], state)
    assert isinstance(op, UpdateSQL)
    assert op.sql == ('UPDATE fleet.observations SET "gist_id" = %s, "tier" = %s, "tier_since" = %s WHERE '
                      'robot_id = %s AND "id" = ANY(%s) AND "tier" <> \'archived\'')
    assert op.params == [(4, "long_term", 10.0, "r1", [1, 2, 3])]
    # Archival empties text and metadata on the robot; the fleet keeps them and only learns the tier.
    (op,) = translator.translate([(
        "UPDATE observations SET tier=?, tier_since=?, text_id=NULL, metadata=NULL WHERE id IN (?,?) AND tier=?",
        ["archived", 11.0, 5, 6, "long_term"], False)], state)
    assert op.sql == ('UPDATE fleet.observations SET "tier" = %s, "tier_since" = %s WHERE robot_id = %s AND '
                      '"id" = ANY(%s) AND "tier" = %s')
    assert op.params == [("archived", 11.0, "r1", [5, 6], "long_term")]
    (op,) = translator.translate([(
        "UPDATE episodes SET end=?, status=?, result=COALESCE(?, result) WHERE id=?", [5.0, "done", None, 2], False)],
        state)
    assert '"result" = COALESCE(%s, "result")' in op.sql and op.params == [(5.0, "done", None, "r1", 2)]


def test_entity_positions_are_placed_in_the_fleet_frame():
    transform = RigidTransform(10.0, 0.0, math.pi / 2)
    state = TranslatorState("r1", lambda x, y, z: (*transform.apply(x, y), z), lambda b: b)
    (op,) = Translator().translate([(
        "UPDATE entities SET x=?, y=?, z=?, spread=? WHERE id=?", [1.0, 0.0, 0.5, 0.2, 3], False)], state)
    assert "position = ST_MakePoint(%s::float8, %s::float8, %s::float8)" in op.sql
    spread, x, y, z, robot, entity = op.params[0]  # SET order: spread, then the placed point
    assert (round(x, 12), round(y, 12), z, spread, robot, entity) == (10.0, 1.0, 0.5, 0.2, "r1", 3)


def test_robot_bookkeeping_is_ignored_and_texts_keep_their_vectors():
    translator, state = Translator(), _state()
    ops = translator.translate([
        ("UPDATE texts SET refs = refs + ? WHERE id = ?", [[1, 2]], True),
        ("INSERT OR REPLACE INTO meta(key, value) VALUES('log_seq', ?)", ["3"], False),
        ("DELETE FROM texts WHERE id IN (?,?)", [1, 2], False),
        ("INSERT INTO places(text_id, layer, cx, cy, cz, count, sx, sy, sz, first_stamp, last_stamp, last_obs_id) "
         "VALUES(?,?,?,?,?,?,?,?,?,?,?,?)", [[1] * 12], True),
        ("UPDATE texts SET embedding=? WHERE id=? AND embedding IS NULL", [[b"v", 4]], True),
    ], state)
    assert len(ops) == 1 and isinstance(ops[0], TextEmbedding) and ops[0].only_if_missing
    assert ops[0].pairs == [(b"v", 4)]


def test_experiences_are_read_back_by_id():
    sql = ("INSERT INTO experiences(id, goal, action, result, reflection, success, tags, metadata, stamp, episode_id, "
           "x, y, z, supersedes) SELECT ?, json_extract(c, '$.goal'), json_extract(c, '$.action'), "
           "json_extract(c, '$.result'), json_extract(c, '$.reflection'), json_extract(c, '$.success'), "
           "json_extract(c, '$.tags'), NULLIF(json_extract(c, '$.metadata'), '{}'), json_extract(c, '$.stamp'), "
           "CAST(substr(json_extract(c, '$.episode'), 4) AS INTEGER), json_extract(c, '$.position[0]'), "
           "json_extract(c, '$.position[1]'), json_extract(c, '$.position[2]'), json_extract(c, '$.supersedes') "
           "FROM (SELECT ? AS c) WHERE true ON CONFLICT(id) DO NOTHING")
    (op,) = Translator().translate([(sql, ["abc", "{}"], False)], _state())
    assert isinstance(op, ExperiencesByID) and op.ids == ["abc"]


@pytest.mark.parametrize("sql, params", [
    ("UPDATE observations SET x = x + 1 WHERE id = ?", [1]),
    ("DELETE FROM observations WHERE id = ?", [1]),
    ("INSERT INTO robots(name) VALUES(?)", ["x"]),
    ("INSERT INTO observations(id, stamp) VALUES(?, 5)", [1]),
    ("UPDATE entities SET x=? WHERE id=?", [1.0, 2]),
    ("UPDATE observations SET tier=? WHERE stamp < (SELECT 1)", ["x"]),
])
def test_statements_of_unknown_shape_are_refused_by_name(sql, params):
    with pytest.raises(UnsupportedStatement) as caught:
        Translator().translate([(sql, params, False)], _state())
    assert sql.split()[0] in str(caught.value)


def test_a_model_change_in_the_log_stops_the_sync():
    state = _state(fleet_model="all-MiniLM-L6-v2", fleet_dim=384)
    meta = "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)"
    with pytest.raises(ModelChangeInLog, match="768-dimensional"):
        Translator().translate([(meta, [["reembed_target", '{"model": "nomic-embed-text", "dim": 768}']], True)],
                               state)
    with pytest.raises(ModelChangeInLog, match="'bge-small'"):
        Translator().translate([(meta, [["embedding_model", "bge-small"]], True)], state)
    assert Translator().translate([(meta, [["embedding_model", "all-MiniLM-L6-v2"]], True)], state) == []


def test_transforms_compose_and_invert():
    t = parse_transform(3.0, -1.0, yaw_degrees=30.0)
    back = t.inverse()
    x, y = back.apply(*t.apply(2.0, 5.0))
    assert (round(x, 12), round(y, 12)) == (2.0, 5.0)
    u = RigidTransform(-2.0, 4.0, 1.1)
    both = t.then(u)
    direct = u.apply(*t.apply(0.7, -0.3))
    assert [round(v, 12) for v in both.apply(0.7, -0.3)] == [round(v, 12) for v in direct]
    with pytest.raises(ValueError, match="finite"):
        RigidTransform(float("nan"), 0.0, 0.0)
    with pytest.raises(ValueError, match="radians or in degrees"):
        parse_transform(0, 0, yaw=1.0, yaw_degrees=2.0)


def test_insert_rows_keep_the_robot_columns():
    (op,) = Translator().translate([(
        "INSERT INTO observations(id, text_id, stamp, layer, source_type, x, y, z, frame_id, confidence, episode_id, "
        "tier, tier_since, value, metadata) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [[1, 2, 3.0, "scene", "perception", 1.0, 2.0, 0.0, "map", 1.0, None, "short_term", 3.0, None, None]], True)],
        _state())
    assert isinstance(op, InsertRows) and op.table == "observations" and op.columns[:3] == ("id", "text_id", "stamp")
