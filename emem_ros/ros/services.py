"""ROS services of the memory, derived from the tool declarations: no rclpy, no per-tool code.

``SERVICES`` has one entry per tool whose ``ToolDef`` names a ``.srv``
(served as ``~/<tool>``), plus ``call_tool`` (any registered tool by name,
JSON in and out). ``handle(memory, service, request, response, make)`` reads
the request by the tool's declaration (``requests.py``), runs the typed tool
(``memory.tools.call``: the query cache and the notes included) and fills
the response by the result's type (``responses.py``). ``list_tools`` answers
the same JSON schemas as ``Memory.get_tool_definitions()``, so a planner on
the graph discovers the tools and runs them through ``call_tool``.

Nothing escapes a handler: a bad argument or an unknown id becomes
``success = false`` with a plain-words ``message`` (and ``text``), because an
exception in a service callback leaves the caller without an answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable

from emem_ros.agent.tools import AGENT_TOOLS
from emem_ros.core.errors import EmemError
from emem_ros.ros.msgtypes import MessageFactory
from emem_ros.ros.requests import ServiceError, place, read_request, text
from emem_ros.ros.responses import (
    PKG,
    ActionRefused,
    Converter,
    _dumps,
    fill_response,
    refuse_if_said_no,
    to_jsonable,
)
from emem_ros.tools.registry import ToolCallError
from emem_ros.tools.spec import ToolDef
from emem_ros.tools.specs import TOOL_SPECS

log = logging.getLogger(__name__)

__all__ = ["SERVICES", "SERVICES_BY_NAME", "ServiceSpec", "ServiceError", "handle", "to_jsonable", "services_for"]

CALL_TOOL = "call_tool"
LIST_TOOLS = "list_tools"
_place = place  # the place convention, for the tests that pin it


@dataclass(frozen=True)
class ServiceSpec:
    """One ROS service: its name under the node, its .srv type, and the tool it runs."""

    name: str
    """Service name relative to the node (``~/<name>``); the tool's name, except ``call_tool``."""
    srv_type: str
    """``emem_ros/srv/<Type>``."""
    tool: str
    """The tool it runs ('*' for call_tool: any registered tool; '' for list_tools: none)."""

    @property
    def srv_name(self) -> str:
        return self.srv_type.rsplit("/", 1)[1]


def services_for(tools: Iterable[ToolDef]) -> tuple[ServiceSpec, ...]:
    """A service for every tool that names its .srv, then ``call_tool`` and ``list_tools``."""
    own = tuple(ServiceSpec(t.name, f"{PKG}/srv/{t.srv}", t.name) for t in tools if t.srv)
    return own + (ServiceSpec(CALL_TOOL, f"{PKG}/srv/CallTool", "*"),
                  ServiceSpec(LIST_TOOLS, f"{PKG}/srv/ListTools", ""))


SERVICES: tuple[ServiceSpec, ...] = services_for((*TOOL_SPECS, *AGENT_TOOLS))
SERVICES_BY_NAME: dict[str, ServiceSpec] = {s.name: s for s in SERVICES}


# ---------------------------------------------------------------------- running
def call_registered(memory: Any, name: Any, arguments: Any) -> Any:
    """Run a registered tool by name with JSON-style arguments; its typed result.

    Uses the registry's own argument checks (names, types, times), so the
    errors read exactly as an LLM caller would get them.
    """
    registry = memory.tools.registry
    spec = registry.get(str(name).strip()) if isinstance(name, str) else None
    if spec is None:
        # dispatch() of an unknown name runs nothing and explains (close names, the list).
        raise ServiceError(_strip_error(registry.dispatch(name, {})))
    try:
        kwargs = registry.check(spec, arguments)
    except ToolCallError as exc:
        raise ServiceError(str(exc)) from None
    return spec.handler(**kwargs)


def _strip_error(message: str) -> str:
    return message[len("Error: "):] if message.startswith("Error: ") else message


def _run(memory: Any, spec: ServiceSpec, request: Any, response: Any, make: MessageFactory) -> None:
    conv = Converter(memory, make)
    if spec.name == LIST_TOOLS:
        definitions = memory.get_tool_definitions(include_actions=not bool(request.read_only))
        response.tools_json = _dumps(definitions)
        response.text = "\n".join(d["function"]["name"] for d in definitions)
        return
    if spec.name == CALL_TOOL:
        name = text(request.tool)
        if name is None:
            raise ServiceError("call_tool needs a tool name, e.g. 'semantic_search'; available tools: "
                               + ", ".join(memory.tools.registry.names))
        result = call_registered(memory, name, text(request.arguments_json))
        response.result_json = _dumps(to_jsonable(result))
        response.text = str(result)
        refuse_if_said_no(result)
        return
    tool = memory.tools.get(spec.tool)
    if tool is None:
        raise ServiceError(f"this memory has no tool {spec.tool!r}")
    fill_response(conv, memory.tools.call(spec.tool, **read_request(tool, request)), response)


# ---------------------------------------------------------------------- entry point
def handle(memory: Any, service: str, request: Any, response: Any, make: MessageFactory) -> Any:
    """Answer one service call; never raises (failures are ``success = false`` with a message)."""
    spec = SERVICES_BY_NAME.get(service)
    try:
        if spec is None:
            raise ServiceError(f"there is no memory service named {service!r}; services: "
                               + ", ".join(SERVICES_BY_NAME))
        if memory is None or getattr(memory, "closed", False):
            raise ServiceError("the memory is not open (is the node configured and active?)")
        _run(memory, spec, request, response, make)
        response.success = True
        response.message = ""
    except ActionRefused as exc:
        _fail(response, str(exc), keep_text=True)
    except (ServiceError, EmemError, ValueError, TypeError, KeyError) as exc:
        _fail(response, _words(exc))
    except Exception as exc:  # the caller must get an answer, whatever broke underneath
        log.exception("service %s failed", service)
        _fail(response, f"{service} failed unexpectedly ({type(exc).__name__}: {_words(exc)})")
    return response


def _words(exc: BaseException) -> str:
    message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return message or type(exc).__name__


def _fail(response: Any, message: str, keep_text: bool = False) -> None:
    try:
        response.success = False
        response.message = message
        if not keep_text or not getattr(response, "text", ""):
            response.text = f"Error: {message}"
    except Exception:  # a response we cannot even fill: log, return what we have
        log.exception("could not fill a failed service response (%s)", message)
