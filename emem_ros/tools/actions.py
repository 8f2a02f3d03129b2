"""Write actions an LLM may take: note something, open and close episodes.

They wrap the engine (``Engine.add`` / ``start_episode`` / ``end_episode``)
and answer with a sentence that tells the planner what happened and what to
do next, so a tool-calling loop never has to guess.
"""

from __future__ import annotations

from typing import Any, Optional

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.types import SourceType, parse_id
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.results import ActionResult, fmt_pos, quoted

NOTES_LAYER = "agent_notes"


def store_specific_memory(env: ToolEnv, text: Any, x: Any = None, y: Any = None, z: Any = None,
                          layer_name: Any = NOTES_LAYER, metadata: Any = None, position_is: Any = None,
                          view_range: Any = None) -> ActionResult:
    """Store a note now (source_type 'manual') and flush it, so the next query sees it.

    ``position_is`` / ``view_range``: what x, y mean (``engine/positions.py``).
    """
    text = env.text(text, "text")
    layer = env.layer(layer_name) or NOTES_LAYER
    env.prepare()
    if layer in env.catalog.body_layers:
        raise InvalidInputError(f"layer '{layer}' holds body readings; store notes in another layer")
    if (position_is is not None or view_range is not None) and (x is None or y is None):
        raise InvalidInputError("position_is and view_range say what x, y mean: give them with a position")
    obs_id = env.engine.add(text, x, y, 0.0 if z is None else z, layer_name=layer,
                            source_type=SourceType.MANUAL.value, metadata=metadata, position_is=position_is,
                            view_range=view_range)
    try:
        env.engine.flush()
    except Exception:  # accepted and kept: an error here would make the planner store it twice
        note = env.engine.unstored_note() or "storing fails right now"
        return ActionResult("store_specific_memory", True,
                            f"Accepted {obs_id} in layer '{layer}': {quoted(text)}; it is kept and becomes"
                            f" searchable once it is stored ({note}). Do not store it again.", obs_id)
    observation = env.engine.get_observation(obs_id)
    where = f" at {fmt_pos(observation.position)}" if observation.position is not None else " (no position)"
    episode = f", in episode {observation.episode_id}" if observation.episode_id else ""
    return ActionResult("store_specific_memory", True,
                        f"Stored {obs_id} in layer '{layer}'{where}{episode}: {quoted(text)}.", obs_id)


def start_episode(env: ToolEnv, name: Any, parent_episode_id: Any = None, goal: Any = None,
                  agent_id: Any = None) -> ActionResult:
    name = env.text(name, "name")
    if agent_id not in (None, "") and not isinstance(agent_id, str):
        raise InvalidInputError(f"agent_id must be a string, got {agent_id!r}")
    if goal is not None and not isinstance(goal, str):
        raise InvalidInputError(f"goal must be a string, got {goal!r}")
    parent: Optional[str] = None
    if parent_episode_id not in (None, ""):
        parent = f"ep-{env.episode(parent_episode_id)}"
    episode_id = env.engine.start_episode(name, parent_episode_id=parent, goal=goal or None)
    nested = f" as a subtask of {parent}" if parent else ""
    session = ""
    if agent_id and env.memfs is not None:  # the planner's MemFS session lives as long as the episode
        opened = env.memfs().open_for_episode(str(agent_id), episode_id)
        session = f" MemFS session {opened.id} is open for {agent_id} (its /tmp/ is cleared when the episode ends)."
    return ActionResult("start_episode", True,
                        f"Started episode {episode_id} {quoted(name)}{nested}. Everything observed from now on"
                        " belongs to it; call end_episode with the result when the task is done." + session,
                        episode_id)


def end_episode(env: ToolEnv, consolidate: Any = True, result: Any = None, reflection: Any = None,
                success: Any = None) -> ActionResult:
    for field, value in (("result", result), ("reflection", reflection)):
        if value is not None and not isinstance(value, str):
            raise InvalidInputError(f"{field} must be a string, got {value!r}")
    if success is not None and not isinstance(success, bool):
        raise InvalidInputError(f"success must be true or false, got {success!r}")
    active = env.engine.active_episode_id
    if active is None:
        return ActionResult("end_episode", False, "No episode is active, so there was nothing to end.")
    name = env.store.get_episode(parse_id(active)[1]).name
    episode_id = env.engine.end_episode(consolidate=bool(consolidate), result=result or None,
                                        reflection=reflection or None, success=success)
    outcome = {True: " (succeeded)", False: " (failed)", None: ""}[success]
    still = env.engine.active_episode_id
    tail = f" Episode {still} is still active." if still else ""
    return ActionResult("end_episode", True, f"Ended episode {episode_id} {quoted(name)}{outcome}.{tail}",
                        episode_id)
