"""The query cache: a question asked again is answered from memory while nothing it depends on changed.

Where it hooks: ``MemoryTools.call`` (typed calls, the eMEM-style facade,
``dispatch_tool_call``, ROS and MCP all go through it) asks ``answer`` for
every tool whose ``ToolDef`` has a ``CachePolicy``. A call is a hit when an
earlier answer of the same tool has

1. the same arguments apart from the question text (times resolved to
   absolute seconds first, so "-10m" asked a minute later is another window);
2. a question with the same keywords (lower-case words without a handful of
   function words: our search is hybrid, so different words can rank
   differently) whose embedding's cosine with this one is at least
   ``query_cache_threshold`` (0.95 by default: with MiniLM "where is the red
   mug" ~ "where's the red mug?" is 0.96, while "open the kitchen door" ~
   "close the kitchen door" is 0.92 and is also stopped by the keywords);
3. no write since in any scope the answer depends on (see ``scopes.py``:
   per layer, perception versus body readings, gists, entities, episodes,
   experiences, and everything for unknown writes, including a commit by
   another process, seen as the file's ``log_seq`` moving past our log);
4. an age under ``query_cache_ttl`` wall-clock seconds.

A hit returns a copy rendered at the current clock (ages like "4m ago" are
recomputed) with a note that says it came from the cache and from which
question. Tools whose answer depends on the clock itself (body_status,
get_current_context, temporal_query with last_n_minutes) are not cached or
keyed by the clock; with ``recency_weight`` > 0 ranked answers depend on the
clock, so those calls bypass the cache.

Before looking up, the cache makes pending writes visible (flushes working
memory, applies deferred ledger records) exactly as the tools would, so a
buffered observation is never missed. The generations are read before the
answer is computed, so a write racing with the computation makes the new
entry stale rather than wrongly fresh.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from emem_ros.core.errors import EmemError
from emem_ros.tools import scopes as sc
from emem_ros.tools.results import quoted
from emem_ros.tools.scopes import WriteScopes
from emem_ros.tools.spec import CachePolicy, ToolDef

if TYPE_CHECKING:
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)

CACHE_NOTE = "answered from memory cache"
"""Every cached answer carries a note starting with this."""
_WORD = re.compile(r"[a-z0-9]+")
_FUNCTION_WORDS = frozenset(
    "a an the is are am was were be been being s do does did please me my i you it its of".split())


def keywords(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _FUNCTION_WORDS)


def cache_note_of(result: Any) -> Optional[str]:
    """The cache note of a result, or None when it was computed afresh."""
    for note in getattr(result, "notes", None) or ():
        if isinstance(note, str) and note.startswith(CACHE_NOTE):
            return note
    return None


@dataclass
class _Entry:
    tool: str
    key: str
    question: Optional[str]
    words: frozenset[str]
    vector: Optional[np.ndarray]
    snapshot: dict[str, int]
    result: Any
    asked_at: float


@dataclass
class _Lookup:
    key: str
    question: Optional[str]
    words: frozenset[str]
    vector: Optional[np.ndarray]


class QueryCache:
    def __init__(self, engine: "Engine", threshold: float = 0.95, size: int = 256, ttl: float = 300.0,
                 enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.threshold = float(threshold)
        self.size = max(1, int(size))
        self.ttl = float(ttl)
        self.enabled = bool(enabled)
        self.clock = clock
        """Wall-clock seconds for ages and the TTL (monotonic; replaceable in tests)."""
        self.scopes = WriteScopes()
        engine.store.commits.subscribe(self.scopes.on_commit)
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._by_key: dict[str, list[int]] = {}
        self._next = 0
        self._foreign_seq = -1
        self.hits = 0
        self.misses = 0
        self.bypassed = 0
        self.stale = 0
        self.expired = 0
        self.evicted = 0

    @classmethod
    def for_engine(cls, engine: "Engine") -> "QueryCache":
        config = engine.config
        return cls(engine, threshold=config.query_cache_threshold, size=config.query_cache_size,
                   ttl=config.query_cache_ttl, enabled=config.query_cache_enabled)

    # ------------------------------------------------------------------ answering
    def answer(self, tool: ToolDef, arguments: dict[str, Any], compute: Callable[[], Any]) -> Any:
        """``compute()``'s result, or an equal earlier one from cache where ``tool``'s policy allows.

        ``arguments`` are the call's bound arguments with defaults applied.
        """
        policy = tool.cache
        if policy is None or not self.enabled or (
                policy.ranked_with_recency and self.engine.config.recency_weight > 0):
            self.bypassed += 1
            return compute()
        lookup = self._lookup_for(tool.name, dict(arguments), policy, frozenset(tool.time_params))
        if lookup is None:
            self.bypassed += 1
            return compute()
        self._make_writes_visible()
        hit = self._find(tool.name, lookup)
        if hit is not None:
            return hit
        snapshot = self.scopes.snapshot(policy.depends(arguments))
        result = compute()
        self._store(tool.name, lookup, snapshot, result)
        return result

    def _lookup_for(self, tool: str, arguments: dict[str, Any], policy: CachePolicy,
                    times: frozenset[str]) -> Optional[_Lookup]:
        """The cache key and question of a call; None when this call cannot be cached."""
        question: Optional[str] = None
        if policy.query_param is not None:
            raw = arguments.pop(policy.query_param, None)
            if raw is not None and not isinstance(raw, str):
                return None
            question = raw.strip() if isinstance(raw, str) and raw.strip() else None
        for name in times:
            value = arguments.get(name)
            if value is not None:
                try:
                    arguments[name] = self.engine.resolve_time(value)
                except (EmemError, ValueError, TypeError):
                    return None
        if any(arguments.get(name) is not None for name in policy.clock_args):
            arguments["@now"] = self.engine.now()
        try:
            key = json.dumps([tool, arguments, question is None], sort_keys=True, allow_nan=False, default=repr)
        except (TypeError, ValueError):
            return None
        vector = None
        if question is not None:
            try:
                vector = np.asarray(self.engine.embed_query(question), dtype=np.float32)
            except Exception:  # the tool will report the embedder's failure itself
                return None
        return _Lookup(key, question, keywords(question) if question else frozenset(), vector)

    def _make_writes_visible(self) -> None:
        """What the tools do first: buffered observations and deferred ledger records reach SQLite.

        Then a commit this process did not make (another process writing the same
        file moves its ``log_seq`` past our log) counts as a write to everything.
        """
        store = self.engine.store
        self.engine.flush_for_query()  # best-effort: a question never fails because storing does
        oplog = store.oplog
        if oplog is None:
            return
        row = store.reader().execute("SELECT value FROM meta WHERE key='log_seq'").fetchone()
        seq = int(row[0]) if row else 0
        if seq != oplog.last_seq and seq != self._foreign_seq:
            self._foreign_seq = seq
            self.scopes.bump([sc.ANY])

    # ------------------------------------------------------------------ entries
    def _find(self, tool: str, lookup: _Lookup) -> Optional[Any]:
        now = self.clock()
        with self._lock:
            best: Optional[tuple[float, _Entry]] = None
            for number in list(self._by_key.get(lookup.key, ())):
                entry = self._entries[number]
                if now - entry.asked_at > self.ttl or now < entry.asked_at:
                    self._drop(number)
                    self.expired += 1
                    continue
                if not self.scopes.unchanged(entry.snapshot):
                    self._drop(number)
                    self.stale += 1
                    continue
                if lookup.vector is None or entry.vector is None:
                    similarity = 1.0 if lookup.vector is None and entry.vector is None else -1.0
                elif entry.words != lookup.words:
                    continue
                else:
                    similarity = float(entry.vector @ lookup.vector)
                if similarity >= self.threshold - 1e-6 and (best is None or similarity > best[0]):
                    best = (similarity, entry)
                    self._entries.move_to_end(number)
            if best is None:
                self.misses += 1
                return None
            self.hits += 1
            entry = best[1]
        return self._answer(entry, now)

    def _answer(self, entry: _Entry, now: float) -> Any:
        age = max(0.0, now - entry.asked_at)
        if entry.question is not None:
            note = f"{CACHE_NOTE}: same as {quoted(entry.question, 120)} asked {age:.0f} s ago"
        else:
            note = f"{CACHE_NOTE}: same call as {age:.0f} s ago"
        note += "; nothing it depends on was written since"
        return _copy(entry.result, now=self.engine.now(), note=note)

    def _store(self, tool: str, lookup: _Lookup, snapshot: dict[str, int], result: Any) -> None:
        if not dataclasses.is_dataclass(result) or not hasattr(result, "notes"):
            return  # a result that cannot say it came from the cache is never served from it
        entry = _Entry(tool, lookup.key, lookup.question, lookup.words, lookup.vector, snapshot,
                       _copy(result), self.clock())
        with self._lock:
            number = self._next
            self._next += 1
            self._entries[number] = entry
            self._by_key.setdefault(lookup.key, []).append(number)
            while len(self._entries) > self.size:
                oldest = next(iter(self._entries))
                self._drop(oldest)
                self.evicted += 1

    def _drop(self, number: int) -> None:
        entry = self._entries.pop(number, None)
        if entry is None:
            return
        numbers = self._by_key.get(entry.key)
        if numbers is not None:
            numbers.remove(number)
            if not numbers:
                del self._by_key[entry.key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._by_key.clear()

    def stats(self) -> dict[str, Any]:
        looked_up = self.hits + self.misses
        return {
            "enabled": self.enabled, "hits": self.hits, "misses": self.misses,
            "hit_rate": self.hits / looked_up if looked_up else None, "bypassed": self.bypassed,
            "stale": self.stale, "expired": self.expired, "evicted": self.evicted,
            "entries": len(self._entries), "size": self.size, "threshold": self.threshold, "ttl": self.ttl,
        }


def _copy(result: Any, now: Optional[float] = None, note: Optional[str] = None) -> Any:
    """A copy whose lists are its own; optionally re-timed and with a note added."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(result):
        value = getattr(result, f.name)
        if isinstance(value, list):
            changes[f.name] = list(value)
    if now is not None and hasattr(result, "now"):
        changes["now"] = now
    if note is not None:
        changes["notes"] = [*result.notes, note]
    return dataclasses.replace(result, **changes)
