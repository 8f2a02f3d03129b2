"""Export / import of a memory across sessions and robots (``emem export`` / ``emem import``).

The format and its checks are in ``transfer_format``; the selection and the
writing of an export in ``transfer_export``; merging an export into a memory
(content keys, id remapping) in ``transfer_import``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from emem_ros.agent.transfer_export import ExportReport, export_file
from emem_ros.agent.transfer_format import FORMAT, VERSION, TransferError, verify
from emem_ros.agent.transfer_import import ImportReport, import_file

if TYPE_CHECKING:
    from emem_ros.agent.ledger import ExperienceLedger
    from emem_ros.engine import Engine

__all__ = ["ExportReport", "ImportReport", "TransferError", "FORMAT", "VERSION", "export_memory", "export_file",
           "import_file", "verify"]


def export_memory(engine: "Engine", out_path: str | Path, since: Any = None, until: Any = None,
                  episode_id: Optional[str] = None, ledger: Optional["ExperienceLedger"] = None) -> ExportReport:
    """Export a running memory: buffered and deferred writes are stored first; times as the tools take them.

    ``ledger``: the open experience ledger, whose records still waiting for a vector are embedded first.
    """
    engine.flush()
    if ledger is not None:
        ledger.embed_pending()
    episode = engine.episode_number(episode_id) if episode_id else None
    return export_file(engine.store.path, out_path, engine.resolve_time(since), engine.resolve_time(until), episode)
