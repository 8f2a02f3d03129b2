"""Opening an existing memory file from the command line."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from emem_ros.core.errors import EmemError, StoreError

if TYPE_CHECKING:
    from emem_ros.memory import Memory

NOW_CHOICES = "'latest' (the newest observation's time), 'wall' (this computer's clock) or epoch seconds"


def stored_model(db_path: Path) -> str:
    """The embedding model a memory file was built with (read without opening the memory)."""
    return stored_embedder(db_path)[0]


def stored_embedder(db_path: Path) -> tuple[str, int]:
    """The embedding model a memory file was built with and its dimension (0: not recorded)."""
    if not db_path.is_file():
        raise StoreError(f"no memory file at {db_path}")
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            rows = dict(conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim')").fetchall())
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{db_path} is not an emem_ros memory file: {exc}") from exc
    if "embedding_model" not in rows:
        raise StoreError(f"{db_path} records no embedding model: is it an emem_ros memory file?")
    dim = str(rows.get("embedding_dim", "0"))
    return str(rows["embedding_model"]), int(dim) if dim.isdigit() else 0


def latest_stamp(db_path: Path) -> Optional[float]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT MAX(stamp) FROM observations").fetchone()
    finally:
        conn.close()
    return float(row[0]) if row and row[0] is not None else None


def resolve_now(db_path: Path, now: str) -> float:
    """The memory's clock for relative times ('-10m'): bag time unless told otherwise."""
    if now == "wall":
        return time.time()
    if now == "latest":
        stamp = latest_stamp(db_path)
        return stamp if stamp is not None else time.time()
    try:
        return float(now)
    except ValueError:
        raise EmemError(f"--now must be {NOW_CHOICES}, got {now!r}") from None


def open_memory(db_path: str | Path, *, now: str = "latest", ollama_host: Optional[str] = None,
                **config: Any) -> "Memory":
    """A Memory on an existing file, with the embedder that built it and no background threads."""
    from emem_ros.core.config import MemoryConfig
    from emem_ros.embeddings.factory import provider_for_stored_model
    from emem_ros.memory import Memory  # not the lazy emem_ros.Memory: typed

    path = Path(db_path)
    model, dim = stored_embedder(path)
    provider = provider_for_stored_model(model, ollama_host, dim, str(path))
    clock_value = resolve_now(path, now)
    settings = {"flush_interval": 0.0, "index_save_interval": 0.0, **config}
    return Memory(config=MemoryConfig(db_path=str(path), **settings), embedding_provider=provider,
                  get_current_time=lambda: clock_value)
