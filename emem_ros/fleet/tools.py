"""The ten retrieval tools over a fleet store: the robot's ToolDefs and runners, bound to the fleet's reads.

Each tool keeps its declaration (name, description, parameters: the LLM and
a planner see the same tool), its runner (the very function a robot's memory
runs) and its result type and text; ``bind`` gives the runner a
``FleetEnv`` whose reads (``fleet.reads.FleetReads``) are SQL in PostgreSQL,
and one more argument, ``robots`` (only what these robots saw). Hits say
which robot saw them (``[robot2/detections]``). Tools about one robot itself
(get_current_context, body_status) answer for each robot asked, in turn.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

from emem_ros.fleet.env import FleetEnv
from emem_ros.tools.reads import ToolContext
from emem_ros.tools.spec import ToolDef
from emem_ros.tools.spec import param as _p
from emem_ros.tools.specs import TOOLS


@dataclasses.dataclass
class PerRobot:
    """A question about one robot itself (its context, its body), answered for each robot asked, in turn."""

    tool: str
    answers: list[tuple[str, Any]]
    """(robot id, that robot's answer: the robot's own result type)."""

    def __getitem__(self, robot: str) -> Any:
        for name, answer in self.answers:
            if name == robot:
                return answer
        raise KeyError(robot)

    def __str__(self) -> str:
        if not self.answers:
            return "No robot has synced into this fleet store yet (emem sync DB --to URL --robot-id R)."
        return "\n\n".join(f"[{robot}]\n{answer}" for robot, answer in self.answers)


def bind(runner: Callable[..., Any], per_robot: bool = False) -> Callable[..., Any]:
    """``runner`` (the robot's own tool code) over the fleet, with one more argument: ``robots``.

    ``per_robot``: the tool describes one robot (get_current_context,
    body_status): it runs once per robot asked (all, without ``robots``)
    and answers ``PerRobot``.
    """
    signature = inspect.signature(runner)
    robots_param = inspect.Parameter("robots", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
    full = signature.replace(parameters=[*signature.parameters.values(), robots_param])

    def run(env: FleetEnv, *args: Any, **kwargs: Any) -> Any:
        arguments = full.bind(env, *args, **kwargs).arguments
        chosen = env.robots(arguments.pop("robots", None))
        del arguments[next(iter(signature.parameters))]
        if not per_robot:
            scoped: ToolContext = env.scoped(chosen)  # mypy holds FleetEnv to the runners' interface here
            return runner(scoped, **arguments)
        targets = chosen or tuple(env.reader.robots())
        return PerRobot(runner.__name__, [(robot, runner(env.scoped((robot,)), **arguments)) for robot in targets])

    run.__name__ = run.__qualname__ = runner.__name__
    run.__doc__ = runner.__doc__
    run.__signature__ = full  # type: ignore[attr-defined]
    run.runner = runner  # type: ignore[attr-defined]
    return run


# ---------------------------------------------------------------------- declarations
ROBOTS = _p("array", "Only what these robots saw, e.g. ['robot1', 'robot3']. Omit for the whole fleet.",
            items={"type": "string"})
PER_ROBOT = frozenset({"get_current_context", "body_status"})
"""Tools about one robot itself: over the fleet, answered for each robot asked in turn."""
PER_ROBOT_NOTE = (" Over the fleet: answered for each robot in robots (all robots when omitted), from what it "
                  "synced; positions are in the fleet frame.")
FLEET_NOTE = (" Over the fleet: answers come from every robot (each hit names the robot that saw it, "
              "e.g. [robot2/detections]); positions are in the fleet frame; narrow with robots.")


def _fleet_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    properties = {}
    for name, schema in parameters.get("properties", {}).items():
        schema = dict(schema)
        if isinstance(schema.get("description"), str):
            schema["description"] = schema["description"].replace("map frame", "fleet frame")
        properties[name] = schema
    properties["robots"] = ROBOTS
    return {**parameters, "properties": properties}


def fleet_tooldefs() -> tuple[ToolDef, ...]:
    """The robot's ten tool declarations, each ``run`` the robot's own runner bound to the fleet's reads
    (``bind``: plus a ``robots`` argument)."""
    return tuple(dataclasses.replace(td, run=bind(td.run, td.name in PER_ROBOT),
                                     parameters=_fleet_parameters(td.parameters),
                                     description=td.description + (PER_ROBOT_NOTE if td.name in PER_ROBOT
                                                                    else FLEET_NOTE), cache=None, srv=None)
                 for td in TOOLS)
