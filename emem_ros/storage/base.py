"""What the parts of ``MemoryStore`` may use of one another, declared once.

The store is assembled from focused parts (``transactions``, ``model_check``,
``derived_indexes``, ``ingest_write``, ``observation_reads``, ``graph``);
each inherits this base, so its use of another part's attribute or method
is declared, typed and checked, not reached for.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from emem_ros.core.config import MemoryConfig
from emem_ros.indexes.spatial_index import SpatialIndex
from emem_ros.indexes.vector_index import VectorIndex
from emem_ros.storage.events import CommitFeed
from emem_ros.storage.oplog import OpLog
from emem_ros.storage.state import StoreState

if TYPE_CHECKING:
    from emem_ros.storage.place_cache import PlaceCache
    from emem_ros.storage.text_names import TextNames


class StoreBase:
    config: MemoryConfig
    dim: int
    model_name: str
    path: Path
    index_dir: Path
    log_dir: Path
    cell_size: float
    state: StoreState
    oplog: Optional[OpLog]
    commits: CommitFeed
    vectors: dict[str, VectorIndex]
    places: SpatialIndex
    place_cache: "PlaceCache"
    text_names: "TextNames"
    needs_reembed: bool
    vectors_pending: bool
    open_report: dict[str, Any]
    redone: int
    gist_cutoff: float

    if TYPE_CHECKING:  # defined by the parts named in each comment
        def reader(self) -> sqlite3.Connection: ...  # store.py

        def write(self) -> AbstractContextManager[sqlite3.Connection]: ...  # transactions.py

        def apply_deferred(self) -> int: ...  # transactions.py

        def update_index(self, name: str, update: Callable[[], None]) -> None: ...  # derived_indexes.py

        def repair_stale(self) -> None: ...  # derived_indexes.py

        def open_indexes(self) -> None: ...  # derived_indexes.py

        def prune_gist_graph(self) -> int: ...  # derived_indexes.py

        def cell_box(self, cx: int, cy: int, cz: int) -> tuple[float, ...]: ...  # derived_indexes.py

        def forget_texts(self, texts: Sequence[str]) -> None: ...  # ingest_write.py
