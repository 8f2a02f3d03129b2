"""What every tool needs: the engine (store, clock, embedding), the catalog, rankers, and argument checks."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import InvalidInputError, TimeExpressionError, UnknownNodeError
from emem_ros.core.numbers import is_finite_number
from emem_ros.core.types import NodeKind, make_id
from emem_ros.engine import Engine
from emem_ros.storage.events import Commit
from emem_ros.tools.catalog import TextCatalog
from emem_ros.tools.filters import Filters, area, episode_number
from emem_ros.tools.obs_memo import ObservationKinds, ObservationRefs
from emem_ros.tools.ranking import GistRanker, TextRanker
from emem_ros.tools.reads import ToolReads
from emem_ros.tools.results import fmt_time
from emem_ros.tools.vector_memo import TextVectors

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.memfs import MemFS

MAX_RESULTS = 100


class ToolEnv:
    """A robot's memory behind the tool runners (``reads.ToolContext``); ``reads`` are its ``ToolReads``."""

    memfs: Optional[Callable[[], MemFS]] = None
    """The memory's MemFS (``emem_ros/memfs``), when the facade offers one: the fs_* tools, agent sessions."""
    reads: ToolReads
    """``sqlite_reads.SqliteReads`` of this env, set by its builder (that module imports the runners' modules)."""
    store_name = "memory"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = engine.store
        self.catalog = TextCatalog(engine.store)
        self.texts = TextRanker(engine.store, self.catalog)
        self.gists = GistRanker(engine.store, self.catalog)
        self.obs_kinds = ObservationKinds()
        self.obs_refs = ObservationRefs()
        self.text_vectors = TextVectors(engine.store)
        self.texts.vectors = self.text_vectors.get
        engine.store.commits.subscribe(self._on_commit)
        engine.store.commits.subscribe(self.obs_kinds.on_commit)
        engine.store.commits.subscribe(self.obs_refs.on_commit)

    def _on_commit(self, commit: Commit) -> None:
        """Rows left the hot tables or arrived out of order: the per-text catalog is rebuilt on next use
        (rows a forget deleted, ``described``, are dropped from it instead).

        Texts or gists deleted (or an unknown transaction): keyword document frequencies are read afresh.
        """
        if commit.removed_observations:
            self.catalog.removed(commit.number, commit.removed_observations)
        if commit.reshaped and not commit.described:
            self.catalog.invalidate()
        if commit.reshaped or commit.removed_texts or _deletes(commit):
            self.texts.keywords.forget()
            self.gists.keywords.forget()
            self.text_vectors.forget()
        elif any(_EMBEDDINGS.match(sql) for sql, _, _ in commit.statements or ()):
            self.text_vectors.forget()
        if commit.rewritten:
            self.gists.reset()

    @property
    def config(self) -> MemoryConfig:
        return self.engine.config

    def now(self) -> float:
        return self.engine.now()

    def prepare(self) -> float:
        """Make everything added so far visible, best-effort; returns the memory clock's now.

        A question never fails because storing does (embedder down): it is
        answered from what is stored, and ``MemoryTools.call`` adds a note
        saying how many observations still wait (``Engine.flush_for_query``).
        """
        self.engine.flush_for_query()
        self.catalog.sync()
        return self.now()

    def fmt(self, stamp: float) -> str:
        return fmt_time(stamp, self.now())

    # ------------------------------------------------------------------ argument checks
    def time(self, name: str, value: Any) -> Optional[float]:
        try:
            return self.engine.resolve_time(value)
        except TimeExpressionError as exc:
            raise TimeExpressionError(f"{name}: {exc}") from None

    @staticmethod
    def count(value: Any, name: str = "n_results", default: int = 10) -> int:
        if value is None:
            return default
        if not is_finite_number(value) or int(value) != value:
            raise InvalidInputError(f"{name} must be a whole number, got {value!r}")
        if value < 1:
            raise InvalidInputError(f"{name} must be at least 1, got {value!r}")
        return min(int(value), MAX_RESULTS)

    @staticmethod
    def positive(value: Any, name: str, default: float) -> float:
        if value is None:
            return default
        if not is_finite_number(value) or value <= 0:
            raise InvalidInputError(f"{name} must be a positive number, got {value!r}")
        return float(value)

    @staticmethod
    def text(value: Any, name: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise InvalidInputError(f"{name} must be a non-empty string, got {value!r}")
        return value.strip()

    @staticmethod
    def layer(value: Any) -> Optional[str]:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise InvalidInputError(f"layer must be a layer name (a string), got {value!r}")
        return value.strip() or None

    def episode(self, value: Any) -> Optional[int]:
        """Episode row number of an id the caller gave; unknown ids are an error, not an empty answer."""
        if value is None or value == "":
            return None
        number = episode_number(value)
        exists = self.store.reader().execute("SELECT 1 FROM episodes WHERE id = ?", (number,)).fetchone()
        if not exists:
            latest = self.store.list_episodes(last_n=3)
            known = ", ".join(f"{e.id} ({e.name})" for e in latest)
            raise UnknownNodeError(f"no episode {make_id(NodeKind.EPISODE, number)} in this memory"
                                   + (f"; the latest are {known}" if known else "; no episode was recorded yet"))
        return number

    def filters(self, layer: Any = None, time_after: Any = None, time_before: Any = None, near_x: Any = None,
                near_y: Any = None, spatial_radius: Any = None, episode_id: Any = None) -> Filters:
        after, before = self.time("time_after", time_after), self.time("time_before", time_before)
        if after is not None and before is not None and after > before:
            raise InvalidInputError(
                f"time_after ({fmt_time(after, self.now())}) is later than time_before "
                f"({fmt_time(before, self.now())}); swap them")
        center, radius = area(near_x, near_y, spatial_radius)
        return Filters(layer=self.layer(layer), after=after, before=before, center=center, radius=radius,
                       episode=self.episode(episode_id))

    def query_vector(self, text: str) -> np.ndarray:
        return self.engine.embed_query(text)

    def describe(self, f: Filters) -> str:
        return "" if f.empty else f.describe(self.fmt)

    # ------------------------------------------------------------------ helpful notes
    def layer_notes(self, layer: Optional[str]) -> list[str]:
        """Why a layer filter may have matched nothing, in words a planner can act on."""
        if not layer:
            return []
        known = self.catalog.layers
        if layer in known:
            return []
        if layer in self.catalog.body_layers:
            return [f"'{layer}' holds body readings; ask body_status for those"]
        listing = ", ".join(known) if known else "none yet"
        return [f"there is no layer '{layer}'; layers in memory: {listing}"]

    def empty_notes(self, f: Filters) -> list[str]:
        notes = self.layer_notes(f.layer)
        if not notes and not f.empty:
            notes.append("nothing passes the filters (" + f.describe(self.fmt) + "); try fewer filters")
        return notes


_REWRITE = re.compile(r"^\s*(?:DELETE\s+FROM|REPLACE\s+INTO|INSERT\s+OR\s+REPLACE\s+INTO)\s+(texts|gists|texts_fts|gists_fts)\b",
                      re.IGNORECASE)
"""Statements that remove or replace keyword documents (a text's or gist's words are never updated in place)."""
_EMBEDDINGS = re.compile(r"^\s*UPDATE(?:\s+OR\s+\w+)?\s+texts\s+SET\b(?=.*\bembedding\b)", re.IGNORECASE | re.DOTALL)
"""Statements that (re)write text embeddings: a back-fill or a re-embedding with a new model."""
_FTS_COMMAND = re.compile(r"INTO\s+(texts_fts|gists_fts)\s*\(\s*\1\b", re.IGNORECASE)


def _deletes(commit: Commit) -> bool:
    """The transaction may have deleted or rewritten texts or gists (its statements unknown: assume so)."""
    if commit.statements is None:
        return True
    return any(_REWRITE.match(sql) or _FTS_COMMAND.search(sql) for sql, _, _ in commit.statements)
