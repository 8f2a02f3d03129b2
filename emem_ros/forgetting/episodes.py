"""Episodes re-summarised after a forget: from what remains, through end_episode's summariser.

The erase scrubs an episode's own texts ("[forgotten]" where they quoted
what went) and re-summarises or removes the gists of the observations that
went; the episode's summary, written by end_episode's consolidation from
those gists, is then stale (counts, places, quotes). Every consolidated
episode that lost observations or had a text scrubbed is summarised again by
``consolidation.episodes.summarise_episode`` with the memory's summary
writer: the LLM when one is configured (it sees only what remains: the
re-summarised gists, sub-episodes, the body line and the scrubbed
name/goal/result), the plain digest otherwise. What comes back is scrubbed
once more with the forget's patterns, so an LLM that invents the words
cannot put them back.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

import numpy as np

from emem_ros.consolidation.episodes import summarise_episode
from emem_ros.forgetting.erase import SCRUBBED
from emem_ros.storage import codec
from emem_ros.storage.sqlutil import chunked, marks

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.consolidation.summaries import SummaryWriter
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)


def episodes_of(conn: Any, observation_ids: Iterable[int]) -> set[int]:
    """The episodes the observations belong to (read before they are deleted)."""
    found: set[int] = set()
    for chunk in chunked(sorted(observation_ids)):
        found |= {r[0] for r in conn.execute(
            f"SELECT DISTINCT episode_id FROM observations WHERE episode_id IS NOT NULL AND id IN ({marks(len(chunk))})",
            chunk)}
    return found


def resummarise(engine: "Engine", writer: "SummaryWriter", numbers: Iterable[int],
                patterns: Sequence[Optional[re.Pattern[str]]]) -> int:
    """Summarise the consolidated ones of ``numbers`` again; returns how many were re-written."""
    store = engine.store
    done = 0
    writer.reset()
    for number in sorted(set(numbers)):
        row = store.reader().execute("SELECT status, consolidated FROM episodes WHERE id=?", (number,)).fetchone()
        if row is None or row[0] == "active" or not row[1]:
            continue  # gone, or not summarised yet: its consolidation will summarise what remains
        summary, source = summarise_episode(engine, writer, store.get_episode(number), number)
        summary = scrubbed(summary, patterns)
        vector = engine.embed_texts([summary])[0] if summary else None
        with store.write() as conn:
            conn.execute("UPDATE episodes SET summary=?, embedding=? WHERE id=?",
                         (summary, codec.vector_to_blob(vector) if vector is not None else None, number))
            store.announce(rewritten=True)
        index = store.vectors["episodes"]
        store.update_index("episodes", functools.partial(index.remove, [number]))
        if vector is not None:
            store.update_index("episodes", functools.partial(index.add, np.array([number]), vector.reshape(1, -1)))
        log.info("episode %d re-summarised after a forget (%s)", number, source)
        done += 1
    return done


def scrubbed(text: str, patterns: Sequence[Optional[re.Pattern[str]]]) -> str:
    for pattern in patterns:
        if pattern is not None and text:
            text = pattern.sub(SCRUBBED, text)
    return text
