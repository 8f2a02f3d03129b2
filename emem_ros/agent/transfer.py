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
    from emem_ros.memory import Memory

__all__ = ["ExportReport", "ImportReport", "TransferError", "FORMAT", "VERSION", "export_memory", "export_file",
           "import_file", "verify"]


def export_memory(memory: "Memory", out_path: str | Path, since: Any = None, until: Any = None,
                  episode_id: Optional[str] = None) -> ExportReport:
    """Export a running memory: buffered and deferred writes are stored first; times as the tools take them."""
    memory.flush()
    store = memory.store
    if callable(getattr(store, "apply_deferred", None)):
        store.apply_deferred()
    if memory._ledger is not None:
        memory._ledger.embed_pending()
    episode = memory._episode_number(episode_id) if episode_id else None
    return export_file(store.path, out_path, memory.resolve_time(since), memory.resolve_time(until), episode)
