"""``emem import DB IN.jsonl[.gz]``: merge an export into a memory, without duplicates.

The file is checked whole first (a truncated or damaged file changes
nothing). DB may not exist yet: it is then created with the export's
embedding model. Importing the same file twice adds nothing.
(The module is ``importer`` because ``import`` is a Python keyword.)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from emem_ros.memory import Memory


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "import", help="merge an export file into a memory (created if missing), without duplicates",
        description="Check IN whole, then add what DB does not hold yet: observations, texts and embeddings, "
                    "episodes, gists, entities and edges, experiences. DB must use the export's embedding model.")
    parser.add_argument("db", help="memory file (.db); created with the export's model when missing")
    parser.add_argument("source", metavar="in", help="export file (.jsonl or .jsonl.gz)")
    parser.add_argument("--ollama-host", default=None, help="Ollama server for a memory built with an Ollama embedder")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from emem_ros.agent.transfer import verify

    db, source = Path(args.db), Path(args.source)
    if db.exists():
        from emem_ros.cli.common import open_memory

        memory = open_memory(db, now="wall", ollama_host=args.ollama_host)
    else:
        header = verify(source).header
        memory = _new_memory(db, header["embedding_model"], args.ollama_host, int(header["embedding_dim"]))
    try:
        report = memory.import_from(source)
    finally:
        memory.close()
    print(report)
    return 0


def _new_memory(db: Path, model: str, ollama_host: Optional[str], dim: int = 0) -> "Memory":
    """An empty memory file that uses the export's embedding model."""
    import time

    from emem_ros.core.config import MemoryConfig
    from emem_ros.embeddings.factory import provider_for_stored_model
    from emem_ros.memory import Memory  # not the lazy emem_ros.Memory: typed

    provider = provider_for_stored_model(model, ollama_host, dim, str(db))
    return Memory(config=MemoryConfig(db_path=str(db), flush_interval=0.0, index_save_interval=0.0),
                  embedding_provider=provider, get_current_time=time.time)
