"""``FleetMemory(url)``: the retrieval tools of ``Memory``, asked of a whole fleet's store.

    from emem_ros.fleet.memory import FleetMemory
    with FleetMemory("postgresql://emem@db/fleet") as fleet:
        print(fleet.locate("pallet 4711"))
        print(fleet.semantic_search("spilled water", robots=["robot2"]))
        print(fleet.dispatch_tool_call("temporal_query", {"last_n_minutes": 10}))

Read-only: robots write their own memories and ``emem sync`` ships them.
The methods have the robot tools' names, signatures (plus ``robots``) and
text format; ``tool_definitions()`` gives an LLM their JSON schemas, and
``dispatch_tool_call`` answers a tool call with the same argument checks
and plain-words errors as a robot's memory.
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Callable, Optional, Union

import numpy as np

from emem_ros.core.config import MemoryConfig
from emem_ros.core.timeexpr import parse_time
from emem_ros.embeddings.base import EmbeddingProvider
from emem_ros.fleet.env import FleetEnv
from emem_ros.fleet.errors import FleetError
from emem_ros.fleet.reader import FleetReader
from emem_ros.fleet.reads import FleetReads
from emem_ros.fleet.tools import fleet_tooldefs
from emem_ros.tools.registry import ToolRegistry, ToolSpec
from emem_ros.tools.spec import ToolDef

Clock = Union[None, str, float, Callable[[], float]]


class FleetMemory:
    """The fleet store at ``url`` behind the robot's retrieval tools.

    ``embedding_provider``: the model the robots embed with (default: the one
    the fleet store records, e.g. all-MiniLM-L6-v2). ``now``: the clock
    relative times resolve against: None (wall clock), 'latest' (the newest
    synced observation: replayed bags answer "the last 10 minutes" in bag
    time), a number (epoch seconds) or a callable.
    """

    def __init__(self, url: str, embedding_provider: Optional[EmbeddingProvider] = None, now: Clock = None,
                 config: Optional[MemoryConfig] = None, ollama_host: Optional[str] = None) -> None:
        self.reader = FleetReader(url)
        try:
            provider = embedding_provider or self._stored_provider(ollama_host)
            if provider.dim != self.reader.info.dim:
                raise FleetError(f"the embedder makes {provider.dim}-dimensional vectors; the fleet store holds "
                                 f"{self.reader.info.dim}-dimensional ones")
        except Exception:
            self.reader.close()
            raise
        self.provider = provider
        self.env = FleetEnv(self.reader, self._embed, FleetReads, config, self._clock(now))
        self.tooldefs: dict[str, ToolDef] = {td.name: td for td in fleet_tooldefs()}
        self.registry = ToolRegistry(resolve_time=lambda value: parse_time(value, self.env.now()))
        for td in self.tooldefs.values():
            self.registry.register(ToolSpec(td.name, td.description, td.parameters, self._handler(td),
                                            frozenset(td.time_params), td.kind))

    def _stored_provider(self, host: Optional[str]) -> EmbeddingProvider:
        from emem_ros.embeddings.factory import provider_for_stored_model

        model = self.reader.info.model
        if not model:
            raise FleetError("the fleet store does not record its embedding model yet (no robot has synced): "
                             "pass embedding_provider")
        return provider_for_stored_model(model, host)

    def _embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.provider.embed(texts), dtype=np.float32)

    def _clock(self, now: Clock) -> Optional[Callable[[], float]]:
        if now is None:
            return None
        if callable(now):
            return now
        if now == "latest":
            def latest() -> float:
                stamp = self.reader.newest_stamp()
                return stamp if stamp is not None else time.time()
            return latest
        if isinstance(now, (int, float)) and not isinstance(now, bool):
            value = float(now)
            return lambda: value
        raise FleetError(f"now must be None, 'latest', a number of epoch seconds or a callable, got {now!r}")

    def _handler(self, td: ToolDef) -> Callable[..., Any]:
        def handler(**kwargs: Any) -> Any:
            return self.env.run(td, **kwargs)
        return handler

    # ------------------------------------------------------------------ calling
    def call(self, tool: str, *args: Any, **kwargs: Any) -> Any:
        """The typed result (``SearchResult``, ``LocateResult``, ``RecallResult``) of a fleet tool."""
        td = self.tooldefs.get(tool)
        if td is None:
            raise FleetError(f"no fleet tool {tool!r}; the fleet answers {', '.join(self.tooldefs)}")
        bound = td.signature.bind(*args, **kwargs)
        return self.env.run(td, *bound.args, **bound.kwargs)

    def dispatch_tool_call(self, tool_name: str, arguments: Any = None) -> str:
        """Run a tool call (arguments: dict or JSON text); errors come back as text, never raised."""
        return self.registry.dispatch(tool_name, arguments)

    def tool_definitions(self) -> list[dict[str, Any]]:
        """The OpenAI / Ollama ``tools`` entries of the fleet tools."""
        return self.registry.definitions()

    @property
    def robots(self) -> list[str]:
        return self.reader.robots()

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> "FleetMemory":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _text_method(td: ToolDef) -> Callable[..., str]:
    def method(self: FleetMemory, *args: Any, **kwargs: Any) -> str:
        return str(self.call(td.name, *args, **kwargs))

    method.__name__ = method.__qualname__ = td.name
    method.__doc__ = td.description
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = td.signature.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *td.signature.parameters.values()], return_annotation=str)
    return method


for _td in fleet_tooldefs():
    setattr(FleetMemory, _td.name, _text_method(_td))
