"""What the fleet store knows of one robot itself: its latest synced pose, its open episode, its body readings.

get_current_context and body_status describe one robot; over the fleet they
are asked of each robot in turn, from what its sync shipped (interoception
observations are synced like any other, in the fleet frame). ``BodyRows``
runs ``body.py``'s predicates (standard SQL over id, stamp, layer,
source_type and value, written with ``?``) on the robot's rows in PostgreSQL.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from emem_ros.core.types import Position
from emem_ros.fleet.reader import BODY, FleetReader

POSE_FRESHNESS = 60.0
"""Seconds: a body reading's pose this much older than the robot's newest observation still counts as now."""
BODY_ROWS = f"o.robot_id = %s AND o.source_type = '{BODY}' AND "
"""Every read here names body readings literally: the partial index ``observations_body`` then serves it."""
_ROW = "SELECT o.id, o.stamp, o.value, o.text_id FROM fleet.observations o WHERE " + BODY_ROWS


def _sql(where: str) -> str:
    """``body.py``'s predicates use ``?``; psycopg uses ``%s`` (the predicates hold no other ``%``)."""
    return where.replace("%", "%%").replace("?", "%s")


class BodyRows:
    """One robot's body readings in the fleet store (``tools.reads.BodyRows``)."""

    def __init__(self, reader: FleetReader, robot: str) -> None:
        self.reader, self.robot = reader, robot

    def layers(self) -> list[str]:
        return [r[0] for r in self.reader.rows(
            f"SELECT DISTINCT o.layer FROM fleet.observations o WHERE {BODY_ROWS}true ORDER BY 1", (self.robot,))]

    def stored_scales(self) -> dict[str, dict[str, Any]]:
        return {}  # the fleet keeps the text of readings the robot archived: samples always have it

    def samples(self, layer: str, k: int) -> list[tuple[Optional[str], Optional[float]]]:
        return [(t, v) for t, v in self.reader.rows(
            "SELECT t.text, o.value FROM fleet.observations o JOIN fleet.texts t ON t.id = o.text_id"
            f" WHERE {BODY_ROWS}o.layer = %s ORDER BY o.stamp DESC LIMIT %s", (self.robot, layer, k))]

    def rows(self, where: str, params: Sequence[Any], order: str, limit: int) -> list[tuple[Any, ...]]:
        return self.reader.rows(f"{_ROW}{_sql(where)} ORDER BY {order} LIMIT %s", (self.robot, *params, limit))

    def stamp_at(self, where: str, params: Sequence[Any], offset: int) -> Optional[float]:
        found = self.reader.rows(
            f"SELECT o.stamp FROM fleet.observations o WHERE {BODY_ROWS}{_sql(where)}"
            " ORDER BY o.stamp DESC LIMIT 1 OFFSET %s", (self.robot, *params, offset))
        return float(found[0][0]) if found else None

    def extreme(self, where: str, params: Sequence[Any], lowest: bool) -> Optional[tuple[Any, ...]]:
        found = self.reader.rows(f"{_ROW}{_sql(where)} AND o.value IS NOT NULL"
                                 f" ORDER BY o.value {'ASC' if lowest else 'DESC'}, o.stamp DESC LIMIT 1",
                                 (self.robot, *params))
        return tuple(found[0]) if found else None

    def texts(self, ids: Sequence[int]) -> dict[int, str]:
        return self.reader.names([i for i in ids if i is not None])


def current_position(reader: FleetReader, robot: str) -> tuple[Optional[Position], str]:
    """The robot's pose at its latest synced body reading (fresh enough), else where it last observed something."""
    newest = reader.rows(
        "SELECT ST_X(position), ST_Y(position), COALESCE(ST_Z(position), 0), stamp FROM fleet.observations"
        " WHERE robot_id = %s AND position IS NOT NULL ORDER BY stamp DESC LIMIT 1", (robot,))
    if not newest:
        return None, "unknown"
    x, y, z, stamp = newest[0]
    pose = reader.rows(
        "SELECT ST_X(o.position), ST_Y(o.position), COALESCE(ST_Z(o.position), 0), o.stamp FROM fleet.observations o"
        f" WHERE {BODY_ROWS}o.position IS NOT NULL ORDER BY o.stamp DESC LIMIT 1", (robot,))
    if pose and float(stamp) - float(pose[0][3]) <= POSE_FRESHNESS:
        px, py, pz, _ = pose[0]
        return (float(px), float(py), float(pz)), f"{robot}'s pose at its latest synced body reading, fleet frame"
    return (float(x), float(y), float(z)), f"where {robot}'s last synced observation was made, fleet frame"


def active_episode(reader: FleetReader, robot: str) -> Optional[str]:
    """The robot's innermost open episode, as synced ('robot2/ep-3 'patrol'')."""
    found = reader.rows("SELECT id, name FROM fleet.episodes WHERE robot_id = %s AND status = 'active'"
                        " ORDER BY start DESC, id DESC LIMIT 1", (robot,))
    return f"{robot}/ep-{found[0][0]} '{found[0][1]}'" if found else None
