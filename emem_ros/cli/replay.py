"""``emem replay BAG``: build a memory from a recorded bag, through the node's own ingest path."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Optional

from emem_ros.core.errors import EmemError
from emem_ros.ros.distro import DISTROS

DEFAULT_PARAMS = Path("config") / "memory.yaml"
EMBEDDING_CHOICES = ("auto", "onnx", "sentence_transformers", "ollama", "hashing")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "replay", help="replay a rosbag2 bag (.db3 / .mcap) into a memory file",
        description="Feed every message of BAG through the memory node's adapters, intake policies and "
                    "placement (TF with a fixed frame, else odometry, at each message's stamp), in bag time, then consolidate (entities, gists) and print "
                    "what happened to every topic.")
    parser.add_argument("bag", help="bag folder (with metadata.yaml), or a single .db3 / .mcap file")
    parser.add_argument("--params", default=None,
                        help="node parameters file (default: the package's config/memory.yaml)")
    parser.add_argument("--db", default=None, help="memory file to write (default: db_path of the params)")
    parser.add_argument("--append", action="store_true",
                        help="add to an existing memory file (default: refuse to touch one)")
    parser.add_argument("--no-consolidate", dest="consolidate", action="store_false",
                        help="skip the final entity extraction and gist consolidation")
    parser.add_argument("--embedding", choices=EMBEDDING_CHOICES, default=None,
                        help="embedding backend instead of the params' embedding.backend "
                             "(hashing: deterministic and model-free, for tests)")
    parser.add_argument("--embedding-model", default=None, help="embedding model instead of the params' one")
    parser.add_argument("--fixed-frame", default=None, metavar="FRAME",
                        help="fixed_frame instead of the params' one: store positions in FRAME (e.g. map) from the "
                             "bag's /tf and /tf_static; '' = the odometry frame")
    parser.add_argument("--base-frame", default=None, metavar="FRAME",
                        help="base_frame instead of the params' one (the robot's pose is fixed_frame <- FRAME)")
    parser.add_argument("--distro", default="auto", choices=("auto", *DISTROS),
                        help="message definitions to decode with (auto: the bag's recorded distro, else humble)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from emem_ros.replay import ReplayOptions, replay_bag
    from emem_ros.ros.params import load_params_yaml

    overrides = {name: value for name, value in (("fixed_frame", args.fixed_frame),
                                                 ("base_frame", args.base_frame)) if value is not None}
    params = load_params_yaml(find_params(args.params), overrides=overrides)
    params = with_embedding(params, args.embedding, args.embedding_model)
    options = ReplayOptions(db_path=args.db, append=args.append, consolidate=args.consolidate,
                            distro=args.distro, progress=args.progress, progress_stream=sys.stderr)
    summary = replay_bag(args.bag, params, options)
    if args.json:
        print(json.dumps(summary_dict(summary), indent=1))
    else:
        print(summary.render())
    return 1 if summary.stopped_early else 0


def find_params(given: Optional[str]) -> Path:
    """The --params file, else config/memory.yaml of a source checkout or of an installed package."""
    if given:
        return Path(given)
    candidates = [Path(__file__).resolve().parents[2] / DEFAULT_PARAMS, Path.cwd() / DEFAULT_PARAMS]
    try:
        from ament_index_python.packages import get_package_share_directory

        candidates.append(Path(get_package_share_directory("emem_ros")) / DEFAULT_PARAMS)
    except Exception:  # no ROS installation, or the package is not installed there
        pass
    for path in candidates:
        if path.is_file():
            return path
    looked = ", ".join(str(p) for p in candidates)
    raise EmemError(f"no --params given and no config/memory.yaml found (looked in {looked}); "
                    "pass --params path/to/memory.yaml")


def with_embedding(params: Any, backend: Optional[str], model: Optional[str]) -> Any:
    """The params with another embedding backend and/or model."""
    if backend is None and model is None:
        return params
    from emem_ros.ros.params import DEFAULT_ST_MODEL, ParamError

    backend = backend or params.embedding_backend
    if backend == "auto":
        from emem_ros.embeddings.factory import default_backend

        backend = default_backend()
    if model is None:
        model = params.embedding_model if backend == params.embedding_backend else ""
    if backend in ("onnx", "sentence_transformers") and not model:
        model = DEFAULT_ST_MODEL
    if backend == "ollama" and not model:
        raise ParamError("--embedding ollama needs --embedding-model (e.g. nomic-embed-text)")
    return dataclasses.replace(params, embedding_backend=backend, embedding_model=model)


def summary_dict(summary: Any) -> dict[str, Any]:
    data = dataclasses.asdict(summary)
    data.update(observations=summary.observations, dropped_by_intake=summary.dropped_by_intake,
                skipped=summary.skipped, without_position=summary.without_position)
    return data
