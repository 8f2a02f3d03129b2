"""The export file: JSON lines (optionally gzip), a header, typed records, a checksummed end.

Layout, one JSON object per line, ``"t"`` naming the record type::

    {"t": "header", "format": "emem_ros-export", "version": 1, "embedding_model": ..., "embedding_dim": ...}
    {"t": "episode", ...}   parents before children (row order)
    {"t": "gist", ...}
    {"t": "text", ...}      each text once, before the first observation that uses it
    {"t": "obs", ...}       in row order
    {"t": "entity", ...}  {"t": "edge", ...}  {"t": "experience", ...}  {"t": "marks", ...}
    {"t": "fsnode", ...}    MemFS folders and files (current content, no history), parents first
    {"t": "end", "records": n, "counts": {...}, "sha256": "<hex of every byte before this line>"}

``ref`` fields are the row numbers in the exporting memory; references between
records use them and always point at a record earlier in the file (episode
parents and FOLLOWS links, which may lie outside a partial export, are given
by content: name and start). Vectors are base64 float32 (little-endian), so
nothing is re-embedded on import. Metadata, tags and gist layers are the
stored JSON text, byte for byte.

A file is only trusted whole: the end record must be last, count every
record and match the SHA-256 of everything before it. A truncated or
altered file is refused before anything is written.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import json
import math
import os
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, overload

import numpy as np

from emem_ros.core.errors import EmbeddingMismatchError, EmemError
from emem_ros.memfs.transfer import FIELDS as FS_FIELDS

FORMAT = "emem_ros-export"
VERSION = 1
GZIP_MAGIC = b"\x1f\x8b"
TYPES = ("episode", "gist", "text", "obs", "entity", "edge", "experience", "marks", "fsnode")


class TransferError(EmemError):
    """An export file cannot be written, read, or does not fit this memory."""


# ---------------------------------------------------------------------- writing
class RecordWriter:
    """Writes records to ``<path>.partial`` and moves it into place when finished."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self._temp = self.path.with_name(self.path.name + ".partial")
        raw = open(self._temp, "wb")
        self._raw = raw
        self._handle = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) \
            if self.path.name.endswith(".gz") else raw
        self._sha = hashlib.sha256()
        self.counts: Counter[str] = Counter()
        self._write({"t": "header", "format": FORMAT, "version": VERSION, **header}, count=False)

    def write(self, record: dict[str, Any]) -> None:
        self._write(record)

    def _write(self, record: dict[str, Any], count: bool = True) -> None:
        try:
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except ValueError as exc:
            raise TransferError(f"cannot export a {record.get('t')} record: {exc}") from exc
        data = (line + "\n").encode("utf-8")
        self._sha.update(data)
        self._handle.write(data)
        if count:
            self.counts[record["t"]] += 1

    def finish(self) -> int:
        """Write the end record, sync, and move the file into place; returns its size in bytes."""
        end = {"t": "end", "records": sum(self.counts.values()), "counts": dict(self.counts),
               "sha256": self._sha.hexdigest()}
        self._handle.write((json.dumps(end, separators=(",", ":")) + "\n").encode("utf-8"))
        if self._handle is not self._raw:
            self._handle.close()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()
        os.replace(self._temp, self.path)
        return self.path.stat().st_size

    def abort(self) -> None:
        try:
            if self._handle is not self._raw:
                self._handle.close()
            self._raw.close()
        finally:
            self._temp.unlink(missing_ok=True)


def vector_text(blob: Optional[bytes]) -> Optional[str]:
    return base64.b64encode(blob).decode("ascii") if blob else None


@overload
def vector_of(text: str, dim: int) -> np.ndarray: ...


@overload
def vector_of(text: None, dim: int) -> None: ...


def vector_of(text: Optional[str], dim: int) -> Optional[np.ndarray]:
    if text is None:
        return None
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32)


def vector_blob(text: Optional[str]) -> Optional[bytes]:
    return base64.b64decode(text) if text is not None else None


# ---------------------------------------------------------------------- reading
def _open(path: Path) -> io.BufferedIOBase:
    if not path.is_file():
        raise TransferError(f"no export file at {path}")
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == GZIP_MAGIC:
        return gzip.GzipFile(path, "rb")
    return open(path, "rb")


def read_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) with plain-words errors for damaged compression."""
    handle = _open(path)
    number = 0
    try:
        while True:
            try:
                line = handle.readline()
            except EOFError:
                raise TransferError(f"{path} is truncated: its compressed data ends early (after line {number})"
                                    ) from None
            except (gzip.BadGzipFile, zlib.error, OSError) as exc:
                raise TransferError(f"{path} is damaged: cannot decompress it after line {number} ({exc})") from None
            if not line:
                return
            number += 1
            yield number, line
    finally:
        handle.close()


def parse_line(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise TransferError(f"{path} line {number} is not a JSON record ({exc}); the file is damaged") from None
    if not isinstance(record, dict) or not isinstance(record.get("t"), str):
        raise TransferError(f"{path} line {number} is not an export record (no type 't'); the file is damaged")
    return record


# ---------------------------------------------------------------------- checking
_NUM = (int, float)
# Field -> (types allowed, may be null). 'json' = a string holding JSON; 'vec' = base64 float32.
FIELDS: dict[str, dict[str, tuple[Any, bool]]] = {
    "episode": {"ref": (int, False), "name": (str, False), "start": (_NUM, False), "end": (_NUM, True),
                "status": (str, False), "parent": (dict, True), "previous": (dict, True), "summary": (str, False),
                "goal": (str, True), "action": (str, True), "result": (str, True), "reflection": (str, True),
                "success": (int, True), "consolidated": (int, False), "metadata": ("json", True),
                "vec": ("vec", True)},
    "gist": {"ref": (int, False), "text": (str, False), "cx": (_NUM, True), "cy": (_NUM, True), "cz": (_NUM, True),
             "radius": (_NUM, False), "time_start": (_NUM, False), "time_end": (_NUM, False),
             "source_count": (int, False), "layers": ("json", False), "episode": (int, True),
             "created_at": (_NUM, False), "metadata": ("json", True), "vec": ("vec", True)},
    "text": {"ref": (int, False), "text": (str, False), "vec": ("vec", True)},
    "obs": {"ref": (int, False), "text": (int, True), "stamp": (_NUM, False), "layer": (str, False),
            "source_type": (str, False), "x": (_NUM, True), "y": (_NUM, True), "z": (_NUM, True),
            "frame_id": (str, True), "confidence": (_NUM, False), "episode": (int, True), "gist": (int, True),
            "tier": (str, False), "tier_since": (_NUM, True), "value": (_NUM, True), "metadata": ("json", True),
            "cold": (dict, True)},
    "entity": {"ref": (int, False), "name": (str, False), "entity_type": (str, True), "x": (_NUM, True),
               "y": (_NUM, True), "z": (_NUM, True), "spread": (_NUM, False), "first_seen": (_NUM, False),
               "last_seen": (_NUM, False), "sightings": (int, False), "confidence": (_NUM, False),
               "layer": (str, False), "metadata": ("json", True), "vec": ("vec", True)},
    "edge": {"kind": (str, False), "src": (str, False), "dst": (str, False), "weight": (_NUM, False),
             "updated": (_NUM, False)},
    "experience": {"id": (str, False), "goal": (str, False), "action": (str, False), "result": (str, False),
                   "reflection": (str, False), "success": (int, True), "tags": ("json", False),
                   "metadata": ("json", True), "stamp": (_NUM, False), "episode": (int, True), "x": (_NUM, True),
                   "y": (_NUM, True), "z": (_NUM, True), "supersedes": (str, True), "vec": ("vec", True)},
    "marks": {"values": (dict, False)},
    "fsnode": FS_FIELDS,
}
_NODE_TYPES = {"obs": "obs", "ep": "episode", "gist": "gist", "ent": "entity"}


@dataclass
class Verified:
    """What a full check of an export file found (nothing is written while checking)."""

    header: dict[str, Any]
    counts: dict[str, int]
    edge_observations: set[int] = field(default_factory=set)
    """Observation refs that edges point at (the importer keeps only their new ids)."""


def verify(path: Path, model: Optional[str] = None, dim: Optional[int] = None) -> Verified:
    """Read the whole file and check every record; raise TransferError (or EmbeddingMismatchError)."""
    path = Path(path)
    sha = hashlib.sha256()
    header: Optional[dict[str, Any]] = None
    end: Optional[dict[str, Any]] = None
    counts: Counter[str] = Counter()
    seen: dict[str, set[int]] = {t: set() for t in ("episode", "gist", "text", "obs", "entity")}
    edge_observations: set[int] = set()
    last = 0
    for number, line in read_lines(path):
        last = number
        if end is not None:
            raise TransferError(f"{path} line {number}: records follow the end record; the file is damaged")
        record = parse_line(path, number, line)
        kind = record["t"]
        if header is None:
            if kind != "header":
                raise TransferError(f"{path} does not start with an emem_ros export header")
            header = _check_header(path, record, model, dim)
            sha.update(line)
            continue
        if kind == "end":
            end = record
            continue
        sha.update(line)
        if kind not in FIELDS:
            raise TransferError(f"{path} line {number}: unknown record type {kind!r}")
        _check_fields(path, number, kind, record, int(header["embedding_dim"]))
        _check_refs(path, number, kind, record, seen, edge_observations)
        counts[kind] += 1
    if header is None:
        raise TransferError(f"{path} is empty")
    if end is None:
        raise TransferError(f"{path} is truncated: it ends at line {last} without its end record")
    if end.get("records") != sum(counts.values()) or end.get("counts") != dict(counts):
        raise TransferError(f"{path} is damaged: its end record counts {end.get('records')} records, "
                            f"the file holds {sum(counts.values())}")
    if end.get("sha256") != sha.hexdigest():
        raise TransferError(f"{path} is damaged: its checksum does not match its content")
    return Verified(header, dict(counts), edge_observations)


def _check_header(path: Path, record: dict[str, Any], model: Optional[str], dim: Optional[int]) -> dict[str, Any]:
    if record.get("format") != FORMAT:
        raise TransferError(f"{path} is not an emem_ros export (format {record.get('format')!r})")
    version = record.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise TransferError(f"{path} has export format version {version!r}; this emem_ros reads up to {VERSION}")
    if not isinstance(record.get("embedding_model"), str) or not isinstance(record.get("embedding_dim"), int):
        raise TransferError(f"{path}: the header does not name the embedding model and dimension")
    if model is not None and (record["embedding_model"] != model or record["embedding_dim"] != dim):
        raise EmbeddingMismatchError(
            f"{path} was exported from a memory using embedding model {record['embedding_model']!r} "
            f"(dim {record['embedding_dim']}), but this memory uses {model!r} (dim {dim}); its vectors would "
            f"not be comparable. Import it into a memory built with {record['embedding_model']!r} (a new file "
            f"gets that model automatically with 'emem import').")
    return record


def _check_fields(path: Path, number: int, kind: str, record: dict[str, Any], dim: int) -> None:
    for name, (types, nullable) in FIELDS[kind].items():
        value = record.get(name)
        where = f"{path} line {number} ({kind})"
        if value is None:
            if not nullable:
                raise TransferError(f"{where}: '{name}' is missing")
            continue
        if types == "json":
            if not isinstance(value, str):
                raise TransferError(f"{where}: '{name}' must be JSON text")
            try:
                json.loads(value)
            except ValueError:
                raise TransferError(f"{where}: '{name}' is not valid JSON") from None
        elif types == "vec":
            try:
                size = len(base64.b64decode(value, validate=True)) if isinstance(value, str) else -1
            except (binascii.Error, ValueError):
                size = -1
            if size != 4 * dim:
                raise TransferError(f"{where}: '{name}' is not a {dim}-value float32 vector")
        elif isinstance(value, bool) or not isinstance(value, types):
            raise TransferError(f"{where}: '{name}' has the wrong type ({type(value).__name__})")
        elif isinstance(value, float) and not math.isfinite(value):
            raise TransferError(f"{where}: '{name}' is not a finite number")
    if kind == "obs":
        archived = record["tier"] == "archived"
        if archived != (record.get("text") is None):
            raise TransferError(f"{path} line {number}: an observation needs a text unless it is archived")
        if (record.get("x") is None) != (record.get("y") is None):
            raise TransferError(f"{path} line {number}: an observation position needs both x and y")
    if kind == "text" and not record["text"].strip():
        raise TransferError(f"{path} line {number}: empty text")
    if kind == "experience" and (len(record["id"]) != 64 or not all(c in "0123456789abcdef" for c in record["id"])):
        raise TransferError(f"{path} line {number}: experience id is not a SHA-256 hex digest")


def _check_refs(path: Path, number: int, kind: str, record: dict[str, Any], seen: dict[str, set[int]],
                edge_observations: set[int]) -> None:
    def need(target: str, ref: Optional[int], what: str) -> None:
        if ref is not None and ref not in seen[target]:
            raise TransferError(f"{path} line {number}: {what} refers to {target} {ref}, which is not earlier "
                                f"in the file; the file is damaged")

    if kind == "obs":
        need("text", record.get("text"), "the observation")
        need("episode", record.get("episode"), "the observation")
        need("gist", record.get("gist"), "the observation")
    elif kind in ("gist", "experience"):
        need("episode", record.get("episode"), f"the {kind}")
    elif kind == "edge":
        for end in ("src", "dst"):
            prefix, _, digits = str(record[end]).partition("-")
            target = _NODE_TYPES.get(prefix)
            if target is None or not digits.isdigit():
                raise TransferError(f"{path} line {number}: edge end {record[end]!r} is not a node id")
            need(target, int(digits), "the edge")
            if target == "obs":
                edge_observations.add(int(digits))
    if kind in seen:
        seen[kind].add(int(record["ref"]))
