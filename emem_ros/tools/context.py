"""get_current_context: where the robot is, what is around it, what just happened, how it feels."""

from __future__ import annotations

import math
from typing import Any, Optional

from emem_ros.core.types import Position
from emem_ros.tools.body import body_status
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.filters import Filters
from emem_ros.tools.reads import ToolContext
from emem_ros.tools.results import ContextResult, Hit

NEARBY = 10
RECENT = 10
POSE_FRESHNESS = 60.0
"""Seconds: a body reading's pose this much older than the newest observation is still 'now'."""


def get_current_context(env: ToolContext, radius: Any = 3.0, include_recent_minutes: Any = 5.0) -> ContextResult:
    radius = env.positive(radius, "radius", 3.0)
    minutes = env.positive(include_recent_minutes, "include_recent_minutes", 5.0)
    now = env.prepare()
    position, source = env.reads.current_position()
    nearby, entities, gists = [], [], []
    if position is not None:
        around = Filters(center=position, radius=radius)
        nearby = env.reads.nearby_hits(around, NEARBY, gists=False)
        entities = env.reads.entities_near(position, radius, 5)
        gists = [g for g in env.reads.area_gists(around, 3) if _covers(g, radius)]
    recent = env.reads.timeline(Filters(after=now - minutes * 60.0, before=now), RECENT, gists=False)
    body = body_status(env)
    episode = env.reads.active_episode()
    pinned = env.reads.pinned(position, radius, [h.id for h in entities])
    return ContextResult(position, source, radius, minutes, nearby, entities, gists, recent, body, episode, now,
                         pinned)


def _covers(gist: Hit, radius: float) -> bool:
    """Whether a summary's area reaches the robot's circle (the area query is a box: its corners do not)."""
    if gist.distance is None:
        return False
    return gist.distance <= (gist.radius or 0.0) + radius


def current_position(env: ToolEnv) -> tuple[Optional[Position], str]:
    """The ROS node's live pose if it set one, else the newest observation that had a position."""
    position = _as_position(env.engine.live_pose())
    if position is not None:
        return position, "odometry"
    conn = env.store.reader()
    newest = conn.execute(
        "SELECT x, y, z, stamp FROM observations WHERE x IS NOT NULL ORDER BY stamp DESC LIMIT 1").fetchone()
    if newest is None:
        return None, "unknown"
    # Body readings are stamped with the robot's own pose; detections may carry the object's.
    for layer in env.catalog.body_layers:
        pose = conn.execute("SELECT x, y, z, stamp FROM observations WHERE layer = ? AND x IS NOT NULL"
                            " ORDER BY stamp DESC LIMIT 1", (layer,)).fetchone()
        if pose is not None and newest[3] - pose[3] <= POSE_FRESHNESS:
            return (pose[0], pose[1], pose[2] or 0.0), "robot pose at its latest body reading"
    return (newest[0], newest[1], newest[2] or 0.0), "where the last observation was made"


def _as_position(value: Any) -> Optional[Position]:
    if value is None:
        return None
    try:
        coords = [float(c) for c in list(value)[:3]]
    except (TypeError, ValueError):
        return None
    if len(coords) < 2 or not all(math.isfinite(c) for c in coords):
        return None
    return (coords[0], coords[1], coords[2] if len(coords) > 2 else 0.0)
