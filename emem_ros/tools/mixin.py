"""Tool methods of the Memory facade, with eMEM's names: each returns the rendered text.

Typed results are on ``memory.tools`` (a ``MemoryTools``). The episode
actions are Memory's own ``start_episode`` / ``end_episode`` (they return
ids); the LLM-facing versions, which answer in sentences, go through
``dispatch_tool_call``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from emem_ros.tools.api import MemoryTools
from emem_ros.tools.registry import ToolSpec


class ToolsMixin:
    tools: MemoryTools

    def _init_tools(self) -> None:
        """Called once by Memory.__init__ after the store is open."""
        self.tools = MemoryTools(self)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ the ten tools
    def semantic_search(self, query: str, **kwargs: Any) -> str:
        return str(self.tools.semantic_search(query, **kwargs))

    def spatial_query(self, x: float, y: float, **kwargs: Any) -> str:
        return str(self.tools.spatial_query(x, y, **kwargs))

    def temporal_query(self, **kwargs: Any) -> str:
        return str(self.tools.temporal_query(**kwargs))

    def episode_summary(self, **kwargs: Any) -> str:
        return str(self.tools.episode_summary(**kwargs))

    def get_current_context(self, **kwargs: Any) -> str:
        return str(self.tools.get_current_context(**kwargs))

    def search_gists(self, query: str, **kwargs: Any) -> str:
        return str(self.tools.search_gists(query, **kwargs))

    def entity_query(self, **kwargs: Any) -> str:
        return str(self.tools.entity_query(**kwargs))

    def locate(self, concept: str, **kwargs: Any) -> str:
        return str(self.tools.locate(concept, **kwargs))

    def recall(self, query: str, **kwargs: Any) -> str:
        return str(self.tools.recall(query, **kwargs))

    def body_status(self, layers: Optional[list[str]] = None, **kwargs: Any) -> str:
        return str(self.tools.body_status(layers, **kwargs))

    # ------------------------------------------------------------------ write action
    def store_specific_memory(self, text: str, x: Optional[float] = None, y: Optional[float] = None,
                              z: Optional[float] = None, layer_name: str = "agent_notes",
                              metadata: Optional[dict[str, Any]] = None) -> str:
        return str(self.tools.store_specific_memory(text, x, y, z, layer_name, metadata))

    # ------------------------------------------------------------------ tool calling
    def get_tool_definitions(self, include_actions: bool = True) -> list[dict[str, Any]]:
        """OpenAI / Ollama ``tools`` entries for the ten tools (and the write actions)."""
        return self.tools.definitions(include_actions)

    def dispatch_tool_call(self, tool_name: str, arguments: Any = None) -> str:
        """Run a tool call (arguments: dict or JSON text); errors come back as text, never raised."""
        return self.tools.dispatch(tool_name, arguments)

    def get_tools_for_registration(self, include_actions: bool = True) -> list[tuple[Callable[..., str], dict]]:
        return self.tools.for_registration(include_actions)

    def register_tool(self, spec: ToolSpec, replace: bool = False) -> None:
        """Add a tool (schema + handler) to the LLM surface, e.g. from the experience ledger."""
        self.tools.registry.register(spec, replace=replace)
