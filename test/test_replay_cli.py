"""``emem replay``, ``emem query`` and ``emem map`` through ``emem_ros.cli.main.main``."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("rosbags")

from emem_ros.cli.main import main
from emem_ros.cli.query import parse_arguments, parse_value
from emem_ros.cli.replay import find_params
from emem_ros.core.errors import InvalidInputError
from emem_ros.replay.progress import LineProgress, NoProgress, make_progress
from test.support.bags import BAGS, REPO, BagBuilder

TRUTH = json.loads((BAGS / "ground_truth.json").read_text(encoding="utf-8"))
RED_MUG = next(o for o in TRUTH["objects"] if o["name"] == "red mug")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> tuple[Path, str]:
    """The bundled mcap bag replayed by the CLI, with the shipped params and the hashing embedder."""
    db = tmp_path_factory.mktemp("cli") / "memory.db"
    code, out, err = run("replay", BAGS / "patrol_mcap", "--db", db, "--embedding", "hashing", "--no-progress")
    assert code == 0, err
    return db, out


def small_bag(tmp_path: Path) -> Path:
    b = BagBuilder().topic("/odom", "nav_msgs/msg/Odometry").topic("/scene", "std_msgs/msg/String")
    for i in range(21):
        b.add("/odom", i / 10, b.odometry(i / 10, 1.0 + i / 10, 2.0))
    b.add("/scene", 0.5, b.string("a kitchen with a red mug"))
    b.add("/scene", 1.5, bytes(3))  # garbage
    return b.write(tmp_path / "small")


# ---------------------------------------------------------------------- emem replay
def test_replay_prints_the_summary_and_writes_the_memory(replayed):
    db, out = replayed
    assert db.is_file()
    assert out.startswith(f"Replayed {BAGS / 'patrol_mcap'} (mcap, humble types) into {db}")
    for needle in ("detections_3d", "no detections", "consolidation:", "entities", "/cmd_vel"):
        assert needle in out


def test_replay_json_summary_and_skip_reasons(tmp_path):
    code, out, err = run("replay", small_bag(tmp_path), "--db", tmp_path / "m.db", "--embedding", "hashing",
                         "--no-progress", "--json")
    assert code == 0, err
    data = json.loads(out)
    scene = next(l for l in data["layers"] if l["name"] == "scene")
    assert (scene["messages"], scene["observations"]) == (2, 1)
    assert any("could not deserialize" in why for why in scene["skipped"])
    assert data["observations"] == 1 and data["odometry"]["accepted"] == 21
    assert data["missing_topics"]["detections"] == "/detections"


def test_replay_progress_goes_to_stderr_as_plain_lines(tmp_path):
    code, out, err = run("replay", small_bag(tmp_path), "--db", tmp_path / "m.db", "--embedding", "hashing")
    assert code == 0
    assert "replay: 23/23 messages (100%)" in err and "replay:" not in out


def test_progress_is_a_bar_on_a_terminal_lines_in_a_log_and_nothing_when_off(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    bar = make_progress(10, stream=Terminal())
    assert type(bar).__name__ == "tqdm"
    bar.close()
    log = io.StringIO()
    lines = make_progress(10, stream=log)
    lines.update(10)
    lines.close()
    assert log.getvalue() == "replay: 10/10 messages (100%), 0 s\n"
    assert isinstance(make_progress(10, enabled=False), NoProgress)
    monkeypatch.setitem(__import__("sys").modules, "tqdm", None)  # not installed
    assert isinstance(make_progress(10, stream=Terminal()), LineProgress)


def test_replay_refuses_an_existing_memory_and_a_missing_bag(replayed, tmp_path):
    db, _ = replayed
    code, out, err = run("replay", BAGS / "patrol_mcap", "--db", db, "--embedding", "hashing", "--no-progress")
    assert code == 2 and "already exists" in err and "--append" in err and out == ""
    code, _, err = run("replay", tmp_path / "nope", "--db", tmp_path / "x.db", "--embedding", "hashing")
    assert code == 2 and "no bag at" in err
    assert not (tmp_path / "x.db").exists()


def test_replay_reports_bad_params_in_words(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("/**:\n  ros__parameters:\n    layer_names: [scene]\n", encoding="utf-8")
    code, _, err = run("replay", small_bag(tmp_path), "--params", bad, "--db", tmp_path / "m.db")
    assert code == 2 and "layers.scene.topic is missing" in err


def test_default_params_are_the_packaged_config():
    assert find_params(None) == REPO / "config" / "memory.yaml"
    assert find_params("other.yaml") == Path("other.yaml")


# ---------------------------------------------------------------------- emem query
def test_query_locate_answers_in_text(replayed):
    db, _ = replayed
    code, out, _ = run("query", db, "locate", "concept=red mug", "layer=detections_3d")
    assert code == 0
    assert out.startswith('"red mug" is most likely at (1.0, 4.6')


def test_query_json_gives_the_typed_result(replayed):
    db, _ = replayed
    code, out, _ = run("query", db, "locate", "concept=red mug", "layer=detections_3d", "n_results=3", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["tool"] == "locate" and data["arguments"]["n_results"] == 3
    assert math.dist(data["result"]["position"][:2], RED_MUG["position"][:2]) < 1.0
    assert data["result"]["evidence"][0]["layer"] == "detections_3d"
    assert data["text"].startswith('"red mug" is most likely')


def test_query_relative_times_use_bag_time_unless_told_otherwise(replayed):
    db, _ = replayed
    code, out, _ = run("query", db, "temporal_query", "time_after=-2m", "layer=scene")
    assert code == 0 and "[scene]" in out
    code, out, _ = run("query", db, "temporal_query", "time_after=-2m", "layer=scene", "--now", "wall")
    assert code == 0 and "[scene]" not in out  # the bag is from 2025-03-14: nothing in the last 2 minutes


def test_query_body_status_and_list(replayed):
    db, _ = replayed
    code, out, _ = run("query", db, "body_status", 'layers=["battery"]')
    assert code == 0 and "[battery] battery 4" in out and "cpu_temp" not in out
    code, out, _ = run("query", db, "--list")
    assert code == 0 and "locate(concept, n_results?" in out and "body_status(layers?, at_time?, below?, above?" in out


def test_query_errors_are_plain_and_set_the_exit_code(replayed, tmp_path):
    db, _ = replayed
    code, out, err = run("query", db, "lokate", "concept=mug")
    assert code == 1 and "Did you mean locate?" in err and out == ""
    code, _, err = run("query", db, "locate", "concept")
    assert code == 2 and "key=value" in err
    code, _, err = run("query", db, "locate", "concept=mug", "colour=red", "--json")
    assert code == 1 and "has no argument 'colour'" in err
    code, _, err = run("query", tmp_path / "none.db", "body_status")
    assert code == 2 and "no memory file" in err
    code, _, err = run("query", db, "body_status", "--now", "yesterday-ish")
    assert code == 2 and "--now must be" in err


@pytest.mark.parametrize("raw, value", [
    ("5", 5), ("2.5", 2.5), ("true", True), ("null", None), ('["battery", "cpu_temp"]', ["battery", "cpu_temp"]),
    ('{"k": 1}', {"k": 1}), ("red mug", "red mug"), ("-10m", "-10m"), ("NaN", "NaN"), ("", ""),
])
def test_values_are_json_when_they_parse(raw, value):
    assert parse_value(raw) == value


def test_arguments_need_keys_once():
    assert parse_arguments(["concept=a=b", "n_results=2"]) == {"concept": "a=b", "n_results": 2}
    with pytest.raises(InvalidInputError, match="twice"):
        parse_arguments(["x=1", "x=2"])
    with pytest.raises(InvalidInputError, match="key=value"):
        parse_arguments(["=3"])


# ---------------------------------------------------------------------- emem map
def _ink(png: Path) -> float:
    from matplotlib.image import imread

    pixels = imread(png)[..., :3]
    return float((pixels.min(axis=2) < 0.9).mean())


def test_map_draws_the_replayed_memory(replayed, tmp_path):
    db, _ = replayed
    png = tmp_path / "map.png"
    code, out, err = run("map", db, "-o", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 0.03 < _ink(png) < 0.6  # drawn on, not a blank or a solid block
    assert out.startswith(f"wrote {png}:") and "gists" in out and "entities" in out


def test_map_of_a_hand_filled_memory_and_other_formats(make_memory, tmp_path):
    memory = make_memory("hand.db")
    for i in range(5):
        memory.add(f"note {i}", x=float(i), y=1.0, timestamp=1_700_000_000.0 + i)
    memory.add("no place", timestamp=1_700_000_010.0)
    memory.close()
    svg = tmp_path / "hand.svg"
    code, out, _ = run("map", tmp_path / "hand.db", "-o", svg, "--title", "by hand")
    assert code == 0
    text = svg.read_text(encoding="utf-8")
    assert "<svg" in text and "by hand" in text
    assert "1 observations have no position" in out and "no odometry-placed observations" in out


def test_map_refuses_what_is_not_a_memory(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"hello" * 100)
    code, _, err = run("map", junk, "-o", tmp_path / "m.png")
    assert code == 2 and "not an emem_ros memory file" in err
    code, _, err = run("map", tmp_path / "absent.db")
    assert code == 2 and "no memory file" in err
