"""The ROS-free half of the example planner: which memories are on the graph, and whose tool is which.

A Cortex-style planner (an LLM planner-executor) discovers every memory node
by its ``list_tools`` service type, offers the union of their tools to the
model, and runs each tool call through ``call_tool`` of the node that listed
it. Nothing here touches rclpy: the graph listing and the service call come
in as plain values and a callable, so the routing is testable without ROS
(``emem_ros/ros/planner.py`` is the rclpy shell).

With one memory on the graph the tools keep their own names (``locate``), the
names the model was trained on in the docs; with several, each name gets its
node as a prefix (``robot1_memory__locate``) and the description says which
memory it asks, so two robots' memories never shadow each other.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

LIST_TOOLS_TYPE = "emem_ros/srv/ListTools"
LIST_TOOLS = "list_tools"
CALL_TOOL = "call_tool"
SEPARATOR = "__"
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")

SYSTEM_PROMPT = (
    "You are a robot's task planner. The robot has a spatio-temporal memory of what it saw and did; "
    "use its tools to answer from what was observed, then answer briefly in plain words. "
    "Say where things are with their coordinates when a tool gives them."
)


@dataclass(frozen=True)
class CallAnswer:
    """What a ``call_tool`` service answered."""

    success: bool
    message: str
    text: str


CallTool = Callable[[str, str, str], CallAnswer]
"""``call(node, tool, arguments_json)``: runs ``<node>/call_tool``."""


def memory_nodes(services: Iterable[tuple[str, Sequence[str]]]) -> list[str]:
    """Fully qualified names of the nodes offering ``list_tools`` (by service type), sorted.

    ``services`` is what ``Node.get_service_names_and_types()`` returns:
    (service name, [type, ...]) pairs.
    """
    suffix = "/" + LIST_TOOLS
    found = {name[: -len(suffix)] for name, types in services
             if LIST_TOOLS_TYPE in types and name.endswith(suffix) and len(name) > len(suffix)}
    return sorted(found)


def parse_tools(tools_json: str, node: str) -> list[dict[str, Any]]:
    """The definitions a ``list_tools`` answer holds; a clear ValueError if they are not tool definitions."""
    try:
        tools = json.loads(tools_json)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{node}/{LIST_TOOLS} answered something that is not JSON ({exc})") from None
    if not isinstance(tools, list):
        raise ValueError(f"{node}/{LIST_TOOLS} answered a {type(tools).__name__}, not a list of tools")
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"{node}/{LIST_TOOLS} answered an entry that is not a tool definition: {tool!r}")
    return tools


def node_key(node: str) -> str:
    """A tool-name-safe key for a node: ``/robot1/memory`` -> ``robot1_memory``."""
    return _NAME_CHARS.sub("_", node.strip("/")).strip("_") or "memory"


@dataclass(frozen=True)
class Route:
    node: str
    tool: str


class ToolRouter:
    """The tools of every discovered memory as one tool host for ``run_ollama_chat``.

    ``get_tool_definitions()`` is what the model is offered; ``dispatch_tool_call()``
    runs a call on the node that listed the tool and returns its text (an error
    as ``Error: ...`` text the model can act on, never an exception).
    """

    def __init__(self, listings: dict[str, list[dict[str, Any]]], call: CallTool) -> None:
        self._call = call
        self._definitions: list[dict[str, Any]] = []
        self._routes: dict[str, Route] = {}
        self.calls: list[tuple[str, str, str]] = []
        """Every (node, tool, arguments_json) sent, in order."""
        prefixed = len(listings) > 1
        for node in sorted(listings):
            for definition in listings[node]:
                function = dict(definition["function"])
                tool = function["name"]
                name = f"{node_key(node)}{SEPARATOR}{tool}" if prefixed else tool
                if prefixed:
                    function["name"] = name
                    function["description"] = f"[memory {node}] {function.get('description', '')}".rstrip()
                self._routes[name] = Route(node, tool)
                self._definitions.append({**definition, "function": function})

    @property
    def nodes(self) -> list[str]:
        return sorted({route.node for route in self._routes.values()})

    def route(self, name: str) -> Optional[Route]:
        return self._routes.get(name.strip()) if isinstance(name, str) else None

    def get_tool_definitions(self, include_actions: bool = True) -> list[dict[str, Any]]:
        return list(self._definitions)

    def dispatch_tool_call(self, tool_name: str, arguments: Any = None) -> str:
        route = self.route(tool_name)
        if route is None:
            return (f"Error: there is no tool named {tool_name!r}. "
                    f"Available tools: {', '.join(self._routes)}.")
        if arguments is None:
            arguments_json = "{}"
        elif isinstance(arguments, str):
            arguments_json = arguments
        else:
            try:
                arguments_json = json.dumps(arguments)
            except (TypeError, ValueError) as exc:
                return f"Error: the arguments of {tool_name} are not JSON ({exc})"
        self.calls.append((route.node, route.tool, arguments_json))
        answer = self._call(route.node, route.tool, arguments_json)
        if not answer.success:
            return answer.text if answer.text.startswith("Error") else f"Error: {answer.message}"
        return answer.text

    def flush(self) -> int:
        return 0  # the memories flush themselves; nothing is buffered here
