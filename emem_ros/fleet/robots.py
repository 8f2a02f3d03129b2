"""Robots of a fleet store: register one with its frame, list them, remove one's rows.

A robot's transform (where its map frame sits in the fleet frame) is applied
when its rows are synced. Changing it later re-places the rows already in
the fleet store in the same transaction (``ST_Affine`` with the old
transform undone and the new one applied), so positions never mix frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from emem_ros.fleet.errors import FleetError
from emem_ros.fleet.schema import PLACE_CELL, rebuild_summaries
from emem_ros.fleet.transform import IDENTITY, RigidTransform

PLACED_COLUMNS = (("observations", "position"), ("entities", "position"), ("experiences", "position"),
                  ("gists", "center"))


@dataclass(frozen=True)
class RobotInfo:
    robot_id: str
    transform: RigidTransform
    applied_seq: int
    synced_at: Optional[datetime]
    observations: int


def add_robot(conn: Any, robot_id: str, transform: RigidTransform = IDENTITY) -> tuple[bool, int]:
    """Register ``robot_id`` or set its transform; (added, rows re-placed)."""
    check_robot_id(robot_id)
    row = conn.execute("SELECT tx, ty, yaw FROM fleet.robots WHERE robot_id = %s FOR UPDATE", (robot_id,)).fetchone()
    if row is None:
        conn.execute("INSERT INTO fleet.robots(robot_id, tx, ty, yaw) VALUES (%s, %s, %s, %s)",
                     (robot_id, transform.x, transform.y, transform.yaw))
        conn.commit()
        return True, 0
    old = RigidTransform(float(row[0]), float(row[1]), float(row[2]))
    moved = 0
    if old != transform:
        change = old.inverse().then(transform)
        a, b, d, e, xoff, yoff = change.affine_params()
        for table, column in PLACED_COLUMNS:
            cur = conn.execute(
                f"UPDATE fleet.{table} SET {column} = ST_Affine({column}, %s, %s, %s, %s, %s, %s) "
                f"WHERE robot_id = %s AND {column} IS NOT NULL", (a, b, d, e, xoff, yoff, robot_id))
            moved += max(cur.rowcount, 0)
        conn.execute("UPDATE fleet.robots SET tx = %s, ty = %s, yaw = %s WHERE robot_id = %s",
                     (transform.x, transform.y, transform.yaw, robot_id))
        rebuild_summaries(conn, robot_id, cell=place_cell(conn))  # its grid cells moved with it
    conn.commit()
    return False, moved


def place_cell(conn: Any) -> float:
    row = conn.execute("SELECT value FROM fleet.meta WHERE key = 'place_cell'").fetchone()
    return float(row[0]) if row else PLACE_CELL


def list_robots(conn: Any) -> list[RobotInfo]:
    rows = conn.execute(
        "SELECT r.robot_id, r.tx, r.ty, r.yaw, r.applied_seq, r.synced_at, "
        "(SELECT count(*) FROM fleet.observations o WHERE o.robot_id = r.robot_id) "
        "FROM fleet.robots r ORDER BY r.robot_id").fetchall()
    conn.rollback()
    return [RobotInfo(r[0], RigidTransform(float(r[1]), float(r[2]), float(r[3])), int(r[4]), r[5], int(r[6]))
            for r in rows]


def remove_robot(conn: Any, robot_id: str) -> int:
    """Delete a robot and every row it synced (the shared texts stay); returns its observation count."""
    exists = conn.execute("SELECT 1 FROM fleet.robots WHERE robot_id = %s FOR UPDATE", (robot_id,)).fetchone()
    if exists is None:
        conn.rollback()
        raise FleetError(f"no robot {robot_id!r} in the fleet store")
    removed = conn.execute("DELETE FROM fleet.observations WHERE robot_id = %s", (robot_id,)).rowcount
    conn.execute("DELETE FROM fleet.robots WHERE robot_id = %s", (robot_id,))  # the rest cascades
    conn.commit()
    count: int = max(removed, 0)
    return count


def check_robot_id(robot_id: str) -> None:
    if not robot_id or len(robot_id) > 64 or not robot_id[0].isalnum() \
            or not all(c.isalnum() or c in "_.-" for c in robot_id) or not robot_id.isascii():
        raise FleetError(f"a robot id is 1-64 letters, digits, '_', '.' or '-' starting with a letter or digit, "
                         f"got {robot_id!r}")
