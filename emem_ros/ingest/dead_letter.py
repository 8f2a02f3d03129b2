"""The dead-letter file: observations that can never be stored, kept for a person to look at.

``<db>.deadletter.jsonl`` beside the memory file, one JSON object a line,
with the fields of ``Memory.add`` (so a fixed record can be added again with
``memory.add(**{k: r[k] for k in ADD_FIELDS})``), the id it was given, and why
it was set aside. Written with fsync: it is the last copy of the data.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Sequence, Union

from emem_ros.core.types import NodeKind, make_id
from emem_ros.storage.store import NewObservation

ADD_FIELDS = ("text", "x", "y", "z", "timestamp", "layer_name", "source_type", "confidence", "metadata",
              "embedding", "frame_id", "value")

Reason = Union[BaseException, str]


def dead_letter_path(db_path: Union[str, Path]) -> Path:
    path = Path(db_path)
    return path.with_name(path.name + ".deadletter.jsonl")


def record_of(observation: NewObservation, reason: Reason) -> dict[str, Any]:
    o = observation
    x, y, z = o.position if o.position is not None else (None, None, None)
    metadata: Any = o.metadata
    if o.metadata_json is not None:
        try:
            metadata = json.loads(o.metadata_json)
        except ValueError:
            metadata = o.metadata_json
    return {
        "id": make_id(NodeKind.OBSERVATION, o.id), "text": o.text, "x": x, "y": y, "z": z,
        "timestamp": o.stamp, "layer_name": o.layer, "source_type": o.source_type,
        "confidence": o.confidence, "metadata": metadata,
        "embedding": o.embedding.tolist() if o.embedding is not None else None,
        "frame_id": o.frame_id, "value": o.value,
        "episode_id": make_id(NodeKind.EPISODE, o.episode_id) if o.episode_id is not None else None,
        "reason": reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}",
        "set_aside_at": time.time(),
    }


def _line(record: dict[str, Any]) -> str:
    try:
        return json.dumps(record, default=str)
    except (TypeError, ValueError):  # the metadata is what is wrong with it: keep its repr
        record = {**record, "metadata": repr(record.get("metadata"))}
        return json.dumps(record, default=str)


def write_dead_letters(path: Path, items: Sequence[tuple[NewObservation, Reason]]) -> None:
    """Append the observations durably; raises OSError when the file cannot be written."""
    if not items:
        return
    text = "".join(_line(record_of(o, why)) + "\n" for o, why in items)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def read_dead_letters(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out
