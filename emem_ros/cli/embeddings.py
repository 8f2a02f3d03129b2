"""``emem embeddings``: make or check the ONNX file of the bundled all-MiniLM-L6-v2.

``export`` needs torch (run it once on any machine that has it, then copy the
folder to a robot that has only onnxruntime); ``check`` says whether a folder
holds a sound file for the installed weights, without torch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from emem_ros.core.errors import EmemError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "embeddings", help="export or check the ONNX model of the onnx embedding backend",
        description="The onnx backend runs all-MiniLM-L6-v2 exported from the bundled weights (no download). "
                    "It is exported on first use where torch is installed; elsewhere, export it on a machine "
                    "with torch and copy the folder to the user cache (or point $EMEM_ROS_ONNX_DIR at it).")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    export = actions.add_parser("export", help="export the ONNX file (needs torch); rebuilds a corrupt one")
    export.add_argument("--out", type=Path, default=None,
                        help="folder to write (default: $EMEM_ROS_ONNX_DIR or ~/.cache/emem_ros/onnx/...)")
    export.add_argument("--int8", action="store_true", help="also write the int8-quantised model")
    export.set_defaults(func=export_handler)
    check = actions.add_parser("check", help="say whether the ONNX files in a folder are sound")
    check.add_argument("--dir", type=Path, default=None, help="folder to check (default: the cache folder)")
    check.set_defaults(func=check_handler)


def export_handler(args: argparse.Namespace) -> int:
    from emem_ros.embeddings.onnx_export import default_cache_dir, ensure_onnx, torch_available
    from emem_ros.embeddings.sentence_transformer import bundled_minilm_path

    folder = args.out or default_cache_dir()
    if not torch_available():
        raise EmemError("exporting needs torch, transformers and onnx: pip install torch==2.13.0 'emem_ros[all]'")
    model_dir = bundled_minilm_path()
    path = ensure_onnx(model_dir, folder, int8=False)
    print(f"float model: {path}")
    if args.int8:
        print(f"int8 model: {ensure_onnx(model_dir, folder, int8=True)}")
    return 0


def check_handler(args: argparse.Namespace) -> int:
    from emem_ros.embeddings.onnx_export import check_cached, default_cache_dir, read_manifest
    from emem_ros.embeddings.sentence_transformer import bundled_minilm_path

    folder = args.dir or default_cache_dir()
    model_dir = bundled_minilm_path()
    problems = {kind: check_cached(folder, model_dir, int8) for kind, int8 in (("float", False), ("int8", True))}
    manifest = read_manifest(folder) or {}
    print(json.dumps({"folder": str(folder), "exported_at": manifest.get("exported_at"),
                      **{kind: problem or "ok" for kind, problem in problems.items()}}, indent=2))
    return 0 if problems["float"] is None else 1
