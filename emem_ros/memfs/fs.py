"""MemFS: the planners' filesystem over one memory (``memory.fs``): the storage core plus agent sessions.

``session(agent_id)`` opens a session (its own /tmp, its conversation);
``session_for`` finds the open one a tool call belongs to; sessions opened
with an episode (``start_episode(..., agent_id=...)``) end with it. The
``system`` session is the developer's view (``emem fs``).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Optional

from emem_ros.memfs.core import MAX_FILE_BYTES, FsCore, check_text
from emem_ros.memfs.layout import SYSTEM
from emem_ros.memfs.session import Session

if TYPE_CHECKING:
    from emem_ros.engine import Engine

__all__ = ["MemFS", "MAX_FILE_BYTES", "check_text"]

log = logging.getLogger(__name__)


class MemFS(FsCore):
    """The filesystem over one memory's engine. ``session(agent_id)`` is how agents use it."""

    def __init__(self, engine: "Engine") -> None:
        self._lock = threading.RLock()
        self._sessions: dict[str, Session] = {}
        self._default: Optional[Session] = None
        self._system: Optional[Session] = None
        self._episodes: dict[str, list[Session]] = {}
        super().__init__(engine)

    # ------------------------------------------------------------------ sessions
    def session(self, agent_id: str = "agent", conversation: Optional[str] = None) -> Session:
        """Open a session for ``agent_id`` (a context manager: ``end()`` clears its /tmp)."""
        with self._lock:
            session = Session(self, agent_id)
            self._sessions[session.id] = session
            if self._default is None or self._default.ended:
                self._default = session
        if conversation is not None:
            session.set_conversation(conversation)
        return session

    def session_for(self, agent_id: Optional[str] = None) -> Session:
        """The open session of ``agent_id`` (newest), else the default one (opened on first use)."""
        with self._lock:
            if agent_id:
                for session in reversed(list(self._sessions.values())):
                    if session.agent_id == agent_id and not session.ended:
                        return session
                return self.session(agent_id)
            if self._default is None or self._default.ended:
                open_ = [s for s in self._sessions.values() if not s.ended]
                self._default = open_[-1] if open_ else self.session("agent")
            return self._default

    @property
    def system(self) -> Session:
        """The developer's and the system's view: every path, no layout limits, owner ``system``."""
        with self._lock:
            if self._system is None:
                self._system = Session(self, SYSTEM, system=True)
            return self._system

    def open_for_episode(self, agent_id: str, episode_id: str) -> Session:
        """A session for ``agent_id`` that ends with episode ``episode_id`` (ROS start_episode with agent_id)."""
        session = self.session(agent_id)
        with self._lock:
            self._episodes.setdefault(episode_id, []).append(session)
            self._default = session
        return session

    def on_episode_end(self, episode_number: int, consolidate: bool = True) -> None:
        """The engine's episode-end hook: end the sessions opened with that episode."""
        with self._lock:
            sessions = self._episodes.pop(f"ep-{episode_number}", [])
        for session in sessions:
            try:
                session.end()
            except Exception:
                log.exception("could not end MemFS session %s with its episode", session.id)

    def forget_session(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.id, None)
            if self._default is session:
                self._default = None

    def open_sessions(self) -> list[Session]:
        with self._lock:
            return [s for s in self._sessions.values() if not s.ended]

    def close(self) -> None:
        """End open sessions (their /tmp is cleared), write access times. Safe twice."""
        if self.closed:
            return
        for session in self.open_sessions():
            try:
                session.end()
            except Exception:
                log.exception("could not end MemFS session %s at close", session.id)
        super().close()

