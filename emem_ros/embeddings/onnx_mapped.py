"""The checked ONNX file re-laid with its weights in a separate file, so ONNX Runtime memory-maps them.

A single-file model is parsed into the process's own memory: every weight is
resident, among them the 47 MB word-embedding table of which a robot's
texts use a few thousand rows. With the weights in an external data file,
ONNX Runtime maps that file instead: pages it never reads (most vocabulary
rows) are never resident, and the pages it reads are clean file pages the
kernel can drop under memory pressure. Measured with the float model: a
session 46 MB smaller when loaded, a Memory ~20 MB smaller after use; the
vectors are bit-identical (the same graph and weights, only stored apart).

The copy is derived from the file ``onnx_export`` checked (its manifest
SHA-256), written by ONNX Runtime itself (no ``onnx`` package, graph not
optimised, so the session still optimises for this CPU) in a child process
(loading the model there costs the parent nothing), into ``<cache>/mapped/``
with a stamp recording the source's SHA-256 and the copy's own sizes and
hashes. A copy that is missing, stale or altered is made again; when it cannot
be made (a read-only cache folder), the single file is used and a line is
logged: slower to nothing, only larger.

Run as ``python -m emem_ros.embeddings.onnx_mapped SOURCE TARGET``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from emem_ros.embeddings.onnx_export import _folder_lock, read_manifest, sha256_file

log = logging.getLogger(__name__)

FOLDER = "mapped"
DATA_SUFFIX = ".data"
MIN_EXTERNAL_BYTES = 4096
"""Initializers at least this large go to the data file (all weight matrices; small constants stay inline)."""
TIMEOUT = 300.0


def mapped_model(source: Path) -> Path:
    """The external-weights copy of the checked ``source`` (made if needed), or ``source`` if it cannot be made."""
    folder = source.parent
    entry = (read_manifest(folder) or {}).get("files", {}).get(source.name)
    if not isinstance(entry, dict) or not entry.get("sha256"):
        return source  # not a file onnx_export checked: nothing to derive from
    target = folder / FOLDER / source.name
    if _stamp_problem(target, str(entry["sha256"])) is None:
        return target
    try:
        with _folder_lock(folder):  # two nodes starting together make it once
            if _stamp_problem(target, str(entry["sha256"])) is not None:
                _make(source, target, str(entry["sha256"]))
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        log.warning("ONNX weights stay in %s (a memory-mapped copy could not be made: %s); the model "
                    "takes ~45 MB more memory", source, exc)
        return source
    problem = _stamp_problem(target, str(entry["sha256"]))
    if problem is not None:
        log.warning("ONNX weights stay in %s (the memory-mapped copy is not usable: %s)", source, problem)
        return source
    return target


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def _stamp_problem(target: Path, source_sha: str) -> Optional[str]:
    """None when the copy exists, was made from this source and is unaltered; else why not."""
    try:
        stamp = json.loads(_stamp_path(target).read_text())
    except (OSError, ValueError):
        return "no stamp"
    if not isinstance(stamp, dict) or stamp.get("source_sha256") != source_sha:
        return "made from another file"
    files = stamp.get("files")
    if not isinstance(files, dict) or set(files) != {target.name, target.name + DATA_SUFFIX}:
        return "stamp lists other files"
    for name, described in files.items():
        path = target.with_name(name)
        if not isinstance(described, dict) or not path.is_file() or path.stat().st_size != described.get("size"):
            return f"{path} is missing or has another size"
        if sha256_file(path) != described.get("sha256"):
            return f"{path} is altered"
    return None


def _make(source: Path, target: Path, source_sha: str) -> None:
    """Write the copy in a child process (a temporary folder, then renamed into place), then its stamp."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".mapping-") as tmp:
        work = Path(tmp) / target.name
        done = subprocess.run([sys.executable, "-m", "emem_ros.embeddings.onnx_mapped", str(source), str(work)],
                              capture_output=True, text=True, timeout=TIMEOUT)
        if done.returncode != 0 or not work.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(" | ".join(tail) or f"exit status {done.returncode}")
        data = work.with_name(work.name + DATA_SUFFIX)
        files = {p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in (work, data)}
        # The graph names its data file relatively: both move together, data first (the graph is what is opened).
        os.replace(data, target.with_name(data.name))
        os.replace(work, target)
    stamp = _stamp_path(target)
    temp = stamp.with_name(f".{stamp.name}.{os.getpid()}")
    temp.write_text(json.dumps({"source_sha256": source_sha, "files": files}, indent=2))
    os.replace(temp, stamp)


def write_mapped(source: Path, target: Path) -> None:
    """In the child: ONNX Runtime loads ``source`` unoptimised and saves it with external initializers."""
    import onnxruntime as ort

    options: Any = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.optimized_model_filepath = str(target)
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                     target.name + DATA_SUFFIX)
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                     str(MIN_EXTERNAL_BYTES))
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


if __name__ == "__main__":
    write_mapped(Path(sys.argv[1]), Path(sys.argv[2]))
