"""EmbodiedAgents Memory's actions as emem_ros tools: names, phases, argument names, descriptions, checks.

The fourteen ``@component_action`` methods of EmbodiedAgents' ``Memory`` are
served by the emem_ros tool of the same name (``store`` aside: it has no
tool). Their names, argument names and phases are EmbodiedAgents'; the
descriptions and the JSON schemas are ours (``emem_ros.tools.specs``), with
the one argument EmbodiedAgents names differently renamed
(``store_specific_memory(content=...)``, our ``text``). Arguments we add
(``goal``, ``result``, ``metadata``...) stay optional.

``action_registry`` puts the actions in a ``ToolRegistry`` whose handlers run
the real tools (in process, or through a node's ``~/call_tool``), so a
planner's call is checked by the very code that checks every other call;
``run_action`` answers text or raises ``ActionError`` in plain words. Nothing
here imports ROS or EmbodiedAgents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from emem_ros.core.errors import EmemError
from emem_ros.tools.registry import TimeResolver, ToolCallError, ToolRegistry, ToolSpec
from emem_ros.tools.spec import ToolDef
from emem_ros.tools.specs import TOOL_SPECS

PLANNING, EXECUTION, BOTH = "planning", "execution", "both"
"""EmbodiedAgents' ``ActionPhase`` values: Cortex offers planning tools while it plans, execution ones in plans."""

STORE_DESCRIPTION = (
    "Make everything the memory has received so far searchable now: every message of every layer is "
    "stored as it arrives (placed at the robot's pose at the message's own time, thinned by the layer's "
    "intake policy), so there is no snapshot to take; this writes what is still buffered and says how many "
    "observations that was. With auto_store off, it stores the latest message of every layer instead.")


@dataclass(frozen=True)
class ActionDef:
    """One action of EmbodiedAgents' Memory and the emem_ros tool behind it."""

    name: str
    phase: str
    tool: Optional[str]
    """The emem_ros tool that answers it (None: ``store``, answered by the component itself)."""
    renames: Mapping[str, str] = field(default_factory=dict)
    """EmbodiedAgents' argument name -> ours."""

    def ours(self, argument: str) -> str:
        return self.renames.get(argument, argument)

    def theirs(self, argument: str) -> str:
        back = {ours: theirs for theirs, ours in self.renames.items()}
        return back.get(argument, argument)


ACTIONS: tuple[ActionDef, ...] = (
    ActionDef("store", EXECUTION, None),
    ActionDef("store_specific_memory", EXECUTION, "store_specific_memory", {"content": "text"}),
    ActionDef("start_episode", EXECUTION, "start_episode"),
    ActionDef("end_episode", EXECUTION, "end_episode"),
    ActionDef("semantic_search", PLANNING, "semantic_search"),
    ActionDef("spatial_query", PLANNING, "spatial_query"),
    ActionDef("temporal_query", PLANNING, "temporal_query"),
    ActionDef("episode_summary", PLANNING, "episode_summary"),
    ActionDef("get_current_context", PLANNING, "get_current_context"),
    ActionDef("search_gists", PLANNING, "search_gists"),
    ActionDef("entity_query", PLANNING, "entity_query"),
    ActionDef("locate", PLANNING, "locate"),
    ActionDef("recall", PLANNING, "recall"),
    ActionDef("body_status", BOTH, "body_status"),
)
ACTIONS_BY_NAME: dict[str, ActionDef] = {a.name: a for a in ACTIONS}
RETRIEVAL = tuple(a.name for a in ACTIONS if a.phase != EXECUTION)
"""The ten tools EmbodiedAgents' ``register_tools_on`` offers a plain LLM component."""

_TOOLS: dict[str, ToolDef] = {t.name: t for t in TOOL_SPECS}


def parameters(action: ActionDef) -> dict[str, Any]:
    """The action's JSON schema: the tool's, with EmbodiedAgents' argument names."""
    if action.tool is None:
        return {"type": "object", "properties": {}, "required": []}
    schema = _TOOLS[action.tool].parameters
    return {"type": "object",
            "properties": {action.theirs(k): v for k, v in schema.get("properties", {}).items()},
            "required": [action.theirs(k) for k in schema.get("required", [])]}


def description(action: ActionDef) -> dict[str, Any]:
    """The ``@component_action(description=...)`` of an action: an OpenAI tool entry."""
    text = STORE_DESCRIPTION if action.tool is None else _TOOLS[action.tool].description
    return {"type": "function",
            "function": {"name": action.name, "description": text, "parameters": parameters(action)}}


class ActionError(Exception):
    """A call that did not run, or failed; the message says why in words a planner can act on."""


Handler = Callable[..., Any]


def action_registry(handler_for: Callable[[str], Handler], store: Handler,
                    resolve_time: Optional[TimeResolver] = None) -> ToolRegistry:
    """The actions, checked like every tool call; ``handler_for(tool)`` runs a tool with our argument names."""
    registry = ToolRegistry(resolve_time=resolve_time)
    for action in ACTIONS:
        run = store if action.tool is None else _renamed(action, handler_for(action.tool))
        time_params = _TOOLS[action.tool].time_params if action.tool else ()
        registry.register(ToolSpec(name=action.name, description=description(action)["function"]["description"],
                                   parameters=parameters(action), handler=run,
                                   time_params=frozenset(action.theirs(p) for p in time_params),
                                   kind="action" if action.phase == EXECUTION else "query"))
    return registry


def _renamed(action: ActionDef, handler: Handler) -> Handler:
    def run(**arguments: Any) -> Any:
        return handler(**{action.ours(k): v for k, v in arguments.items()})

    run.__name__ = action.name
    return run


def run_action(registry: ToolRegistry, name: Any, arguments: Any) -> str:
    """Check and run one action; its answer as text, or ``ActionError`` saying what was wrong."""
    spec = registry.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ActionError(unknown_action(name))
    _refuse_non_finite(name, arguments)
    try:
        kwargs = registry.check(spec, arguments)
    except ToolCallError as exc:
        raise ActionError(str(exc)) from None
    try:
        result = spec.handler(**kwargs)
    except ActionError:
        raise
    except (EmemError, ValueError, KeyError, TypeError) as exc:
        raise ActionError(f"{name} could not run: {_words(exc)}") from None
    if getattr(result, "ok", True) is False:  # an action that said no (end_episode with none active), as the node does
        raise ActionError(str(result))
    return str(result)


def _refuse_non_finite(name: str, arguments: Any, path: str = "") -> None:
    """NaN and infinities anywhere (JSON from Python allows them), also inside lists and objects."""
    if isinstance(arguments, float) and not math.isfinite(arguments):
        raise ActionError(f"{name}: '{path}' must be a finite number, got {arguments!r}")
    if isinstance(arguments, Mapping):
        for key, value in arguments.items():
            _refuse_non_finite(name, value, f"{path}.{key}" if path else str(key))
    elif isinstance(arguments, (list, tuple)):
        for index, value in enumerate(arguments):
            _refuse_non_finite(name, value, f"{path}[{index}]")


def unknown_action(name: Any) -> str:
    """Why ``name`` is no action of the memory, with the close ones."""
    import difflib

    names = [a.name for a in ACTIONS]
    close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.5) if isinstance(name, str) else []
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    return f"the memory has no action named {name!r}.{hint} Its actions are: {', '.join(names)}."


def _words(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return text or type(exc).__name__
