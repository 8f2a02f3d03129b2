"""The byte scan that proves a forget: every file under a memory, read raw and as a reader would.

Shared by test/test_forget_proof.py (facade, replay) and test/ros/test_forget_live.py (the live node):
``memory_files`` lists the db, its -wal/-shm and everything in folders named after it (.idx/, .log/,
.cold/, dead letters); ``readable_bytes`` adds what a reader gets out of a file (gzip members inflated,
operation-log records decoded); ``holders`` says which files still hold which needles;
``vector_needles`` gives a vector's float32 bytes as given and as hnswlib stores it.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import hnswlib
import numpy as np

from emem_ros.storage.oplog import DECODERS, decode, iter_payloads


def memory_files(db: Path) -> list[Path]:
    """Every file the memory keeps: the db and its sidecars, and everything in folders named after it."""
    out = []
    for entry in db.parent.iterdir():
        if not entry.name.startswith(db.name):
            continue
        if entry.is_dir():
            out += [p for p in entry.rglob("*") if p.is_file()]
        else:
            out.append(entry)
    return out


def readable_bytes(path: Path) -> bytes:
    """The file's bytes, plus what a reader gets out of it: gzip members inflated, log records decoded."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:  # a live memory removed it between the listing and the read
        return b""
    if path.name.endswith(".gz"):
        data += gzip.decompress(data) if data else b""
    if path.suffix == ".seg" and data[:8] in DECODERS:
        for _seq, magic, payload, _pos in iter_payloads(path.parent):
            data += repr(decode(payload, magic)).encode()
            for _sql, params, _many in decode(payload, magic):
                rows = params if _many else [params]
                for row in rows:
                    for value in (row.values() if isinstance(row, dict) else row):
                        if isinstance(value, (bytes, str)):
                            data += value if isinstance(value, bytes) else value.encode()
    return data


def holders(db: Path, needles: list[bytes]) -> dict[str, list[str]]:
    """File (relative to the db's folder) -> the needles found in it (ASCII shown as text, else hex)."""
    found: dict[str, list[str]] = {}
    for path in memory_files(db):
        data = readable_bytes(path)
        hits = [needle[:24].hex() if not needle.isascii() else needle.decode() for needle in needles if needle in data]
        if hits:
            found[str(path.relative_to(db.parent))] = hits
    return found


def sqlite_merged(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """``holders`` with the SQLite file and its WAL as one: a checkpoint moves pages from one to the other
    whenever SQLite (or the WAL checkpointer thread) decides, which changes where a text is, not whether."""
    merged: dict[str, list[str]] = {}
    for name, hits in found.items():
        key = name[: -len("-wal")] if name.endswith(".db-wal") else name
        merged[key] = sorted(set(merged.get(key, [])) | set(hits))
    return merged


def vector_needles(vector: np.ndarray) -> list[bytes]:
    """The vector's float32 bytes as given and as hnswlib keeps it (normalised by its own arithmetic)."""
    index = hnswlib.Index(space="cosine", dim=len(vector))
    index.init_index(max_elements=1)
    index.add_items(np.asarray(vector, dtype=np.float32).reshape(1, -1), [0])
    kept = np.asarray(index.get_items([0]), dtype=np.float32)[0]
    out = []
    for raw in (np.asarray(vector).astype("<f4").tobytes(), kept.astype("<f4").tobytes()):
        out += [raw, raw[:64], raw[len(raw) // 2:len(raw) // 2 + 64]]
    return out
