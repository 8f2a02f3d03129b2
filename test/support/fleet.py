"""Compare a robot's memory file with what the fleet store holds for it, table by table.

Rows are read on both sides into the same canonical tuples (the robot's own
ids, texts instead of text ids, vectors as float32 bytes, JSON parsed) and
hashed, so a test can say "the fleet holds exactly what the robot holds".
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from typing import Any, Optional

import numpy as np

from emem_ros.fleet.transform import IDENTITY, RigidTransform

TABLES = ("observations", "texts", "episodes", "gists", "entities", "edges", "experiences")


def _vec_sqlite(blob: Optional[bytes]) -> Optional[bytes]:
    return None if blob is None else np.frombuffer(blob, dtype="<f4").tobytes()


def _vec_pg(text: Optional[str]) -> Optional[bytes]:
    return None if text is None else np.array(json.loads(text), dtype="<f4").tobytes()


def _json(text: Optional[str]) -> Any:
    return None if text is None else json.loads(text)


def _xyz(x, y, z, transform: RigidTransform, digits: int):
    if x is None:
        return (None, None, None)
    fx, fy = transform.apply(float(x), float(y))
    return (round(fx, digits), round(fy, digits), round(0.0 if z is None else float(z), digits))


def robot_rows(db_path, transform: RigidTransform = IDENTITY, digits: int = 9,
               with_archived_text: Optional[dict[int, str]] = None) -> dict[str, list[tuple]]:
    """The robot's rows, positions put in the fleet frame (rounded to ``digits`` when not identity)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    exact = transform.is_identity
    place = (lambda x, y, z: (x, y, None if x is None else (0.0 if z is None else z))) if exact else \
        (lambda x, y, z: _xyz(x, y, z, transform, digits))
    out: dict[str, list[tuple]] = {}
    obs = []
    for r in conn.execute(
            "SELECT o.id, t.text, o.stamp, o.layer, o.source_type, o.x, o.y, o.z, o.frame_id, o.confidence, "
            "o.episode_id, o.gist_id, o.tier, o.tier_since, o.value, o.metadata, o.text_id "
            "FROM observations o LEFT JOIN texts t ON t.id = o.text_id"):
        text = r[1] if r[1] is not None or with_archived_text is None else with_archived_text.get(r[0])
        obs.append((r[0], text, r[2], r[3], r[4], *place(r[5], r[6], r[7]), r[8], r[9], r[10], r[11], r[12], r[13],
                    r[14], r[15] if r[12] != "archived" or with_archived_text is None else "<archived>"))
    out["observations"] = obs
    out["texts"] = [(r[0], r[1], _vec_sqlite(r[2])) for r in conn.execute("SELECT id, text, embedding FROM texts")]
    out["episodes"] = [tuple(r[:-1]) + (_vec_sqlite(r[-1]),) for r in conn.execute(
        'SELECT id, name, start, "end", status, parent_id, previous_id, summary, goal, action, result, reflection, '
        "success, consolidated, metadata, embedding FROM episodes")]
    out["gists"] = [(r[0], r[1], *place(r[2], r[3], r[4]), r[5], r[6], r[7], r[8], _json(r[9]), r[10], r[11], r[12],
                     _vec_sqlite(r[13])) for r in conn.execute(
        "SELECT id, text, cx, cy, cz, radius, time_start, time_end, source_count, layers, episode_id, created_at, "
        "metadata, embedding FROM gists")]
    out["entities"] = [(r[0], r[1], r[2], *place(r[3], r[4], r[5]), *r[6:13], _vec_sqlite(r[13])) for r in conn.execute(
        "SELECT id, name, entity_type, x, y, z, spread, first_seen, last_seen, sightings, confidence, layer, metadata, "
        "embedding FROM entities")]
    out["edges"] = [tuple(r) for r in conn.execute("SELECT kind, src, dst, weight, updated FROM edges")]
    out["experiences"] = [(r[0], r[1], r[2], r[3], r[4], r[5], r[6], _json(r[7]), r[8], r[9], r[10],
                           *place(r[11], r[12], r[13]), r[14], _vec_sqlite(r[15])) for r in conn.execute(
        "SELECT n, id, goal, action, result, reflection, success, tags, metadata, stamp, episode_id, x, y, z, "
        "supersedes, embedding FROM experiences")]
    conn.close()
    return out


def fleet_rows(conn, robot_id: str, digits: int = 9, exact: bool = True,
               archived_marker: bool = False) -> dict[str, list[tuple]]:
    """The fleet store's rows of one robot in the shape of ``robot_rows``."""
    def point(x, y, z):
        if x is None:
            return (None, None, None)
        return (x, y, z) if exact else (round(x, digits), round(y, digits), round(z, digits))

    out: dict[str, list[tuple]] = {}
    out["observations"] = [
        (r[0], r[1], r[2], r[3], r[4], *point(r[5], r[6], r[7]), *r[8:15],
         "<archived>" if archived_marker and r[12] == "archived" else r[15])
        for r in conn.execute(
            "SELECT o.id, t.text, o.stamp, o.layer, o.source_type, ST_X(o.position), ST_Y(o.position), "
            "ST_Z(o.position), o.frame_id, o.confidence, o.episode_id, o.gist_id, o.tier, o.tier_since, o.value, "
            "o.metadata FROM fleet.observations o LEFT JOIN fleet.texts t ON t.id = o.text_id "
            "WHERE o.robot_id = %s", (robot_id,))]
    out["texts"] = [(r[0], r[1], _vec_pg(r[2])) for r in conn.execute(
        "SELECT m.local_id, t.text, t.embedding::text FROM fleet.robot_texts m JOIN fleet.texts t ON t.id = m.text_id "
        "WHERE m.robot_id = %s", (robot_id,))]
    out["episodes"] = [tuple(r[:-1]) + (_vec_pg(r[-1]),) for r in conn.execute(
        'SELECT id, name, start, "end", status, parent_id, previous_id, summary, goal, action, result, reflection, '
        "success, consolidated, metadata, embedding::text FROM fleet.episodes WHERE robot_id = %s", (robot_id,))]
    out["gists"] = [(r[0], r[1], *point(r[2], r[3], r[4]), *r[5:9], r[9], r[10], r[11], r[12], _vec_pg(r[13]))
                    for r in conn.execute(
        "SELECT id, text, ST_X(center), ST_Y(center), ST_Z(center), radius, time_start, time_end, source_count, "
        "layers, episode_id, created_at, metadata, embedding::text FROM fleet.gists WHERE robot_id = %s",
        (robot_id,))]
    out["entities"] = [(r[0], r[1], r[2], *point(r[3], r[4], r[5]), *r[6:13], _vec_pg(r[13])) for r in conn.execute(
        "SELECT id, name, entity_type, ST_X(position), ST_Y(position), ST_Z(position), spread, first_seen, last_seen, "
        "sightings, confidence, layer, metadata, embedding::text FROM fleet.entities WHERE robot_id = %s",
        (robot_id,))]
    out["edges"] = [tuple(r) for r in conn.execute(
        "SELECT kind, src, dst, weight, updated FROM fleet.edges WHERE robot_id = %s", (robot_id,))]
    out["experiences"] = [(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
                           *point(r[11], r[12], r[13]), r[14], _vec_pg(r[15])) for r in conn.execute(
        "SELECT n, id, goal, action, result, reflection, success, tags, metadata, stamp, episode_id, ST_X(position), "
        "ST_Y(position), ST_Z(position), supersedes, embedding::text FROM fleet.experiences WHERE robot_id = %s",
        (robot_id,))]
    conn.rollback()
    return out


def _key(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value


def digest(rows: list[tuple]) -> str:
    canonical = sorted(repr(tuple(_key(v) for v in row)) for row in rows)
    return hashlib.sha256("\n".join(canonical).encode()).hexdigest()


def summary(tables: dict[str, list[tuple]]) -> dict[str, tuple[int, str]]:
    """table -> (row count, content hash)."""
    return {name: (len(rows), digest(rows)) for name, rows in tables.items()}


def first_difference(robot: dict[str, list[tuple]], fleet: dict[str, list[tuple]]) -> str:
    """A readable pointer to the first row that differs (for assertion messages)."""
    for name in TABLES:
        a = {repr(tuple(_key(v) for v in r)) for r in robot.get(name, [])}
        b = {repr(tuple(_key(v) for v in r)) for r in fleet.get(name, [])}
        if a != b:
            only_robot = sorted(a - b)[:2]
            only_fleet = sorted(b - a)[:2]
            return f"{name}: robot only {only_robot}; fleet only {only_fleet}"
    return "no difference"


def robot_workload(memory, clock, n: int = 600, start: Optional[float] = None, seed: int = 11) -> None:
    """Everything a robot writes: perception and body readings, an episode with an experience and a note,
    entities and gists from consolidation."""
    from test.support.patrol import age_past_window, memory_adder, multi_room_patrol

    begin = clock.now - 7200 if start is None else start
    episode = memory.start_episode("patrol", goal="check every room")
    multi_room_patrol(memory_adder(memory), n, start=begin, seed=seed)
    memory.add("the charger is behind the sofa", x=6.0, y=4.0, layer_name="notes", source_type="manual",
               metadata={"by": "operator"})
    memory.record_experience(goal="open the office door", action="push", result="locked", success=False,
                             tags=["door"])
    memory.flush()
    memory.end_episode(result="all rooms seen", success=True)
    memory.wait_for_consolidation(30)
    memory.extract_entities(final=True)
    age_past_window(memory, clock)
    memory.consolidate_time_window()
    del episode


def expected_summaries(tables: dict[str, list[tuple]], cell: float = 0.5) -> dict[str, dict]:
    """What ``fleet.sightings`` and ``fleet.places`` must hold for a robot, computed here in Python from its
    observation rows (``robot_rows``/``fleet_rows`` shape): perception with a text, every tier."""
    sightings: dict[tuple, list] = {}
    places: dict[tuple, list] = {}
    for row in tables["observations"]:
        obs_id, text, stamp, layer, source = row[:5]
        x, y, z = row[5:8]
        if text is None or source == "interoception":
            continue
        s = sightings.setdefault((text, layer), [0, math.inf, -math.inf, None])
        s[0] += 1
        s[1] = min(s[1], stamp)
        if (stamp, obs_id) >= (s[2], s[3] or -1):
            s[2], s[3] = stamp, obs_id
        if x is not None:
            key = (text, layer, math.floor(x / cell), math.floor(y / cell))
            p = places.setdefault(key, [0, 0.0, 0.0, 0.0, math.inf, -math.inf])
            p[0] += 1
            p[1], p[2], p[3] = p[1] + x, p[2] + y, p[3] + (z or 0.0)
            p[4], p[5] = min(p[4], stamp), max(p[5], stamp)
    return {"sightings": {k: tuple(v) for k, v in sightings.items()},
            "places": {k: tuple(v) for k, v in places.items()}}


def fleet_summaries(conn, robot_id: str) -> dict[str, dict]:
    """The summary rows the fleet store keeps for a robot, in the shape of ``expected_summaries``."""
    sightings = {(r[0], r[1]): tuple(r[2:]) for r in conn.execute(
        "SELECT t.text, s.layer, s.count, s.first_stamp, s.last_stamp, s.last_obs_id FROM fleet.sightings s "
        "JOIN fleet.texts t ON t.id = s.text_id WHERE s.robot_id = %s", (robot_id,))}
    places = {(r[0], r[1], r[2], r[3]): tuple(r[4:])
              for r in conn.execute(
        "SELECT t.text, p.layer, p.cx, p.cy, p.count, p.sx, p.sy, p.sz, p.first_stamp, p.last_stamp "
        "FROM fleet.places p JOIN fleet.texts t ON t.id = p.text_id WHERE p.robot_id = %s", (robot_id,))}
    conn.rollback()
    return {"sightings": sightings, "places": places}


def same_summary(a: Optional[tuple], b: Optional[tuple]) -> bool:
    """Summary rows equal: counts and stamps exactly, coordinate sums to a micrometre (summed in two orders)."""
    if a is None or b is None or len(a) != len(b):
        return a is b
    return all(math.isclose(x, y, rel_tol=0, abs_tol=1e-6) if isinstance(x, float) and isinstance(y, float)
               else x == y for x, y in zip(a, b))
