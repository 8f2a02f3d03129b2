"""``ToolReads`` over a robot's SQLite memory: the existing read functions, bound to one ``ToolEnv``.

Each method hands its arguments to the function that always answered it
(``perception.ranked_hits``, ``locate._locate``...): the robot's answers and
their cost are those functions', the runners only reach them through
``env.reads`` so that the fleet can put its own reads behind the same runners.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from emem_ros.consolidation.state import read_body_scales
from emem_ros.core.types import Position, SourceType
from emem_ros.memfs.notes import pinned_near
from emem_ros.tools import context, episodes, knowledge, locate, perception
from emem_ros.tools.aggregate import Aggregator
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.filters import Filters
from emem_ros.tools.ranking import Candidate, text_hits
from emem_ros.tools.results import EpisodeReport, Hit, LocateResult

_BODY = SourceType.INTEROCEPTION.value


class SqliteLocated:
    """``locate._locate``'s answer; its matches are its ranked texts as hits."""

    def __init__(self, env: ToolEnv, result: LocateResult, ranked: list[Candidate], agg: Aggregator) -> None:
        self._env, self.result, self._ranked, self._agg = env, result, ranked, agg

    @property
    def matched(self) -> bool:
        return bool(self._ranked)

    def matches(self, n: int) -> list[Hit]:
        return text_hits(self._env.store, self._agg, self._ranked[:n])


class SqliteBodyRows:
    """Body readings in the robot's ``observations`` (the (layer, stamp) index serves every read)."""

    _ROW = "SELECT o.id, o.stamp, o.value, o.text_id FROM observations o"

    def __init__(self, env: ToolEnv) -> None:
        self._env = env

    def layers(self) -> list[str]:
        # The catalog knows layers with hot readings; archival remembers layers whose readings all left.
        return sorted(set(self._env.catalog.body_layers) | set(self.stored_scales()))

    def stored_scales(self) -> dict[str, dict[str, Any]]:
        return read_body_scales(self._env.store.reader())

    def samples(self, layer: str, k: int) -> list[tuple[Optional[str], Optional[float]]]:
        return self._env.store.reader().execute(
            "SELECT t.text, o.value FROM observations o JOIN texts t ON t.id = o.text_id"
            " WHERE o.layer = ? AND o.source_type = ? ORDER BY o.stamp DESC LIMIT ?", (layer, _BODY, k)).fetchall()

    def rows(self, where: str, params: Sequence[Any], order: str, limit: int) -> list[tuple[Any, ...]]:
        return self._env.store.reader().execute(
            f"{self._ROW} WHERE {where} ORDER BY {order} LIMIT ?", (*params, limit)).fetchall()

    def stamp_at(self, where: str, params: Sequence[Any], offset: int) -> Optional[float]:
        row = self._env.store.reader().execute(
            f"SELECT o.stamp FROM observations o WHERE {where} ORDER BY o.stamp DESC LIMIT 1 OFFSET ?",
            [*params, offset]).fetchone()
        return float(row[0]) if row is not None else None

    def extreme(self, where: str, params: Sequence[Any], lowest: bool) -> Optional[tuple[Any, ...]]:
        best = "MIN" if lowest else "MAX"
        row = self._env.store.reader().execute(
            f"SELECT o.id, o.stamp, {best}(o.value), o.text_id FROM observations o WHERE {where}"
            " AND o.value IS NOT NULL", list(params)).fetchone()
        return tuple(row) if row is not None and row[0] is not None else None

    def texts(self, ids: Sequence[int]) -> dict[int, str]:
        """The store's name memo: a reading's text is read from SQLite once."""
        return self._env.store.text_names.get(sorted({i for i in ids if i is not None}))


class SqliteReads:
    """The robot's reads (``ToolReads``), bound to its tool environment."""

    def __init__(self, env: ToolEnv) -> None:
        self._env = env
        self._body = SqliteBodyRows(env)

    # perception
    def ranked_hits(self, query: str, f: Filters, n: int, now: float, gists: bool = True) -> list[Hit]:
        return perception.ranked_hits(self._env, query, f, n, now, gists)

    def nearby_hits(self, f: Filters, n: int, three_d: bool = False, gists: bool = True) -> list[Hit]:
        return perception.nearby_hits(self._env, f, n, three_d, gists)

    def area_gists(self, f: Filters, n: int) -> list[Hit]:
        return perception.area_gists(self._env, f, n)

    def timeline(self, f: Filters, n: int, order: str = "newest", gists: bool = True) -> list[Hit]:
        return perception.timeline(self._env, f, n, order, gists)

    # knowledge
    def gist_search(self, query: str, f: Filters, n: int, now: float) -> list[Hit]:
        return knowledge.gist_search(self._env, query, f, n, now)

    def gist_count(self) -> int:
        return int(self._env.store.reader().execute("SELECT COUNT(*) FROM gists").fetchone()[0])

    def entities_near(self, center: Optional[Position], radius: Optional[float], n: int, name: Optional[str] = None,
                      entity_type: Optional[str] = None, after: Optional[float] = None) -> list[Hit]:
        return knowledge.entities_near(self._env, center, radius, n, name=name, entity_type=entity_type, after=after)

    def entity_count(self) -> int:
        return int(self._env.store.reader().execute("SELECT COUNT(*) FROM entities").fetchone()[0])

    # episodes
    def episode_reports(self, number: Optional[int], name: Optional[str], n: int) -> list[EpisodeReport]:
        store = self._env.store
        found = [store.get_episode(number)] if number is not None else store.list_episodes(name, n)
        return [episodes.report(self._env, e) for e in found]

    def recent_episodes(self, n: int) -> list[tuple[str, str]]:
        return [(e.id, e.name) for e in self._env.store.list_episodes(None, n)]

    # places
    def locate(self, concept: str, f: Filters, n: int, now: float, evidence: bool = True) -> SqliteLocated:
        found = locate._locate(self._env, concept, f, n, now, hits=evidence)
        return SqliteLocated(self._env, found.result, found.ranked, found.agg)

    def pinned(self, position: Optional[Position], radius: float, entity_ids: Sequence[str]) -> list[str]:
        return [str(p) for p in pinned_near(self._env.store, position, radius, entity_ids)]

    # the robot itself
    def current_position(self) -> tuple[Optional[Position], str]:
        return context.current_position(self._env)

    def active_episode(self) -> Optional[str]:
        episode = self._env.engine.active_episode_id
        if episode is not None:
            try:
                number = int(episode.split("-")[1])
                episode = f"{episode} '{self._env.store.get_episode(number).name}'"
            except Exception:  # the name is decoration; the id is what matters
                pass
        return episode

    @property
    def body(self) -> SqliteBodyRows:
        return self._body
