"""Write scopes: which parts of the memory a committed transaction changed.

The query cache must never serve an answer that a later write could have
changed. Rather than trusting every writer to say what it touched (a writer
that forgets would serve stale answers), the store reports each committed
transaction's statements (``MemoryStore.commits``) and this module
reads the tables they wrote. Each scope has a generation counter; a cached
answer remembers the generations of the scopes it depends on and is stale as
soon as one moved.

Scopes (the granularity)
- ``layer:<name>``: observations inserted into that layer. Read from the
  INSERT's own rows, so a battery reading does not invalidate a question
  about the ``detections`` layer.
- ``perception`` / ``body``: any perception (or manual) / interoception
  observation inserted; unfiltered perception questions depend on the first
  only, so body readings streaming at 1 Hz never invalidate them.
- ``layerset``: a layer this process had not seen got rows (the "no layer
  X; layers in memory are ..." notes depend on it).
- ``obs:*``: observations changed in a way not attributable to layers
  (consolidation promoting rows, archival, any UPDATE/DELETE, texts or
  places written without observation rows). Every observation question
  depends on it.
- ``gists``, ``entities`` (entities and edges), ``episodes``, ``experiences``,
  ``notes`` (MemFS: recall shows notes pinned near what it found).
- ``*``: anything else, or a commit whose statements are unknown (the store
  runs without its operation log). Every answer depends on it.

``meta`` writes (log sequence, consolidation marks) change no answer and are
ignored.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Iterable, Mapping, Optional, Sequence

from emem_ros.core.types import SourceType
from emem_ros.storage.events import Commit

ANY = "*"
OBS_ANY = "obs:*"
PERCEPTION = "perception"
BODY = "body"
LAYERSET = "layerset"
GISTS = "gists"
ENTITIES = "entities"
EPISODES = "episodes"
EXPERIENCES = "experiences"
NOTES = "notes"

_BODY = SourceType.INTEROCEPTION.value
_WRITE = re.compile(
    r"^\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)\s+([A-Za-z_][\w]*)"
    r"\s*(\(([^)]*)\))?",
    re.IGNORECASE,
)
_PLACEHOLDERS = re.compile(r"\bVALUES\s*\(\s*\?(?:\s*,\s*\?)*\s*\)\s*$", re.IGNORECASE)
"""A VALUES list of plain '?': the parameters line up with the column list."""
_TABLE_SCOPES = {
    "gists": GISTS, "gists_fts": GISTS,
    "entities": ENTITIES, "edges": ENTITIES,
    "episodes": EPISODES,
    "experiences": EXPERIENCES, "experiences_fts": EXPERIENCES,
    **{t: NOTES for t in ("fs_nodes", "fs_nodes_fts", "fs_blobs", "fs_chunks", "fs_chunks_fts", "fs_ops",
                          "fs_versions")},
}
_OBSERVATION_SIDE = {"texts", "texts_fts", "places"}
"""Written with observation rows; attributed to their layers when the transaction inserts some."""
_IGNORED = {"meta"}


def layer_scope(layer: str) -> str:
    return f"layer:{layer}"


def observation_scopes(layer: Optional[str]) -> tuple[str, ...]:
    """What a question over observations depends on (one layer, or all perception layers)."""
    if layer:
        return (layer_scope(layer), OBS_ANY, LAYERSET)
    return (PERCEPTION, OBS_ANY)


class WriteScopes:
    """Generation counters per scope, advanced by committed transactions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generations: dict[str, int] = {}
        self._layers: set[str] = set()
        self._sql_cache: dict[str, tuple[str, str, Optional[tuple[int, int]]]] = {}
        self.commits = 0

    # ------------------------------------------------------------------ reading
    def snapshot(self, scopes: Iterable[str]) -> dict[str, int]:
        """Current generations of ``scopes`` (``*`` is always included)."""
        with self._lock:
            wanted = set(scopes) | {ANY}
            return {s: self._generations.get(s, 0) for s in wanted}

    def unchanged(self, snapshot: Mapping[str, int]) -> bool:
        with self._lock:
            return all(self._generations.get(s, 0) == g for s, g in snapshot.items())

    def generation(self, scope: str) -> int:
        with self._lock:
            return self._generations.get(scope, 0)

    # ------------------------------------------------------------------ writing
    def bump(self, scopes: Iterable[str]) -> None:
        with self._lock:
            for scope in set(scopes):
                self._generations[scope] = self._generations.get(scope, 0) + 1

    def on_commit(self, commit: Commit) -> None:
        """The store's commit subscriber: classify the statements and bump their scopes."""
        self.commits += 1
        try:
            touched = self.classify(commit.statements)
        except Exception:  # never leave the cache trusting a write it could not read
            touched = {ANY}
        if commit.reshaped:
            touched.add(OBS_ANY)
        if touched:
            self.bump(touched)

    def classify(self, statements: Optional[Sequence[Any]]) -> set[str]:
        if statements is None:
            return {ANY}
        touched: set[str] = set()
        observation_side = False
        attributed = False
        for sql, params, many in statements:
            verb, table, columns = self._parse(sql)
            if not table or table in _IGNORED:
                continue
            if table == "observations":
                layers = self._inserted_layers(verb, columns, params, many)
                if layers is None:
                    touched.add(OBS_ANY)
                else:
                    attributed = True
                    for layer, body in layers:
                        touched.add(layer_scope(layer))
                        touched.add(BODY if body else PERCEPTION)
                        if layer not in self._layers:
                            self._layers.add(layer)
                            touched.add(LAYERSET)
            elif table in _OBSERVATION_SIDE:
                observation_side = True
            elif table in _TABLE_SCOPES:
                touched.add(_TABLE_SCOPES[table])
            else:
                touched.add(ANY)
        if observation_side and not attributed:
            touched.add(OBS_ANY)
        return touched

    def _parse(self, sql: str) -> tuple[str, str, Optional[tuple[int, int]]]:
        """(verb, table, (layer column, source_type column) of an INSERT) — cached per SQL text."""
        cached = self._sql_cache.get(sql)
        if cached is not None:
            return cached
        match = _WRITE.match(sql)
        if not match:
            result: tuple[str, str, Optional[tuple[int, int]]] = ("", "", None)
        else:
            verb = sql.lstrip().split(None, 1)[0].upper()
            table = match.group(1).lower()
            columns = None
            values = _PLACEHOLDERS.search(sql)
            if verb in ("INSERT", "REPLACE") and match.group(3) and values:
                names = [c.strip().lower() for c in match.group(3).split(",")]
                if "layer" in names and "source_type" in names and values.group(0).count("?") == len(names):
                    columns = (names.index("layer"), names.index("source_type"))
            result = (verb, table, columns)
        if len(self._sql_cache) < 1024:
            self._sql_cache[sql] = result
        return result

    @staticmethod
    def _inserted_layers(verb: str, columns: Optional[tuple[int, int]], params: Any,
                         many: bool) -> Optional[set[tuple[str, bool]]]:
        """(layer, is_body) of the rows an INSERT adds; None when they cannot be read."""
        if verb not in ("INSERT", "REPLACE") or columns is None:
            return None
        rows = params if many else [params]
        out: set[tuple[str, bool]] = set()
        layer_at, source_at = columns
        width = max(layer_at, source_at)
        for row in rows:
            kind = type(row)  # exact list/tuple first: an ABC isinstance per row costs more than the rest
            if (kind is not list and kind is not tuple and isinstance(row, Mapping)) or len(row) <= width:
                return None
            out.add((row[layer_at], row[source_at] == _BODY))
        return {(str(layer), body) for layer, body in out}
