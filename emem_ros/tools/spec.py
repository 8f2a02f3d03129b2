"""A tool, declared once: what the LLM reads, what runs, how it is cached, which ROS service serves it.

Numbers carry their bounds in the schema (``COORDINATE``, ``DISTANCE``...):
every call is checked against them once, when its arguments are bound
(``registry.checked_arguments``), and an LLM reads them too.

Everything else is derived from these declarations: the registry and its
JSON schemas (``MemoryTools``), the text methods of the ``Memory`` facade,
the ROS services (``ros/services.py``), the MCP server. So adding a tool
touches its implementation, its ``ToolDef``, its ``.srv`` (when it has one)
and its README row — a test holds the last two to the first two.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from emem_ros.core.types import MAX_COORDINATE, MAX_RADIUS

Scopes = Callable[[dict[str, Any]], Iterable[str]]


@dataclass(frozen=True)
class CachePolicy:
    """How a query tool is answered from the query cache (see ``query_cache.py``)."""

    query_param: Optional[str]
    """The free-text argument compared by meaning (None: all arguments must be equal)."""
    depends: Scopes
    """Write scopes the answer depends on, given the call's arguments (``scopes.py``)."""
    clock_args: tuple[str, ...] = ()
    """Arguments that, when given, make the answer depend on the clock (the key then includes it)."""
    ranked_with_recency: bool = False
    """Ranking applies recency weighting (bypass when recency_weight > 0)."""


@dataclass(frozen=True)
class ToolDef:
    """One tool. ``run(env, **arguments)`` returns a typed result whose ``str()`` is the LLM's answer."""

    name: str
    description: str
    """For the LLM: what it answers, what it does not, which sibling to use instead."""
    parameters: dict[str, Any]
    """A JSON-schema object; its properties are ``run``'s keyword arguments (a test holds them equal)."""
    run: Callable[..., Any]
    time_params: tuple[str, ...] = ()
    """Arguments holding times, resolved against the memory's clock."""
    kind: str = "query"
    """'query' (reads) or 'action' (writes)."""
    cache: Optional[CachePolicy] = None
    """None: never answered from the query cache."""
    srv: Optional[str] = None
    """The ``emem_ros/srv`` type of its own ROS service (``~/<name>``); None: only through ``call_tool``."""
    srv_omits: tuple[str, ...] = ()
    """Parameters its .srv leaves out on purpose (they stay reachable through ``call_tool``)."""
    facade: bool = False
    """The ``Memory`` facade gets a method of this name answering text (eMEM's tool methods)."""
    llm: bool = True
    """Offered to LLM tool calling (definitions, MCP); False keeps it to Python and ROS callers."""
    signature: inspect.Signature = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        params = list(inspect.signature(self.run).parameters.values())[1:]  # without the env
        object.__setattr__(self, "signature", inspect.Signature(params))

    @property
    def properties(self) -> dict[str, Any]:
        return dict(self.parameters.get("properties", {}))

    @property
    def required(self) -> list[str]:
        return list(self.parameters.get("required", []))

    def definition(self) -> dict[str, Any]:
        """The OpenAI / Ollama ``tools`` entry."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


# ---------------------------------------------------------------------- JSON-schema helpers
TIME = ("A time: relative ('-10m', '-2h', '-30s', '10 minutes ago', 'last hour'), words in the memory's time zone"
        " ('today', 'yesterday', 'this morning', 'last night', 'since 9:00', 'at 14:30'),"
        " ISO-8601 ('2026-11-22T10:00:00Z'), 'now', or Unix seconds.")


COORDINATE = {"minimum": -MAX_COORDINATE, "maximum": MAX_COORDINATE}
"""Bounds of an x, y or z (metres): what a stored position may be (``finite_position``)."""
DISTANCE = {"exclusiveMinimum": 0, "maximum": MAX_RADIUS}
"""Bounds of a radius (metres)."""
MINUTES = {"exclusiveMinimum": 0, "maximum": 52_560_000}
"""Bounds of a duration in minutes (at most 100 years: the window must start at a time a date can name)."""
FACTOR = {"exclusiveMinimum": 0, "maximum": 1_000}
"""Bounds of a scale factor."""
LEVEL = {"minimum": -1e12, "maximum": 1e12}
"""Bounds of a reading's level (a battery percentage, a temperature): anything beyond is no reading."""


def param(kind: Any, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "description": description, **extra}


def time_param(description: str) -> dict[str, Any]:
    return param(["string", "number"], f"{description} {TIME}")


def obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}
