"""What a committed transaction changed, announced once to everything that keeps a derived view.

Caches and mirrors (the place mirror, the id->text memo, the tools' text
catalog, the query cache's write scopes) subscribe to the store's commits
instead of being told by each writer: a writer only *announces* what it
removed (``MemoryStore.announce``) inside its transaction, and after COMMIT
the store publishes one ``Commit`` to every subscriber. So a new writer can
not forget a cache, and a new cache can not miss a writer.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from emem_ros.storage.logcodec import Statement

log = logging.getLogger(__name__)

PlaceKey = tuple[int, str, int, int, int]
"""(text_id, layer, cx, cy, cz): the places table's unique key."""
RemovedObservation = tuple[int, Optional[int], str, Optional[int], str, float]
"""(id, text_id, layer, episode_id, source_type, stamp) of a deleted observation row (forget)."""


@dataclass
class Announcement:
    """What the code inside one transaction says it removed or rewrote (not visible in its SQL alone)."""

    removed_texts: list[tuple[int, str]] = field(default_factory=list)
    """Text rows deleted: (id, text)."""
    removed_places: list[int] = field(default_factory=list)
    """Place rows deleted (their ids)."""
    reshaped: bool = False
    """Observations left the hot tables or arrived out of order (archival, import): per-text views rebuild."""
    touched_places: list[PlaceKey] = field(default_factory=list)
    """Place rows upserted."""
    rewritten: bool = False
    """Rows views treat as append-only (gists, entities, episodes) were updated or deleted (forget): reset them."""
    removed_observations: list[RemovedObservation] = field(default_factory=list)
    """Observation rows deleted (forget), for views that can drop them instead of rebuilding."""
    opaque: bool = False
    """Some announcer said ``reshaped`` without describing it (archival, import): per-text views rebuild."""

    def empty(self) -> bool:
        return not (self.removed_texts or self.removed_places or self.reshaped or self.touched_places
                    or self.rewritten or self.removed_observations)


@dataclass(frozen=True)
class Commit:
    """One committed write transaction, as its subscribers see it."""

    statements: Optional[list[Statement]]
    """Its mutating statements (deferred ledger records first); None when unknown (no operation log)."""
    removed_texts: tuple[tuple[int, str], ...] = ()
    removed_places: tuple[int, ...] = ()
    reshaped: bool = False
    touched_places: tuple[PlaceKey, ...] = ()
    rewritten: bool = False
    removed_observations: tuple[RemovedObservation, ...] = ()
    described: bool = False
    """``reshaped``, but every change to who-said-what-where (text, layer, episode, stamp of observations) is
    in ``removed_observations``: a per-text view may drop those rows instead of rebuilding."""
    number: int = 0
    """The store's commit count at this commit (``MemoryStore.wait_published``: a reader snapshot's position)."""


Subscriber = Callable[[Commit], None]


class CommitFeed:
    """The subscribers of a store's commits; called in subscription order, after COMMIT, under the writer lock."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def publish(self, commit: Commit) -> None:
        """Tell everyone; a failing subscriber is logged and never fails the (committed) write."""
        for subscriber in list(self._subscribers):
            try:
                subscriber(commit)
            except Exception:
                log.exception("a commit subscriber failed")
