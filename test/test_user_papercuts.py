"""Small things a user hits (issue 25, item 4): each with the behaviour a user should see."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from emem_ros import Memory, MemoryConfig
from emem_ros.cli.main import main
from emem_ros.embeddings import HashingEmbeddingProvider
from emem_ros.embeddings.callable import CallableEmbeddingProvider
from test.support.scene import add_entity, add_gist

ROOT = Path(__file__).resolve().parent.parent


def _filled(path: Path, provider, n: int = 400) -> Path:
    memory = Memory(config=MemoryConfig(db_path=str(path), flush_interval=0.0, index_save_interval=0.0),
                    embedding_provider=provider, get_current_time=lambda: 2000.0)
    for i in range(n):
        memory.add(f"red mug number {i}", 1.0, 2.0, timestamp=1000.0 + i, layer_name="detections")
    memory.close()
    return path


def test_query_into_a_closed_pipe_ends_quietly(tmp_path):
    """`emem query DB ... | head`: the reader leaves early; no BrokenPipeError traceback, exit 0."""
    db = _filled(tmp_path / "m.db", HashingEmbeddingProvider())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "emem_ros.cli.main", "query", str(db), "temporal_query",
                                "n_results=100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # like `head` gone before the answer is printed
    err = process.stderr.read().decode()
    process.stderr.close()
    assert process.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def _mine(texts: list[str]) -> np.ndarray:
    return np.stack([HashingEmbeddingProvider().embed([t])[0] for t in texts])


def test_a_command_that_must_embed_says_what_built_the_memory(tmp_path, capsys):
    """A memory built with the caller's own embedder: no model is looked up by its name; one sentence says how."""
    provider = CallableEmbeddingProvider(_mine, dim=384, model_name="my-robot-embedder")
    db = _filled(tmp_path / "own.db", provider, n=5)
    assert main(["forget", str(db), "--similar-to", "red mug"]) == 2
    err = capsys.readouterr().err
    assert "built with the embedder 'my-robot-embedder'" in err
    assert "embedding_provider=" in err and "Python" in err
    assert err.count("\n") == 1, err  # one sentence, no traceback
    # What needs no new vector still works on that file.
    assert main(["query", str(db), "temporal_query", "n_results=3"]) == 0
    assert "red mug number 4" in capsys.readouterr().out
    assert main(["query", str(db), "semantic_search", "query=mug"]) == 1
    assert "my-robot-embedder" in capsys.readouterr().err


def test_current_context_lists_only_summaries_whose_area_reaches_the_robot(make_memory, clock):
    memory = make_memory()
    memory.add("a chair", 0.0, 0.0, timestamp=clock.now - 5, layer_name="scene")
    memory.flush()
    add_gist(memory, "the kitchen was tidy", (30.0, 0.0, 0.0), 2.0, clock.now - 900, clock.now - 800)
    text = str(memory.tools.get_current_context(radius=3.0))
    assert "Area summaries" not in text
    add_gist(memory, "the hallway is dark", (4.0, 0.0, 0.0), 1.5, clock.now - 900, clock.now - 800)
    text = str(memory.tools.get_current_context(radius=3.0))
    assert "Area summaries:\n  1." in text and "hallway" in text and "kitchen" not in text


def _named(vectors: dict[str, np.ndarray]):
    def embed(texts: list[str]) -> np.ndarray:
        return np.stack([vectors.get(t, vectors["?"]) for t in texts])
    return embed


def test_entity_query_by_meaning_stops_at_a_stated_floor(make_memory, clock):
    """'mug' finds the cup (cosine 0.7) but not the fridge or the television (0.3-0.5): the floor is 0.6."""
    from emem_ros.tools.knowledge import NAME_FLOOR

    basis = np.eye(8, dtype=np.float32)

    def mix(sim: float, axis: int) -> np.ndarray:
        return (sim * basis[0] + np.sqrt(1 - sim * sim) * basis[axis]).astype(np.float32)

    vectors = {"mug": basis[0], "cup": mix(0.7, 1), "fridge": mix(0.35, 2), "television": mix(0.3, 3),
               "bottle": mix(0.5, 4), "?": basis[7]}
    memory = make_memory(provider=CallableEmbeddingProvider(_named(vectors), dim=8, model_name="eight"))
    for name, x in (("cup", 1.0), ("fridge", 2.0), ("television", 3.0), ("bottle", 4.0)):
        add_entity(memory, name, "object", (x, 0.0, 0.0), 5, clock.now - 100, clock.now - 10)
    found = memory.tools.entity_query(name="mug")
    assert [h.text for h in found.hits] == ["cup"]
    assert found.hits[0].score is not None and found.hits[0].score >= NAME_FLOOR
    assert NAME_FLOOR == 0.6
