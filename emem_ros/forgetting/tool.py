"""The ``forget`` tool: one declaration for Python callers, the ROS service ``~/forget`` and (opt-in) LLMs.

It is not offered to LLM tool calling (``llm=False``): an agent that can
erase memories can erase the evidence of its own mistakes. A robot whose
operator wants it anyway sets ``allow_llm_forget`` (memory config / node
parameter), and the facade declares it with ``llm=True``.
"""

from __future__ import annotations

from typing import Any

from emem_ros.core.errors import InvalidInputError
from emem_ros.tools.results import ActionResult
from emem_ros.tools.spec import TIME, ToolDef, obj, param


def forget(env: Any, ids: Any = None, match: Any = None, similar_to: Any = None, min_similarity: Any = None,
           entity: Any = None, x: Any = None, y: Any = None, radius: Any = None, since: Any = None,
           until: Any = None, layer: Any = None, reason: Any = None, dry_run: Any = False) -> ActionResult:
    run = getattr(env, "forget", None)
    if run is None:
        raise InvalidInputError("forget is not available on this memory")
    if radius is None and x in (None, 0.0) and y in (None, 0.0):  # a fresh ROS request: no region was given
        x = y = None
    report = run(ids=list(ids) if ids else None, match=match or None, similar_to=similar_to or None,
                 min_similarity=min_similarity, entity=entity or None, x=x, y=y, radius=radius,
                 since=since if since not in ("", None) else None, until=until if until not in ("", None) else None,
                 layer=layer or None, reason=str(reason or ""), who=getattr(env, "forget_caller", "tool"),
                 dry_run=bool(dry_run))
    return ActionResult("forget", True, str(report), f"forget-{report.forget_id}" if report.forget_id else None)


FORGET_TOOL = ToolDef(
    name="forget",
    run=forget,
    kind="action",
    srv="Forget",
    llm=False,
    description=(
        "Erase observations from the memory and from every file it keeps (with the summaries, places, entities "
        "and log records derived from them). All given criteria must hold. Use dry_run first to see what would "
        "go. Irreversible; the audit trail keeps ids and counts, never the content."),
    parameters=obj({
        "ids": param("array", "Observation ids to forget, e.g. ['obs-12'].", items={"type": "string"}),
        "match": param("string", "Exact words, any case, e.g. 'red jacket'."),
        "similar_to": param("string", "Forget texts meaning this (with min_similarity)."),
        "min_similarity": param("number", "Least cosine similarity for similar_to (default 0.8).",
                                exclusiveMinimum=0),
        "entity": param("string", "An entity id ('ent-3') or name: it and its sightings."),
        "x": param("number", "X of a region's centre, metres (with y and radius)."),
        "y": param("number", "Y of a region's centre, metres."),
        "radius": param("number", "Radius of the region, metres.", exclusiveMinimum=0),
        "since": param(["string", "number"], f"Only observations from this time. {TIME}"),
        "until": param(["string", "number"], f"Only observations up to this time. {TIME}"),
        "layer": param("string", "Only this layer."),
        "reason": param("string", "Why (kept in the audit trail; do not quote the content)."),
        "dry_run": param("boolean", "List what would go and change nothing.", default=False),
    }),
    time_params=("since", "until"),
)
