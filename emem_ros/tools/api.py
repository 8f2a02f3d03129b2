"""MemoryTools: every tool by name, typed, cached and noted in one place; the registry LLMs call.

``memory.tools.locate(...)`` (or ``.call("locate", ...)``) returns a typed
``LocateResult``; ``memory.locate(...)`` (the eMEM-compatible facade) its
text; ``dispatch(name, json)`` checks JSON arguments first and never raises.
Every path runs ``call``: the query cache where the tool's ``CachePolicy``
allows, then the note that says when observations still wait to be stored.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Any, Callable, Iterable, Mapping, Optional

from emem_ros.core.errors import InvalidInputError
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.query_cache import QueryCache
from emem_ros.tools.registry import ToolCallError, ToolRegistry, ToolSpec, checked_arguments
from emem_ros.tools.spec import ToolDef

log = logging.getLogger(__name__)


class MemoryTools:
    def __init__(self, env: ToolEnv, tools: Iterable[ToolDef], cache: Optional[QueryCache] = None) -> None:
        self.env = env
        self.cache = cache
        self.registry = ToolRegistry(resolve_time=env.engine.resolve_time)
        self._defs: dict[str, ToolDef] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: ToolDef, replace: bool = False) -> None:
        """Make a declared tool callable: typed (``call``), and by LLMs through the registry unless ``tool.llm`` is off."""
        if tool.name in self._defs and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already declared (pass replace=True)")
        if not tool.llm:
            self.registry.unregister(tool.name)
            self._defs[tool.name] = tool
            return
        self.registry.register(ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters,
                                        handler=self._handler(tool.name), time_params=frozenset(tool.time_params),
                                        kind=tool.kind), replace=replace)
        self._defs[tool.name] = tool

    def _handler(self, name: str) -> Callable[..., Any]:
        def handler(**arguments: Any) -> Any:
            return self.call(name, **arguments)

        handler.__name__ = name
        return handler

    @property
    def declared(self) -> dict[str, ToolDef]:
        return dict(self._defs)

    def get(self, name: str) -> Optional[ToolDef]:
        return self._defs.get(name)

    # ------------------------------------------------------------------ calling
    def call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Run a declared tool with Python arguments; its typed result (errors raise, in plain words)."""
        tool = self._defs.get(name)
        if tool is None:
            raise InvalidInputError(f"there is no tool named {name!r}; tools: {', '.join(self._defs)}")
        cache = self.cache
        if not args and (cache is None or tool.cache is None or not cache.enabled) and _binds(tool, kwargs):
            # what binding would pass, without building it: the same check and gate as below (a switched-off
            # cache would only count the call as bypassed)
            checked = self._checked(name, tool, kwargs)
            if cache is not None and tool.cache is not None:
                cache.bypassed += 1
            if tool.kind != "query":
                return self._noted(tool.run(self.env, **checked))
            with self.env.engine.questions.asking():
                return self._noted(tool.run(self.env, **checked))
        bound = tool.signature.bind(*args, **kwargs)  # a TypeError names the bad argument
        # every argument against its schema, once, here: no bad number reaches SQLite or a printout
        bound.arguments.update(self._checked(name, tool, bound.arguments))
        if tool.kind != "query":
            return self._noted(self._run(tool, bound))
        with self.env.engine.questions.asking():  # writers wait while a question is answered
            return self._noted(self._run(tool, bound))

    @staticmethod
    def _checked(name: str, tool: ToolDef, arguments: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return checked_arguments(name, arguments, tool.properties, tool.time_params)
        except ToolCallError as exc:
            raise InvalidInputError(str(exc)) from None

    def _run(self, tool: ToolDef, bound: inspect.BoundArguments) -> Any:
        if self.cache is not None and tool.cache is not None:
            bound.apply_defaults()
            return self.cache.answer(tool, dict(bound.arguments),
                                     lambda: tool.run(self.env, *bound.args, **bound.kwargs))
        return tool.run(self.env, *bound.args, **bound.kwargs)

    def _noted(self, result: Any) -> Any:
        """The result, with a note when observations still wait to be stored (a copy: the cache may hold it)."""
        engine = self.env.engine
        note = engine.unstored_note() if not engine.closed else None
        notes = getattr(result, "notes", None)
        if note and dataclasses.is_dataclass(result) and not isinstance(result, type) and isinstance(notes, list):
            try:
                result = dataclasses.replace(result, notes=[*notes, note])
            except (TypeError, ValueError):
                log.debug("could not add the unstored note to %s", type(result).__name__)
        return result

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """``tools.locate(...)``: the declared tool ``name``, typed (see ``call``)."""
        tool = self.__dict__.get("_defs", {}).get(name)
        if tool is None:
            raise AttributeError(f"{type(self).__name__!r} has no tool or attribute {name!r}")

        def typed(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, *args, **kwargs)

        typed.__name__ = name
        typed.__doc__ = tool.description
        typed.__signature__ = tool.signature  # type: ignore[attr-defined]  # for help() and inspect
        return typed

    def warm(self) -> None:
        """Build the catalog now (a node can call this at start instead of on its first query)."""
        self.env.prepare()

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


def _binds(tool: ToolDef, kwargs: dict[str, Any]) -> bool:
    """Keyword arguments that ``tool.signature.bind`` accepts as they are: known names, every required one."""
    names, required = _names(tool)
    return required.issubset(kwargs) and names.issuperset(kwargs)


_NAMES: dict[int, tuple[ToolDef, frozenset[str], frozenset[str]]] = {}


def _names(tool: ToolDef) -> tuple[frozenset[str], frozenset[str]]:
    """(keyword-passable parameters, parameters without a default) of a tool's signature, worked out once."""
    known = _NAMES.get(id(tool))
    if known is None or known[0] is not tool:
        params = tool.signature.parameters.values()
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        if any(p.kind not in keyword for p in params):
            names, required = frozenset[str](), frozenset({"\0"})  # *args, **kwargs, positional-only: bind
        else:
            names = frozenset(p.name for p in params)
            required = frozenset(p.name for p in params if p.default is inspect.Parameter.empty)
        known = _NAMES[id(tool)] = (tool, names, required)
    return known[1], known[2]


def _bound(registry: ToolRegistry, name: str, description: str) -> Callable[..., str]:
    def call(**kwargs: Any) -> str:
        return registry.dispatch(name, kwargs)

    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = description
    return call

