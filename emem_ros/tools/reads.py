"""What the tool runners read: one interface, two stores (a robot's SQLite file, the fleet's PostgreSQL).

A tool runner (``perception.semantic_search``, ``locate.recall``,
``context.get_current_context``...) checks its arguments, asks its ``env``
for the clock and the filters, reads through ``env.reads`` and words the
answer. Only the reads differ between stores, so the same runner serves a
robot's memory (``sqlite_reads.SqliteReads``: catalogs, place caches,
hnswlib) and a fleet store (``fleet.reads.FleetReads``: SQL in PostgreSQL,
one robot or several, each hit naming its robot).

``ToolContext`` is what a runner asks of its env besides the reads (argument
checks, the clock, filters, notes); ``ToolReads`` the reads themselves;
``BodyRows`` the body readings ``body_status`` walks. Positions are in the
store's frame (a robot's map; the fleet frame over the fleet).
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

from emem_ros.core.types import Position
from emem_ros.tools.filters import Filters
from emem_ros.tools.results import EpisodeReport, Hit, LocateResult


class Located(Protocol):
    """Where a concept is (``result``) and the memories that ranked best for it."""

    result: LocateResult

    @property
    def matched(self) -> bool:
        """Some memory resembled the concept (False: the answer's notes say why nothing did)."""
        ...

    def matches(self, n: int) -> list[Hit]:
        """The n best-ranked memories of the concept, as hits (recall's 'best matches')."""
        ...


class BodyRows(Protocol):
    """One robot's body (interoception) readings, as ``body_status`` walks them.

    ``where`` arguments are SQL predicates over ``o.layer``, ``o.source_type``,
    ``o.stamp``, ``o.id`` and ``o.value`` with ``?`` placeholders, written by
    ``body.py`` in the SQL both stores speak; rows are (id, stamp, value, text_id).
    """

    def layers(self) -> list[str]:
        """Layers holding body readings (also those whose readings were all archived)."""
        ...

    def stored_scales(self) -> dict[str, dict[str, Any]]:
        """How archived layers' values read ({layer: {'scale', 'unit'}}), as archival recorded it."""
        ...

    def samples(self, layer: str, k: int) -> list[tuple[Optional[str], Optional[float]]]:
        """(text, value) of the layer's newest k readings that still have their text."""
        ...

    def rows(self, where: str, params: Sequence[Any], order: str, limit: int) -> list[tuple[Any, ...]]:
        ...

    def stamp_at(self, where: str, params: Sequence[Any], offset: int) -> Optional[float]:
        """The stamp of the row ``offset`` places back, newest first (None: fewer rows)."""
        ...

    def extreme(self, where: str, params: Sequence[Any], lowest: bool) -> Optional[tuple[Any, ...]]:
        """The row with the lowest (or highest) value among those with one."""
        ...

    def texts(self, ids: Sequence[int]) -> dict[int, str]:
        ...


class ToolReads(Protocol):
    """The reads of the ten retrieval tools."""

    # perception
    def ranked_hits(self, query: str, f: Filters, n: int, now: float, gists: bool = True) -> list[Hit]:
        """Texts and gists resembling the query (meaning and words, with recency), best first."""
        ...

    def nearby_hits(self, f: Filters, n: int, three_d: bool = False, gists: bool = True) -> list[Hit]:
        """Things seen in the filter's circle, nearest first; gists fill up to n."""
        ...

    def area_gists(self, f: Filters, n: int) -> list[Hit]:
        """Summaries whose area touches the filter's circle, newest first."""
        ...

    def timeline(self, f: Filters, n: int, order: str = "newest", gists: bool = True) -> list[Hit]:
        """Distinct things seen in the window, by their newest (or first) sighting in it."""
        ...

    # knowledge
    def gist_search(self, query: str, f: Filters, n: int, now: float) -> list[Hit]:
        ...

    def gist_count(self) -> int:
        ...

    def entities_near(self, center: Optional[Position], radius: Optional[float], n: int, name: Optional[str] = None,
                      entity_type: Optional[str] = None, after: Optional[float] = None) -> list[Hit]:
        ...

    def entity_count(self) -> int:
        ...

    # episodes
    def episode_reports(self, number: Optional[int], name: Optional[str], n: int) -> list[EpisodeReport]:
        """Episode ``number`` (checked to exist by ``ToolContext.episode``), else the newest n named like ``name``."""
        ...

    def recent_episodes(self, n: int) -> list[tuple[str, str]]:
        """(id, name) of the newest n episodes, for notes."""
        ...

    # places
    def locate(self, concept: str, f: Filters, n: int, now: float, evidence: bool = True) -> Located:
        ...

    def pinned(self, position: Optional[Position], radius: float, entity_ids: Sequence[str]) -> list[str]:
        """Planner notes pinned near a place or to entities (none over the fleet: notes stay on the robot)."""
        ...

    # the robot itself
    def current_position(self) -> tuple[Optional[Position], str]:
        """Where the robot is (or was last seen to be) and how that is known."""
        ...

    def active_episode(self) -> Optional[str]:
        """The active episode's id and name ('ep-3 'fetch the mug''), if one is open."""
        ...

    @property
    def body(self) -> BodyRows:
        ...


class ToolContext(Protocol):
    """What a runner asks of its env besides the reads: argument checks, the clock, filters, notes."""

    reads: ToolReads
    store_name: str
    """How answers name the store: 'memory' (a robot's), 'the fleet store'."""

    def count(self, value: Any, name: str = "n_results", default: int = 10) -> int:
        ...

    def positive(self, value: Any, name: str, default: float) -> float:
        ...

    def text(self, value: Any, name: str) -> str:
        ...

    def time(self, name: str, value: Any) -> Optional[float]:
        ...

    def prepare(self) -> float:
        """Make what was stored visible (the robot flushes); returns the clock's now."""
        ...

    def now(self) -> float:
        ...

    def fmt(self, stamp: float) -> str:
        ...

    def filters(self, layer: Any = None, time_after: Any = None, time_before: Any = None, near_x: Any = None,
                near_y: Any = None, spatial_radius: Any = None, episode_id: Any = None) -> Filters:
        ...

    def episode(self, value: Any) -> Optional[int]:
        """The episode number an id names; an unknown one is an error, not an empty answer."""
        ...

    def describe(self, f: Filters) -> str:
        """The filters in words for an answer's head ('' when nothing narrows it)."""
        ...

    def layer_notes(self, layer: Optional[str]) -> list[str]:
        ...

    def empty_notes(self, f: Filters) -> list[str]:
        ...
