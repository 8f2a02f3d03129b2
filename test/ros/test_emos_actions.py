"""Our Memory component declares EmbodiedAgents Memory's actions: the same names, argument names and phases.

Read from the installed ``agents`` package (EmbodiedAgents 0.7.4 in the Humble
overlay) and from ``emem_ros.emos``, the way Cortex reads them: the methods
decorated ``@component_action``, their ``_action_phase`` and the JSON schema
in ``_action_description``. Their retrieval tools take ``**kwargs`` described
by eMEM's schemas (stubs without properties when eMEM is not installed); their
write actions name their arguments in the signature. Every argument they take,
ours takes under the same name; what ours adds is listed here, and optional.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import pytest

pytest.importorskip("agents", reason="EmbodiedAgents is in the Humble overlay (/opt/ros/humble-extras)")

from agents.components.cortex import Cortex
from agents.components.memory import Memory as TheirMemory
from ros_sugar.utils import get_methods_with_decorator

from emem_ros.emos.component import Memory as OurMemory

pytestmark = pytest.mark.humble_only

OURS_ADDS = {
    "store_specific_memory": {"metadata", "position_is", "view_range"},  # what a position means (issue 25)
    "start_episode": {"parent_episode_id", "goal", "agent_id"},
    "end_episode": {"consolidate", "result", "reflection", "success"},
}
"""Optional arguments our actions take beyond EmbodiedAgents' (their retrieval schemas come from eMEM)."""

EMEM_SCHEMAS = {
    "semantic_search": (["query", "n_results", "layer", "time_after", "time_before", "near_x", "near_y",
                         "spatial_radius", "episode_id"], ["query"]),
    "spatial_query": (["x", "y", "z", "radius", "layer", "time_after", "time_before", "n_results"], ["x", "y"]),
    "temporal_query": (["time_after", "time_before", "last_n_minutes", "layer", "near_x", "near_y", "spatial_radius",
                        "order", "n_results"], []),
    "episode_summary": (["episode_id", "task_name", "last_n"], []),
    "get_current_context": (["radius", "include_recent_minutes"], []),
    "search_gists": (["query", "n_results", "time_after", "time_before"], ["query"]),
    "entity_query": (["name", "entity_type", "near_x", "near_y", "spatial_radius", "last_seen_after", "n_results"], []),
    "locate": (["concept", "n_results", "layer", "time_after", "time_before"], ["concept"]),
    "recall": (["query", "n_results", "radius_multiplier"], ["query"]),
    "body_status": (["layers"], []),
}
"""eMEM 0.3.0's ``emem.tools.TOOL_SCHEMAS`` (argument names, required), read from its wheel on PyPI: what
EmbodiedAgents' Memory declares for its ten retrieval actions when eMEM is installed (without it, stubs)."""


def declared(cls: type) -> dict[str, dict[str, Any]]:
    """Action name -> phase, schema properties, required, and the Python parameters (as Cortex sees them)."""
    out = {}
    for name in get_methods_with_decorator(cls.__new__(cls), "component_action"):
        if name in Cortex._LIFECYCLE_METHODS:  # the base class's start, stop, ...: Cortex leaves them out
            continue
        method = getattr(cls, name)
        schema = json.loads(method._action_description)["function"]
        params = [p.name for p in inspect.signature(inspect.unwrap(method)).parameters.values()
                  if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
        out[name] = {"phase": method._action_phase, "name": schema["name"],
                     "properties": set(schema["parameters"].get("properties", {})),
                     "required": set(schema["parameters"].get("required", [])), "python": set(params)}
    return out


def test_the_same_actions_with_the_same_phases() -> None:
    theirs, ours = declared(TheirMemory), declared(OurMemory)
    assert set(ours) == set(theirs) and len(theirs) == 14
    assert {n: d["phase"] for n, d in ours.items()} == {n: d["phase"] for n, d in theirs.items()}
    assert all(d["name"] == n for n, d in ours.items())


def test_every_argument_they_take_ours_takes_by_the_same_name() -> None:
    theirs, ours = declared(TheirMemory), declared(OurMemory)
    for name, their in theirs.items():
        our = ours[name]
        their_args = their["properties"] | their["python"]
        assert their_args <= our["properties"], f"{name}: ours lacks {their_args - our['properties']}"
        if their["properties"]:  # their schema is real (not eMEM's stub): the same required, the rest listed
            assert our["required"] == their["required"], name
            assert our["properties"] - their_args == OURS_ADDS.get(name, set()), name
        assert not our["python"], f"{name}: ours checks arguments itself (**kwargs), got {our['python']}"


def test_the_constructor_takes_theirs() -> None:
    theirs = inspect.signature(TheirMemory.__init__).parameters
    ours = inspect.signature(OurMemory.__init__).parameters
    names = [p for p in theirs if p not in ("self", "kwargs")]
    assert names == [p for p in ours if p in names]  # the same names, in the same order
    assert all(ours[p].kind is theirs[p].kind for p in theirs)  # keyword-only, as theirs
    assert {p for p in ours if p not in theirs} == {"proxy_to", "emem_params"}


def test_register_tools_on_a_plain_llm_component() -> None:
    from agents.ros import MemLayer, Topic

    registered: list[tuple[Any, dict[str, Any], bool]] = []
    llm = type("LLM", (), {"register_tool": lambda self, fn, desc, send: registered.append((fn, desc, send))})()
    memory = OurMemory(layers=[MemLayer(subscribes_to=Topic(name="scene", msg_type="String"))],
                       position=Topic(name="odom", msg_type="Odometry"), component_name="memory_tools_test")
    memory.register_tools_on(llm, tools=["locate", "body_status"], send_tool_response_to_model=False)
    assert [(d["function"]["name"], send) for _, d, send in registered] == [("locate", False), ("body_status", False)]
    locate = registered[0][0]
    assert locate.__name__ == "locate" and locate.__self__ is memory
    assert locate(concept="red mug").startswith("Error: the memory of memory_tools_test is not open")
    with pytest.raises(ValueError, match="no retrieval tool named store"):
        memory.register_tools_on(llm, tools=["store"])
    memory.register_tools_on(llm)
    assert len(registered) == 2 + 10


def test_a_bad_recipe_fails_where_it_is_written() -> None:
    from agents.ros import MemLayer, Topic

    from emem_ros.ros.params import ParamError

    position = Topic(name="odom", msg_type="Odometry")
    scene = [MemLayer(subscribes_to=Topic(name="scene", msg_type="String"))]
    with pytest.raises(ParamError, match="embedding.backend must be one of"):
        OurMemory(layers=scene, position=position, component_name="m1", emem_params={"embedding.backend": "nope"})
    with pytest.raises(TypeError, match="must be one of"):
        OurMemory(layers=[MemLayer(subscribes_to=Topic(name="camera", msg_type="Image"))], position=position,
                  component_name="m2")
    with pytest.raises(TypeError, match="needs layers and a position topic"):
        OurMemory(component_name="m3")


def test_the_retrieval_arguments_are_emems() -> None:
    ours = declared(OurMemory)
    theirs = declared(TheirMemory)
    assert set(EMEM_SCHEMAS) == {n for n, d in theirs.items() if d["phase"] != "execution"}
    for name, (properties, required) in EMEM_SCHEMAS.items():
        assert set(properties) <= ours[name]["properties"], name
        assert ours[name]["required"] == set(required), name
    assert ours["body_status"]["properties"] - {"layers"} == {"at_time", "below", "above", "time_after",
                                                              "time_before", "n_results"}
