"""MemoryTools: typed access to every tool, and the registry an LLM calls them through.

``memory.tools.semantic_search(...)`` returns a ``SearchResult``;
``memory.semantic_search(...)`` (the eMEM-compatible facade) returns its
text; ``memory.dispatch_tool_call(name, args)`` checks JSON arguments first
and never raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from emem_ros.tools import actions, body, context, episodes, knowledge, locate, perception
from emem_ros.tools.env import ToolEnv, attach_unstored_notes
from emem_ros.tools.registry import ToolRegistry, ToolSpec
from emem_ros.tools.results import (
    ActionResult,
    BodyStatusResult,
    ContextResult,
    EpisodeSummaryResult,
    LocateResult,
    RecallResult,
    SearchResult,
)
from emem_ros.tools.schemas import ACTIONS, TOOLS

if TYPE_CHECKING:
    from emem_ros.memory import Memory

TOOL_NAMES = tuple(TOOLS)
ACTION_NAMES = tuple(ACTIONS)


class MemoryTools:
    def __init__(self, memory: "Memory") -> None:
        self.env = ToolEnv(memory)
        self.registry = ToolRegistry(resolve_time=memory.resolve_time)
        for name, spec in TOOLS.items():
            self.registry.register(self._spec(name, spec, "query"))
        for name, spec in ACTIONS.items():
            self.registry.register(self._spec(name, spec, "action"))
        from emem_ros.agent import tools as agent_tools  # here: the agent package builds on this one

        agent_tools.install(self, memory)  # the query cache, and record/find_experiences, memory_stats
        attach_unstored_notes(self)  # last: answers say when observations still wait to be stored

    def _spec(self, name: str, spec: dict[str, Any], kind: str) -> ToolSpec:
        return ToolSpec(name=name, description=spec["description"], parameters=spec["parameters"],
                        handler=getattr(self, name), time_params=frozenset(spec["time"]), kind=kind)

    def invalidate_caches(self) -> None:
        """Call after rows were archived or deleted: the catalog is rebuilt on the next query."""
        self.env.catalog.invalidate()
        self.env.store.text_names.clear()

    def warm(self) -> None:
        """Build the catalog now (a node can call this at start instead of on its first query)."""
        self.env.prepare()

    # ------------------------------------------------------------------ the ten tools
    def semantic_search(self, query: str, n_results: int = 10, layer: Any = None, time_after: Any = None,
                        time_before: Any = None, near_x: Any = None, near_y: Any = None,
                        spatial_radius: Any = None, episode_id: Any = None) -> SearchResult:
        return perception.semantic_search(self.env, query, n_results, layer, time_after, time_before, near_x,
                                          near_y, spatial_radius, episode_id)

    def spatial_query(self, x: float, y: float, z: float = 0.0, radius: float = 2.0, layer: Any = None,
                      time_after: Any = None, time_before: Any = None, n_results: int = 10) -> SearchResult:
        return perception.spatial_query(self.env, x, y, z, radius, layer, time_after, time_before, n_results)

    def temporal_query(self, time_after: Any = None, time_before: Any = None, last_n_minutes: Any = None,
                       layer: Any = None, near_x: Any = None, near_y: Any = None, spatial_radius: Any = None,
                       order: str = "newest", n_results: int = 10) -> SearchResult:
        return perception.temporal_query(self.env, time_after, time_before, last_n_minutes, layer, near_x, near_y,
                                         spatial_radius, order, n_results)

    def episode_summary(self, episode_id: Any = None, task_name: Any = None,
                        last_n: int = 1) -> EpisodeSummaryResult:
        return episodes.episode_summary(self.env, episode_id, task_name, last_n)

    def get_current_context(self, radius: float = 3.0, include_recent_minutes: float = 5.0) -> ContextResult:
        return context.get_current_context(self.env, radius, include_recent_minutes)

    def search_gists(self, query: str, n_results: int = 10, time_after: Any = None,
                     time_before: Any = None) -> SearchResult:
        return knowledge.search_gists(self.env, query, n_results, time_after, time_before)

    def entity_query(self, name: Any = None, entity_type: Any = None, near_x: Any = None, near_y: Any = None,
                     spatial_radius: Any = None, last_seen_after: Any = None, n_results: int = 10) -> SearchResult:
        return knowledge.entity_query(self.env, name, entity_type, near_x, near_y, spatial_radius,
                                      last_seen_after, n_results)

    def locate(self, concept: str, n_results: int = 10, layer: Any = None, time_after: Any = None,
               time_before: Any = None) -> LocateResult:
        return locate.locate(self.env, concept, n_results, layer, time_after, time_before)

    def recall(self, query: str, n_results: int = 10, radius_multiplier: float = 1.5) -> RecallResult:
        return locate.recall(self.env, query, n_results, radius_multiplier)

    def body_status(self, layers: Any = None, at_time: Any = None, below: Any = None, above: Any = None,
                    time_after: Any = None, time_before: Any = None, n_results: Any = None) -> BodyStatusResult:
        return body.body_status(self.env, layers, at_time, below, above, time_after, time_before, n_results)

    # ------------------------------------------------------------------ write actions
    def store_specific_memory(self, text: str, x: Any = None, y: Any = None, z: Any = None,
                              layer_name: str = actions.NOTES_LAYER, metadata: Any = None) -> ActionResult:
        return actions.store_specific_memory(self.env, text, x, y, z, layer_name, metadata)

    def start_episode(self, name: str, parent_episode_id: Any = None, goal: Any = None) -> ActionResult:
        return actions.start_episode(self.env, name, parent_episode_id, goal)

    def end_episode(self, consolidate: bool = True, result: Any = None, reflection: Any = None,
                    success: Any = None) -> ActionResult:
        return actions.end_episode(self.env, consolidate, result, reflection, success)

    # ------------------------------------------------------------------ tool calling
    def definitions(self, include_actions: bool = True) -> list[dict[str, Any]]:
        return self.registry.definitions(kinds=None if include_actions else ("query",))

    def dispatch(self, name: Any, arguments: Any = None) -> str:
        return self.registry.dispatch(name, arguments)

    def for_registration(self, include_actions: bool = True) -> list[tuple[Callable[..., str], dict[str, Any]]]:
        """(callable, definition) pairs, e.g. for EmbodiedAgents' ``LLM.register_tool``."""
        pairs = []
        for definition in self.definitions(include_actions):
            name = definition["function"]["name"]
            pairs.append((_bound(self.registry, name, definition["function"]["description"]), definition))
        return pairs


def _bound(registry: ToolRegistry, name: str, description: str) -> Callable[..., str]:
    def call(**kwargs: Any) -> str:
        return registry.dispatch(name, kwargs)

    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = description
    return call
