"""The fleet sync against a real PostgreSQL 15 (PostGIS + pgvector): what the robot holds, the fleet holds.

Every test compares the fleet store with the robot's own file, table by table
(row counts and content hashes), after outages, crashes, re-sends, pruning and
with the robot's memory open in another process.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import threading
import time

import pytest

psycopg = pytest.importorskip("psycopg")

from emem_ros.fleet import db  # noqa: E402
from emem_ros.fleet.errors import FleetError, FleetUnavailableError  # noqa: E402
from emem_ros.fleet.robots import add_robot  # noqa: E402
from emem_ros.fleet.schema import init_fleet, list_partitions, open_fleet  # noqa: E402
from emem_ros.fleet.sync import FleetSync, sync_memory  # noqa: E402
from emem_ros.fleet.transform import IDENTITY, RigidTransform  # noqa: E402
from emem_ros.storage.oplog import read_hold  # noqa: E402
from test.support.fleet import (  # noqa: E402
    expected_summaries,
    first_difference,
    fleet_rows,
    fleet_summaries,
    robot_rows,
    robot_workload,
    same_summary,
    summary,
)
from test.support.patrol import open_memory  # noqa: E402

DIM = 384  # HashingEmbeddingProvider's default


def _init(url: str) -> None:
    with db.connect(url) as conn:
        assert init_fleet(conn, dim=DIM)


def _assert_same(path, url: str, robot_id: str, transform: RigidTransform = IDENTITY) -> dict:
    robot = robot_rows(path, transform)
    with db.connect(url) as conn:
        fleet = fleet_rows(conn, robot_id, exact=transform.is_identity)
    assert summary(fleet) == summary(robot), first_difference(robot, fleet)
    with db.connect(url) as conn:  # the summaries count exactly the rows the store holds
        have, want = fleet_summaries(conn, robot_id), expected_summaries(fleet)
    for table in ("sightings", "places"):
        wrong = sorted(k for k in set(have[table]) | set(want[table])
                       if not same_summary(have[table].get(k), want[table].get(k)))
        assert not wrong, f"{table}: {[(k, have[table].get(k), want[table].get(k)) for k in wrong[:3]]}"
    return summary(robot)


@pytest.fixture
def fleet(fleet_url):
    _init(fleet_url)
    return fleet_url


def test_a_whole_robot_memory_arrives_row_for_row(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock)
    robot_workload(memory, clock, n=800)
    report = sync_memory(path, fleet, "robot1")
    assert report.caught_up and report.records > 0
    memory.close()  # close writes nothing new the fleet lacks but the final flush: sync that too
    sync_memory(path, fleet, "robot1")
    counts = _assert_same(path, fleet, "robot1")
    assert counts["observations"][0] > 700 and counts["gists"][0] > 0 and counts["entities"][0] > 0
    assert counts["experiences"][0] == 1 and counts["episodes"][0] == 1 and counts["edges"][0] > 0


def test_sync_runs_while_the_memory_is_open_and_written(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock)
    stop = threading.Event()

    def robot():
        i = 0
        while not stop.is_set():
            memory.add(f"box {i % 30}", x=i * 0.01, y=1.0, timestamp=clock.now + i, layer_name="detections")
            if i % 50 == 0:
                memory.flush()
            i += 1

    writer = threading.Thread(target=robot)
    writer.start()
    try:
        reports = []
        for _ in range(5):  # each in another process, as on a robot: `emem sync` beside the node
            out = subprocess.run([sys.executable, "-m", "emem_ros.cli.main", "sync", str(path), "--to", fleet,
                                  "--robot-id", "r1"], capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            reports.append(out.stdout)
            time.sleep(0.1)
    finally:
        stop.set()
        writer.join()
    memory.close()
    sync_memory(path, fleet, "r1")
    _assert_same(path, fleet, "r1")
    assert any("->" in r for r in reports)


def test_postgres_stopped_mid_sync_then_back_loses_and_doubles_nothing(tmp_path, clock, own_postgres):
    url = own_postgres.create_database()
    _init(url)
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, flush_batch_size=64)
    robot_workload(memory, clock, n=1500)
    sync = FleetSync(path, url, "r1", batch_records=3)
    commits = []
    original = sync._advance

    def advance_then_cut(conn, seq, crc, last_ids):
        original(conn, seq, crc, last_ids)
        commits.append(seq)
        if len(commits) == 4:
            own_postgres.stop("immediate")  # the server dies before this batch commits

    sync._advance = advance_then_cut
    with pytest.raises(FleetUnavailableError, match="resumes where it stopped"):
        sync.run()
    sync._advance = original
    with pytest.raises(FleetUnavailableError, match="cannot reach the fleet store"):
        sync.run()  # still down: a clear error, nothing else
    for i in range(300):  # the robot keeps working offline
        memory.add(f"crate {i % 7}", x=2.0, y=float(i % 5), timestamp=clock.now + i, layer_name="detections")
    memory.flush()
    memory.extract_entities(final=True)
    own_postgres.start()
    report = sync.run()
    assert report.start_seq == commits[2]  # the fourth batch was lost with the server and is shipped again
    assert report.caught_up
    memory.close()
    sync.run()
    sync.close()
    _assert_same(path, url, "r1")


def test_a_crash_between_apply_and_ack_resumes_at_the_right_record(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, flush_batch_size=50)
    robot_workload(memory, clock, n=900)
    memory.close()
    sync = FleetSync(path, fleet, "r1", batch_records=4)

    class Crash(BaseException):
        pass

    def crash_before_commit(conn, seq, crc, last_ids):
        raise Crash()

    original = sync._advance
    sync._advance = crash_before_commit  # applied, not yet recorded: the transaction must roll back whole
    with pytest.raises(Crash):
        sync.run()
    sync._rollback()
    sync._advance = original
    with db.connect(fleet) as conn:
        assert conn.execute("SELECT count(*) FROM fleet.observations").fetchone()[0] == 0
    original_hold = sync.local.hold
    calls = []

    def crash_after_commit(name, seq):  # committed in PostgreSQL, the robot never heard back
        calls.append(seq)
        if len(calls) == 2:
            raise Crash()
        original_hold(name, seq)

    sync.local.hold = crash_after_commit
    with pytest.raises(Crash):
        sync.run()
    assert read_hold(sync.local.log_dir, sync.hold_name) == calls[0]
    sync.local.hold = original_hold
    again = FleetSync(path, fleet, "r1", batch_records=4)  # a fresh process
    report = again.run()
    assert report.start_seq == calls[1]  # the fleet's own record of what it applied, not the robot's hold
    assert read_hold(again.local.log_dir, again.hold_name) == report.applied_seq
    again.close()
    sync.close()
    _assert_same(path, fleet, "r1")


def test_a_killed_sync_process_resumes_without_duplicates(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, flush_batch_size=20)
    robot_workload(memory, clock, n=3000)
    memory.close()
    command = [sys.executable, "-m", "emem_ros.cli.main", "sync", str(path), "--to", fleet, "--robot-id", "r1",
               "--batch-records", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    with db.connect(fleet) as conn:
        while time.monotonic() < deadline:
            applied = conn.execute("SELECT coalesce(max(applied_seq), 0) FROM fleet.robots").fetchone()[0]
            conn.rollback()
            if applied >= 10 or process.poll() is not None:
                break
            time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    report = sync_memory(path, fleet, "r1")
    assert report.caught_up
    _assert_same(path, fleet, "r1")


def test_records_already_applied_are_never_applied_again(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock)
    robot_workload(memory, clock, n=500)
    memory.close()
    sync_memory(path, fleet, "r1")
    before = _assert_same(path, fleet, "r1")
    # Re-send every segment from the start: the rows are keyed by content and the cursor skips them.
    sync = FleetSync(path, fleet, "r1")
    sync._records = sync.local.records(0, 1 << 62)
    sync._after = 0
    assert sync.run().records == 0
    sync.close()
    from emem_ros.fleet.apply import FleetWriter, VectorCodec
    from emem_ros.fleet.local import LocalMemory
    from emem_ros.fleet.schema import open_fleet
    from emem_ros.fleet.translate import InsertRows, Translator, TranslatorState

    # And the keyed inserts alone, replayed past the cursor, add no row either.
    local = LocalMemory(path)
    with db.connect(fleet) as conn:
        info = open_fleet(conn, fleet)
        vectors = VectorCodec(conn, info.dim)
        state = TranslatorState("r1", lambda x, y, z: (x, y, z), vectors, fleet_dim=info.dim)
        writer = FleetWriter(conn, state, RigidTransform(), info, vectors,
                             lambda ids: local.experience_rows(ids, ("n",)))
        translator = Translator()
        for record in local.records(0, 1 << 62):
            ops = [op for op in translator.translate(record.statements, state)
                   if type(op) is InsertRows and op.table in ("texts", "observations", "entities", "gists")]
            writer.apply(ops)
        writer.flush()
        conn.commit()
        assert writer.counts.observations == 0 and writer.counts.texts == 0
    local.close()
    assert _assert_same(path, fleet, "r1") == before


def test_pruning_keeps_what_the_fleet_has_not_applied(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, log_segment_bytes=4096, log_keep_segments=1)
    robot_workload(memory, clock, n=400)
    sync = FleetSync(path, fleet, "r1")
    sync.run()
    applied = sync.local.held(sync.hold_name)
    for i in range(600):  # offline: the fleet has not seen these
        memory.add(f"pallet {i}", x=1.0, y=float(i % 9), timestamp=clock.now + i, layer_name="detections")
        if i % 40 == 0:
            memory.flush()
    memory.flush()
    segments_before = len(memory.store.oplog.segments())
    memory.store.checkpoint_log()  # retention: keep one segment behind the checkpoint ...
    kept = memory.store.oplog.segments()
    assert len(kept) < segments_before  # ... it did prune ...
    assert kept[0][0] <= applied + 1  # ... but nothing after what the fleet applied
    report = sync.run()
    assert report.snapshot_seq is None and report.caught_up
    memory.close()
    sync.run()
    sync.close()
    _assert_same(path, fleet, "r1")


def test_a_log_pruned_before_any_sync_ships_from_the_checkpoint_copy(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, log_segment_bytes=4096, log_keep_segments=1)
    robot_workload(memory, clock, n=500)
    memory.store.checkpoint_log()
    assert memory.store.oplog.segments()[0][0] > 1  # the start of the log is gone
    for i in range(200):
        memory.add(f"crate {i}", x=3.0, y=float(i % 4), timestamp=clock.now + i, layer_name="detections")
    memory.flush()
    report = sync_memory(path, fleet, "r1")
    assert report.snapshot_seq is not None and report.caught_up
    memory.close()
    sync_memory(path, fleet, "r1")
    _assert_same(path, fleet, "r1")


def test_positions_land_in_the_fleet_frame_and_move_with_the_transform(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock)
    robot_workload(memory, clock, n=300)
    memory.close()
    placed = RigidTransform(10.0, -4.0, math.pi / 2)
    with db.connect(fleet) as conn:
        assert add_robot(conn, "r2", placed) == (True, 0)
    sync_memory(path, fleet, "r2")
    _assert_same(path, fleet, "r2", placed)
    with db.connect(fleet) as conn:  # a robot's own (1, 0) is (10, -3) in the fleet frame
        x, y = conn.execute("SELECT ST_X(p), ST_Y(p) FROM (SELECT ST_Affine(ST_MakePoint(1, 0, 0), %s, %s, %s, %s, "
                            "%s, %s) p) q", placed.affine_params()).fetchone()
        assert (round(x, 9), round(y, 9)) == (10.0, -3.0)
        moved = RigidTransform(-2.0, 1.0, -0.3)
        added, changed = add_robot(conn, "r2", moved)
        assert not added and changed > 300
    _assert_same(path, fleet, "r2", moved)


def test_another_memory_under_a_known_robot_id_is_refused(tmp_path, clock, fleet):
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    for path, word in ((first, "apple"), (second, "pear")):
        memory = open_memory(path, clock)
        for i in range(50):
            memory.add(f"{word} {i}", x=1.0, y=2.0, timestamp=clock.now + i, layer_name="detections")
        memory.close()
    sync_memory(first, fleet, "r1")
    with pytest.raises(FleetError, match="another memory"):
        sync_memory(second, fleet, "r1")


def test_observations_are_partitioned_by_time_and_old_partitions_detach(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock)
    day = 86400.0
    start = 1_742_000_000.0
    for week in range(4):
        for i in range(25):
            memory.add(f"shelf {i % 5}", x=1.0, y=1.0, timestamp=start + week * 7 * day + i, layer_name="detections")
    memory.close()
    sync_memory(path, fleet, "r1")
    with db.connect(fleet) as conn:
        parts = list_partitions(conn)
        assert len(parts) >= 4
        assert conn.execute("SELECT count(*) FROM fleet.observations").fetchone()[0] == 100
        from emem_ros.fleet.schema import detach_partitions

        cut = parts[1][2]  # everything up to the end of the second partition
        gone = detach_partitions(conn, cut)
        assert gone == [p[0] for p in parts[:2]]
        left = conn.execute("SELECT count(*) FROM fleet.observations").fetchone()[0]
        assert 0 < left < 100
        assert conn.execute("SELECT min(stamp) FROM fleet.observations").fetchone()[0] >= cut
        # detached, not dropped: still a table of its own
        assert conn.execute(f"SELECT count(*) FROM fleet.{parts[0][0]}").fetchone()[0] > 0
        have, want = fleet_summaries(conn, "r1"), expected_summaries(fleet_rows(conn, "r1"))  # only what stays
        assert sum(n for n, *_ in have["sightings"].values()) == left
        assert have.keys() == want.keys() and all(
            same_summary(have[t].get(k), want[t].get(k)) for t in have for k in set(have[t]) | set(want[t]))


def test_a_statement_the_sync_does_not_know_stops_it_at_its_record(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock)
    for i in range(30):
        memory.add(f"bin {i}", x=1.0, y=2.0, timestamp=clock.now + i, layer_name="detections")
    memory.flush()
    with memory.store.write() as conn:  # a writer the fleet does not know (a future version, say)
        conn.execute("UPDATE observations SET x = x + 1 WHERE id = ?", (1,))
    bad = memory.store.oplog.last_seq
    memory.add("after", x=0.0, y=0.0, timestamp=clock.now + 99, layer_name="detections")
    memory.close()
    with pytest.raises(FleetError, match=f"seq {bad}.*SET clause|seq {bad}"):
        sync_memory(path, fleet, "r1", batch_records=1)
    with db.connect(fleet) as conn:
        assert conn.execute("SELECT applied_seq FROM fleet.robots").fetchone()[0] == bad - 1
        assert conn.execute("SELECT count(*) FROM fleet.observations").fetchone()[0] == 30


def test_archived_raw_text_stays_in_the_fleet(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, archive_after_seconds=0)
    robot_workload(memory, clock, n=400)
    texts_before = dict(memory.store.reader().execute(
        "SELECT o.id, t.text FROM observations o JOIN texts t ON t.id = o.text_id"))
    clock.advance(10)
    assert memory.archive().observations > 0
    memory.close()
    sync_memory(path, fleet, "r1")  # the archival happened before the fleet ever saw the rows
    robot = robot_rows(path, with_archived_text=texts_before)
    with db.connect(fleet) as conn:
        fleet_side = fleet_rows(conn, "r1", archived_marker=True)
        archived = conn.execute("SELECT count(*) FROM fleet.observations WHERE tier = 'archived' "
                                "AND text_id IS NOT NULL").fetchone()[0]
    assert archived > 0
    robot.pop("texts"), fleet_side.pop("texts")  # the robot dropped the archived texts; the fleet keeps them
    assert summary(fleet_side) == summary(robot), first_difference(robot, fleet_side)


def test_a_memory_of_another_model_is_refused(tmp_path, clock, fleet_url):
    with db.connect(fleet_url) as conn:
        init_fleet(conn, dim=DIM, model="all-MiniLM-L6-v2")
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock)
    memory.add("cup", x=0.0, y=0.0)
    memory.close()
    with pytest.raises(FleetError, match="model"):
        sync_memory(path, fleet_url, "r1")


def test_a_memory_without_log_is_refused_in_plain_words(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, log_enabled=False)
    memory.add("cup", x=0.0, y=0.0)
    memory.close()
    with pytest.raises(FleetError, match="log_enabled"):
        sync_memory(path, fleet, "r1")


def test_an_unreachable_fleet_is_a_clear_error(tmp_path, clock):
    from test.support.postgres import free_port

    path = tmp_path / "robot.db"
    memory = open_memory(path, clock)
    memory.add("cup", x=0.0, y=0.0)
    memory.close()
    with pytest.raises(FleetUnavailableError, match="cannot reach the fleet store at postgresql://u:\\*\\*\\*@"):
        sync_memory(path, f"postgresql://u:secret@127.0.0.1:{free_port()}/fleet", "r1")


def test_emem_fleet_and_sync_commands(tmp_path, clock, fleet_url, capsys):
    from emem_ros.cli.main import main

    assert main(["fleet", "init", fleet_url, "--dim", str(DIM)]) == 0
    assert "created the fleet store" in capsys.readouterr().out
    assert main(["fleet", "init", fleet_url, "--dim", str(DIM)]) == 0
    assert "already exists" in capsys.readouterr().out
    assert main(["fleet", "init", fleet_url, "--dim", "128"]) == 2
    assert "384-dimensional" in capsys.readouterr().err
    assert main(["fleet", "add-robot", fleet_url, "robot2", "--x", "5", "--yaw-deg", "90"]) == 0
    assert "added robot robot2" in capsys.readouterr().out
    assert main(["fleet", "add-robot", fleet_url, "bad id!"]) == 2
    assert "robot id" in capsys.readouterr().err
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock)
    for i in range(20):
        memory.add(f"tote {i}", x=1.0, y=0.0, timestamp=clock.now + i, layer_name="detections")
    memory.close()
    assert main(["sync", str(path), "--to", fleet_url, "--robot-id", "robot2"]) == 0
    assert "20 observations" in capsys.readouterr().out
    assert main(["sync", str(path), "--to", fleet_url, "--robot-id", "robot2"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["fleet", "robots", fleet_url]) == 0
    listing = capsys.readouterr().out
    assert "robot2" in listing and "1.571" in listing and " 20 " in listing
    with db.connect(fleet_url) as conn:
        x, y = conn.execute("SELECT ST_X(position), ST_Y(position) FROM fleet.observations LIMIT 1").fetchone()
    assert (round(x, 9), round(y, 9)) == (5.0, 1.0)
    assert main(["fleet", "remove-robot", fleet_url, "robot2"]) == 0
    assert "20 observation" in capsys.readouterr().out
    assert main(["fleet", "detach", fleet_url, "--before", "2000-01-01"]) == 0
    assert "0 partition" in capsys.readouterr().out


def test_init_creates_the_indexes_the_fleet_queries_need(fleet):
    with db.connect(fleet) as conn:
        indexes = dict(conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'fleet'").fetchall())
        kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = 'fleet.observations'::regclass").fetchone()[0]
        meta = dict(conn.execute("SELECT key, value FROM fleet.meta").fetchall())
    assert kind == "p"  # partitioned
    assert "USING hnsw (embedding vector_cosine_ops)" in indexes["texts_embedding"]
    assert 'USING gist ("position")' in indexes["observations_position"]
    assert "USING gin (tsv)" in indexes["texts_tsv"]
    for name in ("gists_embedding", "entities_embedding", "episodes_embedding", "experiences_embedding",
                 "gists_center", "entities_position", "observations_stamp", "gists_time", "entities_last_seen",
                 "experiences_stamp", "episodes_start"):
        assert name in indexes
    assert "(robot_id, text_id, stamp)" in indexes["observations_robot_text"]
    assert "(robot_id, layer, stamp) WHERE (source_type = 'interoception'" in indexes["observations_body"]
    assert meta["schema_version"] == "4" and meta["embedding_dim"] == str(DIM) and meta["place_cell"] == "0.5"
    assert "(text_id, robot_id, layer)" in indexes["sightings_pkey"]
    assert "(text_id, robot_id, layer, cx, cy)" in indexes["places_pkey"]


def test_init_upgrades_a_version_2_store_with_the_body_index_and_summaries(fleet):
    with db.connect(fleet) as conn:
        conn.execute("DROP INDEX fleet.observations_body")  # the store as schema v2 left it
        conn.execute("DROP TABLE fleet.sightings, fleet.places")
        conn.execute("DELETE FROM fleet.meta WHERE key = 'place_cell'")
        conn.execute("UPDATE fleet.meta SET value = '2' WHERE key = 'schema_version'")
    with db.connect(fleet) as conn:
        with pytest.raises(FleetError, match="emem fleet init"):
            open_fleet(conn, "the test store")
        init_fleet(conn, dim=DIM)
        names = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'fleet'")}
        assert {"observations_body", "sightings_pkey", "places_pkey"} <= names
        assert open_fleet(conn, "the test store").version == 4


def test_a_v2_store_is_refused_until_init_upgrades_it_in_place(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, flush_batch_size=25)
    robot_workload(memory, clock, n=300)
    memory.flush()
    sync_memory(path, fleet, "r1")
    with db.connect(fleet) as conn:  # the store as schema v2 left it: no summaries
        conn.execute("DROP TABLE fleet.sightings, fleet.places")
        conn.execute("DELETE FROM fleet.meta WHERE key = 'place_cell'")
        conn.execute("UPDATE fleet.meta SET value = '2' WHERE key = 'schema_version'")
        conn.commit()
    for i in range(40):
        memory.add(f"crate {i % 4}", x=float(i % 7), y=-2.0, timestamp=clock.now + i, layer_name="detections")
    memory.flush()
    with pytest.raises(FleetError, match="schema version 2.*upgrade it with `emem fleet init URL`"):
        sync_memory(path, fleet, "r1")
    with db.connect(fleet) as conn:
        assert init_fleet(conn, dim=DIM) is False  # upgraded, not created
        assert conn.execute("SELECT value FROM fleet.meta WHERE key = 'schema_version'").fetchone()[0] == "4"
        have, want = fleet_summaries(conn, "r1"), expected_summaries(fleet_rows(conn, "r1"))  # filled from rows
        assert have.keys() == want.keys() and all(
            same_summary(have[t].get(k), want[t].get(k)) for t in have for k in set(have[t]) | set(want[t]))
    sync_memory(path, fleet, "r1")  # and kept from here on
    memory.close()
    sync_memory(path, fleet, "r1")
    _assert_same(path, fleet, "r1")


def test_init_needs_the_right_to_create_extensions(fleet_url):
    with db.connect(fleet_url, autocommit=True) as conn:
        conn.execute("CREATE ROLE plain LOGIN")
    url = fleet_url.replace("postgres@", "plain@")
    with db.connect(url) as conn:
        with pytest.raises(FleetError, match="CREATE EXTENSION"):
            init_fleet(conn, dim=DIM)


def test_a_damaged_log_stops_the_sync_before_the_damage(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, log_segment_bytes=2048, flush_batch_size=10)
    for i in range(200):
        memory.add(f"parcel {i}", x=1.0, y=float(i % 3), timestamp=clock.now + i, layer_name="detections")
    memory.close()
    segments = sorted((path.parent / "robot.db.log").glob("*.seg"))
    assert len(segments) > 3
    damaged = segments[2]
    first_bad = int(damaged.name[:12])
    raw = bytearray(damaged.read_bytes())
    raw[30] ^= 0xFF  # inside the first record's payload
    damaged.write_bytes(bytes(raw))
    with pytest.raises(FleetError, match="damaged"):
        sync_memory(path, fleet, "r1", batch_records=1)
    with db.connect(fleet) as conn:
        assert conn.execute("SELECT applied_seq FROM fleet.robots").fetchone()[0] == first_bad - 1


def test_two_syncs_of_one_robot_at_once_take_turns(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, flush_batch_size=25)
    robot_workload(memory, clock, n=1200)
    memory.close()
    errors = []

    def run():
        try:
            sync_memory(path, fleet, "r1", batch_records=2)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    _assert_same(path, fleet, "r1")


def test_damage_in_the_last_segment_is_not_mistaken_for_the_end(tmp_path, clock, fleet):
    path = tmp_path / "robot.db"
    memory = open_memory(path, clock, flush_batch_size=10)
    for i in range(100):
        memory.add(f"parcel {i}", x=1.0, y=float(i % 3), timestamp=clock.now + i, layer_name="detections")
    memory.close()
    (segment,) = (path.parent / "robot.db.log").glob("*.seg")
    raw = bytearray(segment.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    segment.write_bytes(bytes(raw))
    # The reader stops at the damage as at a torn tail, but the memory says it committed more: refused.
    with pytest.raises(FleetError, match="gone from this robot|whole history"):
        sync_memory(path, fleet, "r1")


@pytest.mark.parametrize("missing, hint", [("vector", "install-pgvector.sh"), ("postgis", "postgresql-15-postgis-3")])
def test_init_names_the_package_of_a_missing_extension(fleet_url, missing, hint):
    # A server whose catalogue lacks the extension: a view that hides it, found first on the search path.
    with db.connect(fleet_url, autocommit=True) as conn:
        conn.execute("CREATE VIEW public.pg_available_extensions AS SELECT * FROM "
                     f"pg_catalog.pg_available_extensions WHERE name <> '{missing}'")
    with psycopg.connect(fleet_url, options="-c search_path=public,pg_catalog") as conn:
        with pytest.raises(FleetError, match=hint):
            init_fleet(conn, dim=DIM)
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname IN ('vector', 'postgis')"
                            ).fetchone()[0] == 0  # nothing half-made
        assert conn.execute("SELECT to_regclass('fleet.meta')").fetchone()[0] is None
