"""The built-in tools, each declared once: eMEM's ten retrieval tools and the write actions.

Names and parameters are eMEM's, so planners written for it work unchanged.
Each description is written for a tool-calling LLM: it says what the tool
answers, what it does not, and which sibling to use instead; every parameter
says its unit or format. See ``spec.py`` for what is derived from these.
"""

from __future__ import annotations

from typing import Any

from emem_ros.tools import actions, body, context, episodes, knowledge, locate, perception
from emem_ros.tools import scopes as sc
from emem_ros.tools.scopes import observation_scopes
from emem_ros.tools.spec import COORDINATE, DISTANCE, FACTOR, LEVEL, MINUTES, TIME, CachePolicy, ToolDef
from emem_ros.tools.spec import obj as _obj
from emem_ros.tools.spec import param as _p
from emem_ros.tools.spec import time_param as _time

__all__ = ["TOOLS", "ACTIONS", "TOOL_SPECS", "TIME"]

N_RESULTS = _p("integer", "Maximum number of results (1-100).", default=10, minimum=1)
LAYER = _p("string", "Only this perception layer (e.g. 'detections', 'scene', 'speech'). Omit for all layers.")
NEAR_X = _p("number", "X of a point to stay near, metres in the map frame. Needs near_y.", **COORDINATE)
NEAR_Y = _p("number", "Y of that point, metres in the map frame.", **COORDINATE)
SPATIAL_RADIUS = _p("number", "Radius around (near_x, near_y) in metres (default 3).", **DISTANCE)


def _obs(args: dict[str, Any], *more: str) -> tuple[str, ...]:
    """Scopes of a question over observations: its layer's (or all perception), plus ``more``."""
    layer = args.get("layer")
    return observation_scopes(layer if isinstance(layer, str) and layer.strip() else None) + more


TOOLS: tuple[ToolDef, ...] = (
    ToolDef(
        name="semantic_search",
        run=perception.semantic_search,
        cache=CachePolicy("query", lambda a: _obs(a, sc.GISTS) + ((sc.EPISODES,) if a.get("episode_id") else ()),
                          ranked_with_recency=True),
        srv="SemanticSearch",
        facade=True,
        description=(
            "Find what the robot perceived or was told, by meaning and by keywords (e.g. 'red mug', "
            "'person waving', 'spilled water'). Returns distinct memories best first, each with where and when "
            "it was last seen and how often (×N), plus long-term summaries. Ranking is by resemblance, not "
            "truth: answer from the results only if they mention what was asked; if none does, say it is not "
            "remembered. Narrow with layer, time window, a place (near_x/near_y/spatial_radius) or an episode; "
            "filters never hide a match that passes them. For 'where is X' use locate; for the robot's own "
            "state use body_status."),
        parameters=_obj({
            "query": _p("string", "What to look for, in words."),
            "n_results": N_RESULTS,
            "layer": LAYER,
            "time_after": _time("Only things seen after this time."),
            "time_before": _time("Only things seen before this time."),
            "near_x": NEAR_X, "near_y": NEAR_Y, "spatial_radius": SPATIAL_RADIUS,
            "episode_id": _p("string", "Only things seen during this episode, e.g. 'ep-3'."),
        }, ("query",)),
        time_params=("time_after", "time_before"),
    ),
    ToolDef(
        name="spatial_query",
        run=perception.spatial_query,
        cache=CachePolicy(None, lambda a: _obs(a, sc.GISTS)),
        srv="SpatialQuery",
        facade=True,
        description=(
            "List everything remembered within a radius of a point, nearest first, without a topic: "
            "'what is at (2, 3)?'. Each thing appears once per spot with its count and last sighting. "
            "To find a specific thing near a point use semantic_search with near_x/near_y; to find where a "
            "thing is use locate."),
        parameters=_obj({
            "x": _p("number", "X of the point, metres in the map frame.", **COORDINATE),
            "y": _p("number", "Y of the point, metres in the map frame.", **COORDINATE),
            "z": _p("number", "Z in metres; leave 0 for a 2-D map (distance is then horizontal).", default=0.0,
                    **COORDINATE),
            "radius": _p("number", "Radius in metres.", default=2.0, **DISTANCE),
            "layer": LAYER,
            "time_after": _time("Only things seen there after this time."),
            "time_before": _time("Only things seen there before this time."),
            "n_results": N_RESULTS,
        }, ("x", "y")),
        time_params=("time_after", "time_before"),
    ),
    ToolDef(
        name="temporal_query",
        run=perception.temporal_query,
        cache=CachePolicy(None, lambda a: _obs(a, sc.GISTS), clock_args=("last_n_minutes",)),
        srv="TemporalQuery",
        facade=True,
        description=(
            "What was observed in a time window, newest or oldest first: 'what happened in the last 10 "
            "minutes?', 'what did you see between 9:00 and 9:30?'. Repeated sightings are merged (×N, first and "
            "last time); consolidated summaries fill in where raw observations were archived. Use "
            "last_n_minutes when you only know a duration."),
        parameters=_obj({
            "time_after": _time("Start of the window."),
            "time_before": _time("End of the window."),
            "last_n_minutes": _p("number", "Shortcut for the window from N minutes ago until now.", **MINUTES),
            "layer": LAYER,
            "near_x": NEAR_X, "near_y": NEAR_Y, "spatial_radius": SPATIAL_RADIUS,
            "order": _p("string", "'newest' (default) or 'oldest' first.", enum=["newest", "oldest"],
                        default="newest"),
            "n_results": N_RESULTS,
        }),
        time_params=("time_after", "time_before"),
    ),
    ToolDef(
        name="episode_summary",
        run=episodes.episode_summary,
        cache=CachePolicy(None, lambda a: _obs({}, sc.EPISODES, sc.GISTS)),
        srv="EpisodeSummary",
        facade=True,
        description=(
            "Describe past or current episodes (named tasks bracketed by start_episode/end_episode): status, "
            "times, goal, result, reflection, what was seen most, and their summaries. Give episode_id for one "
            "episode, task_name to match names, or last_n for the most recent ones (default: the last one)."),
        parameters=_obj({
            "episode_id": _p("string", "An episode id such as 'ep-3'."),
            "task_name": _p("string", "Part of an episode name, e.g. 'kitchen patrol'."),
            "last_n": _p("integer", "How many of the most recent episodes (1-20).", default=1, minimum=1),
        }),
        time_params=(),
    ),
    ToolDef(
        name="get_current_context",
        run=context.get_current_context,
        srv="GetCurrentContext",
        facade=True,
        description=(
            "Ground yourself: the robot's position, what is remembered around it, tracked entities and area "
            "summaries nearby, what was observed in the last few minutes, the active episode and the body "
            "status. Call it at the start of a task or conversation."),
        parameters=_obj({
            "radius": _p("number", "What counts as nearby, in metres.", default=3.0, **DISTANCE),
            "include_recent_minutes": _p("number", "How far back 'recent' reaches, in minutes.", default=5.0,
                                         **MINUTES),
        }),
        time_params=(),
    ),
    ToolDef(
        name="search_gists",
        run=knowledge.search_gists,
        cache=CachePolicy("query", lambda a: (sc.GISTS,), ranked_with_recency=True),
        srv="SearchGists",
        facade=True,
        description=(
            "Search only the long-term summaries (gists) that consolidation writes for clusters of "
            "observations; they survive after raw observations are archived. Use for old or high-level "
            "questions ('what usually happens in the lab?'). semantic_search already includes gists, so "
            "prefer it for ordinary questions."),
        parameters=_obj({
            "query": _p("string", "What to look for, in words."),
            "n_results": N_RESULTS,
            "time_after": _time("Only summaries of time after this."),
            "time_before": _time("Only summaries of time before this."),
        }, ("query",)),
        time_params=("time_after", "time_before"),
    ),
    ToolDef(
        name="entity_query",
        run=knowledge.entity_query,
        cache=CachePolicy("name", lambda a: (sc.ENTITIES,)),
        srv="EntityQuery",
        facade=True,
        description=(
            "Look up tracked entities: persistent objects, people or landmarks that consolidation has followed "
            "across sightings, with their position, spread, sighting count and last sighting. Filter by part "
            "of the name (also matched by meaning), type, place or recency. If none are tracked yet, use "
            "semantic_search or locate."),
        parameters=_obj({
            "name": _p("string", "Part of the name, case-insensitive, e.g. 'chair', 'alice'; names that mean "
                                 "nearly the same also match (cup for mug: cosine >= 0.6), unrelated ones never."),
            "entity_type": _p("string", "Type, e.g. 'furniture', 'person', 'landmark'."),
            "near_x": NEAR_X, "near_y": NEAR_Y,
            "spatial_radius": _p("number", "Radius around (near_x, near_y) in metres (default 5).", **DISTANCE),
            "last_seen_after": _time("Only entities seen after this time."),
            "n_results": N_RESULTS,
        }),
        time_params=("last_seen_after",),
    ),
    ToolDef(
        name="locate",
        run=locate.locate,
        cache=CachePolicy("concept", lambda a: _obs(a, sc.GISTS, sc.ENTITIES), ranked_with_recency=True),
        srv="Locate",
        facade=True,
        description=(
            "Where is something? Resolves a thing or place ('the red chair', 'charging station', 'kitchen') "
            "to map coordinates for navigation: the most likely spot (x, y), a radius, a confidence, the "
            "evidence, and the other places it was seen. Only meaningful for memories recorded with "
            "positions. Not for facts or events: use semantic_search."),
        parameters=_obj({
            "concept": _p("string", "What to find, in words."),
            "n_results": _p("integer", "How many of the best-matching memories to weigh (1-100).", default=10,
                            minimum=1),
            "layer": LAYER,
            "time_after": _time("Only sightings after this time."),
            "time_before": _time("Only sightings before this time."),
        }, ("concept",)),
        time_params=("time_after", "time_before"),
    ),
    ToolDef(
        name="recall",
        run=locate.recall,
        cache=CachePolicy("query", lambda a: _obs({}, sc.GISTS, sc.ENTITIES, sc.NOTES), ranked_with_recency=True),
        srv="Recall",
        facade=True,
        description=(
            "Everything remembered about a physical thing or place and its surroundings: locates it, then "
            "gathers the observations, summaries and entities around that spot across all layers. Use for "
            "'tell me about the kitchen' or 'what is around the charging station'. Needs positions; for "
            "topics, conversations or time windows use semantic_search or temporal_query."),
        parameters=_obj({
            "query": _p("string", "The thing or place, in words."),
            "n_results": _p("integer", "Items per section (1-100).", default=10, minimum=1),
            "radius_multiplier": _p("number", "Widen the located radius by this factor to gather "
                                    "surroundings (at least 2 m is always used).", default=1.5, **FACTOR),
        }, ("query",)),
        time_params=(),
    ),
    ToolDef(
        name="body_status",
        run=body.body_status,
        srv="BodyStatus",
        facade=True,
        description=(
            "The robot's own condition (battery, temperatures, joints, diagnostics); the only tool that "
            "reports body readings, perception tools never do. Three questions: (1) now: call with no "
            "argument (or only layers) for the latest reading of each body layer, its age and its trend over "
            "the last ten minutes, e.g. 'battery 54% (-12% over 10 min)'; (2) at a past time: give at_time, "
            "e.g. 'what was the battery at 10:05?' -> at_time='2026-11-22T10:05:00Z' or '-30m'; (3) when a "
            "level was crossed: give below or above (a number in the units the readings show, e.g. below=30 "
            "for 30 %), e.g. 'when did the battery fall below 30 %?' -> layers=['battery'], below=30; each "
            "crossing lists the last reading before it and the first past it, newest first; bound the search "
            "with time_after/time_before."),
        parameters=_obj({
            "layers": _p("array", "Only these body layers, e.g. ['battery']. Omit for all.",
                         items={"type": "string"}),
            "at_time": _time("Report the readings as they were at this time (the last reading at or before it, "
                             "with the trend before it) instead of the latest. Not with below/above."),
            "below": _p("number", "Find when the readings fell below this level, in the units they are shown in "
                        "(30 means 30 % for the battery, 70 means 70 °C). Not with above.", **LEVEL),
            "above": _p("number", "Find when the readings rose above this level, in the units they are shown in. "
                        "Not with below.", **LEVEL),
            "time_after": _time("Only crossings after this time (with below/above)."),
            "time_before": _time("Only crossings before this time (with below/above)."),
            "n_results": _p("integer", "Most crossings to list per layer, newest first (1-20).", default=5,
                            minimum=1),
        }),
        time_params=("at_time", "time_after", "time_before"),
    ),
)

ACTIONS: tuple[ToolDef, ...] = (
    ToolDef(
        name="store_specific_memory",
        run=actions.store_specific_memory,
        kind="action",
        srv="StoreSpecificMemory",
        facade=True,
        description=(
            "Remember something on purpose: a fact, an instruction, a place name or a note for later "
            "(e.g. 'the charger is behind the sofa'). Stored at once as a manual observation, optionally "
            "at a position, and found by the search tools afterwards."),
        parameters=_obj({
            "text": _p("string", "What to remember, as a full sentence."),
            "x": _p("number", "X in metres where it applies (optional; needs y).", **COORDINATE),
            "y": _p("number", "Y in metres where it applies (optional; needs x).", **COORDINATE),
            "z": _p("number", "Z in metres (optional).", **COORDINATE),
            "layer_name": _p("string", "Layer to file it under.", default="agent_notes"),
            "metadata": _p("object", "Optional extra fields (a JSON object)."),
            "position_is": _p("string", "What x, y are: 'thing' when they are where the thing itself is (a "
                              "place you were told or measured), 'robot' when they are where you (the robot) "
                              "stood when you perceived it. If you do not say, x, y is taken as where it was "
                              "perceived from (the answer then allows view_range around it).",
                              enum=["thing", "robot"]),
            "view_range": _p("number", "With position_is 'robot': how far from x, y the thing may be, metres "
                             "(default: the layer's, else 6).", **DISTANCE),
        }, ("text",)),
        time_params=(),
    ),
    ToolDef(
        name="start_episode",
        run=actions.start_episode,
        kind="action",
        srv="StartEpisode",
        description=(
            "Open an episode: a named task such as 'fetch the red mug'. Everything observed until "
            "end_episode belongs to it, so it can be summarised and searched by episode later. Episodes "
            "nest: give parent_episode_id to make this a subtask."),
        parameters=_obj({
            "name": _p("string", "Short name of the task."),
            "parent_episode_id": _p("string", "Episode this one is a subtask of, e.g. 'ep-2'."),
            "goal": _p("string", "What the task should achieve."),
            "agent_id": _p("string", "Your agent id, to open your MemFS session (your own /tmp/) for the task."),
        }, ("name",)),
        time_params=(),
    ),
    ToolDef(
        name="end_episode",
        run=actions.end_episode,
        kind="action",
        srv="EndEpisode",
        description=(
            "Close the innermost active episode and record how it went (result, success, and what was "
            "learned in reflection); consolidation then summarises it."),
        parameters=_obj({
            "consolidate": _p("boolean", "Summarise the episode now (default true).", default=True),
            "result": _p("string", "What happened in the end."),
            "reflection": _p("string", "What to do differently or remember next time."),
            "success": _p("boolean", "Whether the goal was reached."),
        }),
        time_params=(),
    ),
)

TOOL_SPECS: tuple[ToolDef, ...] = TOOLS + ACTIONS
"""Every built-in tool, in the order LLMs are offered them."""
