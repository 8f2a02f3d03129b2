"""The stack of active episodes: what new observations belong to, and who hears when one ends.

Episodes nest (SUBTASK_OF): the innermost active one takes the observations.
The stack is rebuilt from the store after a restart, so an episode left
active by a crash is active again.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.types import EpisodeStatus, NodeKind, make_id, parse_id
from emem_ros.engine.validation import clean_metadata
from emem_ros.storage.store import MemoryStore

log = logging.getLogger(__name__)

EpisodeHook = Callable[[int, bool], None]
"""Called with (episode row number, consolidate) after an episode ended."""


def episode_number(episode_id: Any) -> int:
    """The row number of an episode id ('ep-3'); a plain-words error for anything else."""
    try:
        kind, number = parse_id(episode_id)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from exc
    if kind is not NodeKind.EPISODE:
        raise InvalidInputError(f"{episode_id} is not an episode id (those look like 'ep-3')")
    return number


class EpisodeStack:
    def __init__(self, store: MemoryStore, clock: Callable[[], float],
                 before_change: Callable[[], None]) -> None:
        self._store = store
        self._clock = clock
        self._before_change = before_change
        """Store what the ending or starting episode saw (best-effort; see ``Engine``)."""
        self._lock = threading.RLock()
        self._hooks: list[EpisodeHook] = []
        rows = store.reader().execute(
            "SELECT id FROM episodes WHERE status = ? ORDER BY start, id", (EpisodeStatus.ACTIVE.value,)).fetchall()
        self._active: list[int] = [int(r[0]) for r in rows]

    @property
    def active_number(self) -> Optional[int]:
        with self._lock:
            return self._active[-1] if self._active else None

    @property
    def active_id(self) -> Optional[str]:
        number = self.active_number
        return make_id(NodeKind.EPISODE, number) if number is not None else None

    def start(self, name: Any, parent_episode_id: Optional[str] = None, goal: Optional[str] = None,
              metadata: Optional[dict[str, Any]] = None) -> str:
        """Open an episode; with a parent it is a SUBTASK_OF it, and FOLLOWS its last sibling."""
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError("an episode needs a non-empty name")
        parent = episode_number(parent_episode_id) if parent_episode_id else None
        self._before_change()
        with self._lock:
            number = self._store.create_episode(name.strip(), self._clock(), parent, goal, clean_metadata(metadata))
            self._active.append(number)
        return make_id(NodeKind.EPISODE, number)

    def end(self, consolidate: bool = True, result: Optional[str] = None, reflection: Optional[str] = None,
            success: Optional[bool] = None) -> Optional[str]:
        """Close the innermost active episode; its id, or None when none was active."""
        with self._lock:
            if not self._active:
                return None
            self._before_change()
            number = self._active.pop()
        self._store.finish_episode(number, self._clock(), result=result, reflection=reflection, success=success)
        for hook in list(self._hooks):
            try:
                hook(number, consolidate)
            except Exception:
                log.exception("episode-end hook failed for episode %s", number)
        return make_id(NodeKind.EPISODE, number)

    def on_end(self, hook: EpisodeHook) -> None:
        self._hooks.append(hook)
