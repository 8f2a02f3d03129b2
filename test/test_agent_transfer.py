"""Export / import: lossless round trip, partial exports, idempotent merges, refusal of bad files."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from emem_ros import Memory, MemoryConfig
from emem_ros.agent.transfer import TransferError, export_file
from emem_ros.cli.main import main
from emem_ros.core.errors import EmbeddingMismatchError
from emem_ros.embeddings import HashingEmbeddingProvider
from emem_ros.storage.rebuild import rebuild_from_log
from test.conftest import FakeClock
from test.support.scene import START, build_scene

SETTINGS = dict(flush_interval=0.0, index_save_interval=0.0, consolidation_window=600.0, archive_after_seconds=300.0)
QUERIES = [
    ("semantic_search", {"query": "red chair"}),
    ("semantic_search", {"query": "coffee mug", "layer": "detections", "n_results": 5}),
    ("semantic_search", {"query": "office", "episode_id": "ep-3"}),
    ("semantic_search", {"query": "spare battery drawer"}),
    ("spatial_query", {"x": 3.0, "y": 3.0, "radius": 3.0}),
    ("spatial_query", {"x": 13.0, "y": 3.0}),
    ("temporal_query", {"time_after": START, "time_before": START + 400, "n_results": 20}),
    ("temporal_query", {"n_results": 20, "order": "oldest"}),
    ("search_gists", {"query": "kitchen"}),
    ("entity_query", {}),
    ("entity_query", {"name": "chair"}),
    ("locate", {"concept": "television"}),
    ("locate", {"concept": "fire extinguisher"}),
    ("recall", {"query": "kitchen"}),
    ("episode_summary", {"last_n": 6}),
    ("body_status", {}),
    ("get_current_context", {}),
    ("find_experiences", {"query": "kitchen door"}),
    ("find_experiences", {"success": False}),
]
TABLES = ("observations", "texts", "places", "episodes", "gists", "entities", "edges", "experiences")


def memory_at(path: Path, clock, **overrides) -> Memory:
    settings = dict(SETTINGS)
    settings.update(overrides)
    return Memory(config=MemoryConfig(db_path=str(path), **settings), embedding_provider=HashingEmbeddingProvider(),
                  get_current_time=clock)


def build_source(path: Path, clock: FakeClock) -> dict:
    """A memory with everything an export carries: episodes (nested, one still active), gists, entities
    and their edges, archived rows in the cold store, body readings, experiences with a correction."""
    memory = memory_at(path, clock)
    scene = build_scene(memory, clock, steps_per_room=60)
    assert memory.extract_entities(timeout=30, final=True).created > 0
    clock.now = scene.end + 700
    assert memory.consolidate_time_window(timeout=30).gist_ids
    clock.now += 400
    assert memory.archive(timeout=30).observations > 0
    errand = memory.start_episode("errand", goal="bring the mug")
    memory.start_episode("find the mug", parent_episode_id=errand)
    t = clock.now
    for i in range(20):
        memory.add("coffee mug", 2.6, 2.3, 0.9, timestamp=t + i, layer_name="detections", source_type="perception",
                   metadata={"class_id": "mug", "score": 0.9})
    memory.add("red chair", 2.0, 3.0, timestamp=t + 1, layer_name="detections", source_type="perception")
    memory.add("red chair", 2.0, 3.0, timestamp=t + 1, layer_name="detections", source_type="perception")  # a repeat
    memory.dispatch_tool_call("store_specific_memory", {"text": "the spare battery is in the office drawer",
                                                        "x": 5.0, "y": 14.0})
    memory.add_body_state("battery 40%", "battery", timestamp=t + 20, value=0.4)
    memory.end_episode(consolidate=False)
    first = memory.record_experience("fetch the red mug", action="drove to the kitchen", result="door closed",
                                     reflection="the kitchen door is often closed", success=False,
                                     tags=["kitchen"], timestamp=t + 21, x=2.0, y=3.0)
    memory.ledger.correct(first, result="door locked", timestamp=t + 22)
    memory.record_experience("dock to charge", result="charged", success=True, tags=["dock"], timestamp=t + 23)
    clock.now = t + 30
    memory.flush()
    memory.ledger.embed_pending()
    memory.close()  # 'errand' (ep-4) stays active
    return {"end": clock.now, "scene_end": scene.end, "errand_start": t}


def answers(path: Path, clock: FakeClock) -> dict:
    memory = memory_at(path, clock)
    try:
        return {f"{name} {args}": memory.dispatch_tool_call(name, args) for name, args in QUERIES}
    finally:
        memory.close()


CONTENT = {
    # Text and place row numbers are internal (a text archived away and seen again gets a new one):
    # those rows are compared by content. Every other id is kept.
    "observations": "SELECT o.id, t.text, o.stamp, o.layer, o.source_type, o.x, o.y, o.z, o.frame_id, o.confidence,"
                    " o.episode_id, o.gist_id, o.tier, o.tier_since, o.value, o.metadata FROM observations o"
                    " LEFT JOIN texts t ON t.id = o.text_id",
    "texts": "SELECT text, embedding, refs FROM texts",
    "places": "SELECT t.text, p.layer, p.cx, p.cy, p.cz, p.count, round(p.sx, 9), round(p.sy, 9), round(p.sz, 9),"
              " p.first_stamp, p.last_stamp, p.last_obs_id FROM places p JOIN texts t ON t.id = p.text_id",
}


def rows(path: Path) -> dict:
    conn = sqlite3.connect(path)
    try:
        return {t: sorted(conn.execute(CONTENT.get(t, f"SELECT * FROM {t}")).fetchall(), key=repr) for t in TABLES}
    finally:
        conn.close()


def counts(path: Path) -> dict:
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        conn.close()


def cold_texts(path: Path, clock) -> list:
    memory = memory_at(path, clock)
    try:
        return sorted((r["id"], r["text"]) for r in memory.read_archived())
    finally:
        memory.close()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    folder = tmp_path_factory.mktemp("transfer")
    clock = FakeClock(START)
    info = build_source(folder / "source.db", clock)
    out = folder / "full.jsonl.gz"
    export_file(folder / "source.db", out)
    return folder, clock, info, out


def fresh_copy(folder: Path, name: str, export: Path, clock) -> tuple[Path, object]:
    target = folder / name
    memory = memory_at(target, clock)
    try:
        report = memory.import_from(export)
    finally:
        memory.close()
    return target, report


def test_round_trip_into_a_fresh_file_is_identical(source):
    folder, clock, _, export = source
    copy, report = fresh_copy(folder, "copy.db", export, clock)
    assert report.added["observations"] == counts(folder / "source.db")["observations"]
    assert report.added["cold records"] > 0 and not report.existing
    original, copied = answers(folder / "source.db", clock), answers(copy, clock)
    for key in original:
        assert copied[key] == original[key], key
    assert "Active episode: ep-4" in copied["get_current_context {}"]
    assert any("summary of" in a for a in original.values())  # the queries did see gists,
    assert "[entity" in original["entity_query {}"]  # entities,
    assert "door locked" in original["find_experiences {'query': 'kitchen door'}"]  # experiences
    # Row for row, embeddings, tiers, SUMMARIZES links, places and edges included.
    assert rows(copy) == rows(folder / "source.db")
    assert cold_texts(copy, clock) == cold_texts(folder / "source.db", clock)


def test_importing_twice_adds_nothing(source):
    folder, clock, _, export = source
    copy, _ = fresh_copy(folder, "twice.db", export, clock)
    before = rows(copy)
    memory = memory_at(copy, clock)
    try:
        report = memory.import_from(export)
    finally:
        memory.close()
    assert sum(report.added.values()) == 0 and sum(report.updated.values()) == 0
    assert report.existing["observations"] == counts(copy)["observations"]
    assert rows(copy) == before


def test_an_import_is_in_the_operation_log(source):
    folder, clock, _, export = source
    copy, _ = fresh_copy(folder, "logged.db", export, clock)
    before = rows(copy)
    rebuild_from_log(copy, keep_old=False)
    assert rows(copy) == before


def test_partial_export_by_time_range(source):
    folder, clock, _, _ = source
    since, until = START + 100, START + 250
    out = folder / "range.jsonl"
    export_file(folder / "source.db", out, since=since, until=until)
    copy, _ = fresh_copy(folder, "range.db", out, clock)
    conn = sqlite3.connect(copy)
    src = sqlite3.connect(folder / "source.db")
    try:
        stamps = [r[0] for r in conn.execute("SELECT stamp FROM observations")]
        expected = src.execute("SELECT COUNT(*) FROM observations WHERE stamp BETWEEN ? AND ?",
                               (since, until)).fetchone()[0]
        assert stamps and len(stamps) == expected and all(since <= s <= until for s in stamps)
        gists = conn.execute("SELECT time_start, time_end FROM gists").fetchall()
        assert gists and all(t0 <= until and t1 >= since for t0, t1 in gists)
        assert conn.execute("SELECT COUNT(*) FROM experiences").fetchone()[0] == 0  # recorded later
        names = {r[0] for r in conn.execute("SELECT name FROM episodes")}
        assert names and names <= {"kitchen patrol", "living room patrol", "office patrol"}
        # Every SUMMARIZES link and episode of the copy points at a row that came along.
        assert conn.execute("SELECT COUNT(*) FROM observations WHERE gist_id IS NOT NULL AND gist_id NOT IN"
                            " (SELECT id FROM gists)").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM observations WHERE episode_id IS NOT NULL AND episode_id NOT IN"
                            " (SELECT id FROM episodes)").fetchone()[0] == 0
    finally:
        conn.close()
        src.close()


def test_partial_export_by_episode_keeps_its_subtasks(source):
    folder, clock, _, _ = source
    out = folder / "errand.jsonl.gz"
    memory = memory_at(folder / "source.db", clock)
    try:
        memory.export_to(out, episode_id="ep-4")
    finally:
        memory.close()
    copy, _ = fresh_copy(folder, "errand.db", out, clock)
    conn = sqlite3.connect(copy)
    try:
        episodes = conn.execute("SELECT id, name, parent_id, status FROM episodes ORDER BY id").fetchall()
        assert [(e[1], e[3]) for e in episodes] == [("errand", "active"), ("find the mug", "completed")]
        assert episodes[1][2] == episodes[0][0]  # SUBTASK_OF survives the remapping
        texts = conn.execute("SELECT t.text, COUNT(*) FROM observations o LEFT JOIN texts t ON t.id = o.text_id"
                             " GROUP BY t.text").fetchall()
        assert dict(texts) == {"coffee mug": 20, "red chair": 2, "battery 40%": 1,
                               "the spare battery is in the office drawer": 1}
        assert conn.execute("SELECT COUNT(*) FROM experiences").fetchone()[0] == 3  # recorded during the errand
    finally:
        conn.close()


def test_merging_into_a_memory_with_its_own_data(source, tmp_path):
    folder, clock, info, export = source
    target = tmp_path / "robot_b.db"
    memory = memory_at(target, clock)
    try:
        memory.add("a blue box", 9.0, 9.0, timestamp=START + 5, layer_name="detections", source_type="perception")
        memory.add("red chair", 2.0, 3.0, timestamp=START + 5, layer_name="detections", source_type="perception")
        part = tmp_path / "part.jsonl"
        export_file(folder / "source.db", part, since=info["errand_start"])
        first = memory.import_from(part)
        assert first.added["observations"] == 24
        assert any("abandoned" in n for n in first.notes)  # the foreign active episode does not capture ours
        second = memory.import_from(export)  # overlaps the first import
        source_counts = counts(folder / "source.db")
        assert second.added["observations"] == source_counts["observations"] - 24
        assert second.existing["observations"] == 24 and second.existing["experiences"] == 3
        third = memory.import_from(export)
        assert sum(third.added.values()) == 0
        now = counts(target)
        assert now["observations"] == source_counts["observations"] + 2
        assert now["experiences"] == source_counts["experiences"]
        assert now["entities"] == source_counts["entities"] and now["gists"] == source_counts["gists"]
        statuses = dict(sqlite3.connect(target).execute("SELECT name, status FROM episodes").fetchall())
        assert statuses["errand"] == "abandoned"
        assert "a blue box" in memory.semantic_search("blue box")
        assert "fire extinguisher" in memory.locate("fire extinguisher")
    finally:
        memory.close()


def test_another_embedding_model_is_a_clear_error(source, tmp_path, clock):
    _, _, _, export = source
    memory = Memory(config=MemoryConfig(db_path=str(tmp_path / "other.db"), **SETTINGS),
                    embedding_provider=HashingEmbeddingProvider(dim=128), get_current_time=clock)
    try:
        with pytest.raises(EmbeddingMismatchError, match="hashing-384.*hashing-128"):
            memory.import_from(export)
        assert memory.store.counts()["observations"] == 0
    finally:
        memory.close()


def _damage(kind: str, good: Path, bad: Path) -> None:
    data = good.read_bytes()
    if kind == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif kind == "truncated_gzip":
        bad.write_bytes(gzip.compress(data)[:-40])
    elif kind == "last_line_cut":
        bad.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])
    elif kind == "altered":
        lines = data.splitlines(keepends=True)
        index = next(i for i, line in enumerate(lines) if b'"t":"obs"' in line)
        lines[index] = lines[index].replace(b'"confidence":0.9', b'"confidence":0.8', 1)
        assert lines[index] != data.splitlines(keepends=True)[index]
        bad.write_bytes(b"".join(lines))
    elif kind == "garbage_line":
        lines = data.splitlines(keepends=True)
        bad.write_bytes(b"".join(lines[:5] + [b"{not json\n"] + lines[5:]))
    elif kind == "broken_reference":
        lines = data.splitlines(keepends=True)
        kept = [line for line in lines if b'"t":"episode"' not in line]  # observations name their episodes
        assert len(kept) < len(lines)
        bad.write_bytes(b"".join(kept))
    elif kind == "empty":
        bad.write_bytes(b"")
    elif kind == "not_an_export":
        bad.write_bytes(b'{"t": "header", "format": "something else"}\n')


@pytest.mark.parametrize("kind, message", [
    ("truncated", "truncated|damaged"), ("truncated_gzip", "truncated"), ("last_line_cut", "without its end record"),
    ("altered", "checksum"), ("garbage_line", "not a JSON record"), ("broken_reference", "not earlier in the file"),
    ("empty", "empty"), ("not_an_export", "not an emem_ros export"),
])
def test_a_damaged_file_is_refused_and_changes_nothing(source, tmp_path, kind, message):
    folder, clock, _, _ = source
    plain = folder / "plain.jsonl"
    if not plain.exists():
        export_file(folder / "source.db", plain, since=START, until=START + 120)
    bad = tmp_path / ("bad.jsonl.gz" if kind == "truncated_gzip" else "bad.jsonl")
    _damage(kind, plain, bad)
    target = tmp_path / "target.db"
    memory = memory_at(target, clock)
    try:
        memory.add("a blue box", 9.0, 9.0, layer_name="detections", source_type="perception")
        memory.flush()
        before, seq = rows(target), memory.store.oplog.last_seq
        with pytest.raises(TransferError, match=message):
            memory.import_from(bad)
        assert rows(target) == before and memory.store.oplog.last_seq == seq
    finally:
        memory.close()


def test_cli_export_and_import(source, tmp_path, capsys):
    folder, _, _, _ = source
    src = tmp_path / "src.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{folder / 'source.db'}{suffix}").exists():
            shutil.copy(f"{folder / 'source.db'}{suffix}", f"{src}{suffix}")
    out = tmp_path / "ep.jsonl.gz"
    assert main(["export", str(src), str(out), "--episode", "ep-1"]) == 0
    assert "Exported" in capsys.readouterr().out
    new = tmp_path / "new.db"
    assert main(["import", str(new), str(out)]) == 0  # created with the export's model
    assert "observations:" in capsys.readouterr().out
    assert main(["import", str(new), str(out)]) == 0
    assert "observations: 0 added" in capsys.readouterr().out
    with gzip.open(out) as handle:
        header = json.loads(handle.readline())
    assert header["selection"]["episode"] == "ep-1" and header["embedding_model"] == "hashing-384"
    assert main(["export", str(src), str(tmp_path / "r.jsonl"), "--since=-1h", "--until=-70m"]) == 2
    assert "later than" in capsys.readouterr().err
    assert main(["export", str(src), str(tmp_path / "x.jsonl"), "--episode", "gist-1"]) == 2
    assert main(["import", str(new), str(tmp_path / "missing.jsonl")]) == 2
    assert "no export file" in capsys.readouterr().err
