#!/usr/bin/env python3
"""Write days of robot time as bags: patrols by day, docked and charging by night (for bench/soak.py).

The world, the robot's lap, the camera model and the message builders are
``generate.py``'s (imported, not copied). What a week adds:

- a day is a patrol of ``--hours`` (laps of the flat from 08:00), then the
  robot docks at the hallway's charging dock until 08:00 next morning;
- the battery cycles: full at 08:00, draining to about 30 % by the end of the
  patrol (discharging), charging on the dock (charging, then full);
- the night is quiet: odometry every 4 s, battery / CPU temperature /
  diagnostics every 20 s (stamped on an odometry stamp, so they get a pose),
  a caption every minute, no detector (the camera is off on the dock);
- objects move between days: the red mug is on the kitchen table Monday to
  Wednesday and on the office desk from Thursday; the laptop is taken to the
  living room for the weekend;
- people pass: a few times an hour a person stands somewhere in a room for
  20-90 s and the detectors see them like any object ("person").

Each robot-day is two bags (``NN-<weekday>-patrol`` and ``NN-<weekday>-night``)
so a soak can play each at its own rate and restart the node between days.
``week.json`` lists the segments in order with their bag time and the
ground truth (where each object was on which day).

    python rosbags/generate_week.py --out /tmp/week --days 7 --hours 1 --seed 7

Topics and types are those of the bundled bags (config/memory.yaml's layers).
Bag time starts on Monday 2025-03-17 08:00 UTC.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import generate as g  # noqa: E402  (the sibling: world, camera, messages, writer)
from rosbags.rosbag2.enums import StoragePlugin  # noqa: E402

from emem_ros.replay.typestore import load_typestore  # noqa: E402

WEEK_START = 1_742_169_600.0
"""Monday 2025-03-17 00:00:00 UTC."""
WEEK_NS = 1_742_169_600 * 1_000_000_000
DAY = 86_400.0
PATROL_HOUR = 8.0
"""The patrol starts at 08:00 every day."""
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
DOCK = (g.LAP[0][0], g.LAP[0][1])
"""The charging dock: where every lap starts and ends (hallway)."""
LAP_SECONDS = 264.0
"""About one lap of generate.LAP (turns and look-arounds included)."""
NIGHT_ODOM = 4.0
"""Seconds between odometry messages on the dock (below odom_max_gap: poses still interpolate)."""
NIGHT_BODY = 20.0
NIGHT_CAPTION = 60.0
BATTERY_FULL = 0.98
BATTERY_LOW = 0.30
CHARGE_RATE = 0.35 / 3600.0
"""Charge fraction per second on the dock (empty to full in about two hours)."""
PEOPLE_PER_HOUR = 4.0

MUG_KITCHEN = g.Thing("red mug", 1.0, 4.6, 0.9, (0.09, 0.09, 0.1), also="cup")
"""generate.py's red mug: on the kitchen table."""
MUG_OFFICE = g.Thing("red mug", 11.9, 14.9, 0.78, (0.09, 0.09, 0.1), also="cup")
"""On the office desk, beside the laptop."""
LAPTOP_LIVING = g.Thing("laptop", 12.2, 5.8, 0.5, (0.35, 0.25, 0.03))
"""On the sofa's end, for the weekend."""
PERSON_SIZE = (0.5, 0.4, 1.7)


MUG_MOVES = 3
"""The red mug is in the office from this day on (3 = Thursday)."""


def things_on(day: int, mug_moves: int = MUG_MOVES) -> tuple[g.Thing, ...]:
    """The world on day ``day`` (0 = Monday): generate.THINGS with the moved objects where they are then."""
    out = []
    for thing in g.THINGS:
        if thing.name == "red mug":
            thing = MUG_KITCHEN if day < mug_moves else MUG_OFFICE
        elif thing.name == "laptop" and day % 7 >= 5:
            thing = LAPTOP_LIVING
        out.append(thing)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Person:
    start: float
    end: float
    thing: g.Thing


def people(rng: random.Random, seconds: float) -> list[Person]:
    """People standing somewhere in a room for a while during a patrol (times from the patrol's start)."""
    out = []
    for _ in range(max(1, round(PEOPLE_PER_HOUR * seconds / 3600.0))):
        room = rng.choice(g.ROOMS)
        x = rng.uniform(room.lo[0] + 0.8, room.hi[0] - 0.8)
        y = rng.uniform(room.lo[1] + 0.8, room.hi[1] - 0.8)
        start = rng.uniform(0.0, max(1.0, seconds - 90.0))
        out.append(Person(start, start + rng.uniform(20.0, 90.0), g.Thing("person", x, y, 0.9, PERSON_SIZE)))
    return out


class WeekMessages(g.Messages):
    """generate.Messages with times counted from the week's start, and a battery that charges."""

    def time(self, t: float) -> Any:
        stamp = WEEK_NS + int(round(t * 1e9))
        return self.T["builtin_interfaces/msg/Time"](sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000)

    def battery_state(self, t: float, fraction: float, status: int) -> Any:
        msg = self.battery(t, fraction)
        msg.power_supply_status = status
        msg.current = 2.5 if status == 1 else 0.0 if status == 4 else -1.8
        return msg


def ns(t: float, latency: float = 0.0) -> int:
    return WEEK_NS + int(round((t + latency) * 1e9))


def caption(p: g.Pose, things: tuple[g.Thing, ...]) -> str:
    room = g.room_of(p.x, p.y)
    visible = [t.name for t in things if g.in_view(p, t, g.RANGE_2D) is not None]
    if not visible:
        return f"{g.ROOM_WORDS[room]}, nothing of note in view"
    names = [f"a {n}" for n in visible]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"{g.ROOM_WORDS[room]} with {listed}"


def _topics(store: Any) -> dict[str, g.Topic]:
    kinds = [("/odom", "nav_msgs/msg/Odometry"), ("/camera/camera_info", "sensor_msgs/msg/CameraInfo"),
             ("/detections", "vision_msgs/msg/Detection2DArray"), ("/detections_3d", "vision_msgs/msg/Detection3DArray"),
             ("/scene", "std_msgs/msg/String"), ("/battery", "sensor_msgs/msg/BatteryState"),
             ("/cpu_temp", "sensor_msgs/msg/Temperature"), ("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray"),
             ("/cmd_vel", "geometry_msgs/msg/Twist")]
    return {name: g.Topic(name, kind) for name, kind in kinds}


def _body(m: WeekMessages, store: Any, topics: dict[str, g.Topic], t: float, fraction: float, status: int,
          celsius: float) -> None:
    topics["/battery"].messages.append((ns(t, 0.01), m.battery_state(t, fraction, status)))
    topics["/cpu_temp"].messages.append((ns(t, 0.01), store.types["sensor_msgs/msg/Temperature"](
        header=m.header(t, "cpu"), temperature=round(celsius, 2), variance=0.0)))
    topics["/diagnostics"].messages.append((ns(t, 0.02), m.diagnostics(t, [
        (0, "motor_left", "ok", "mc-1", {"temperature": "44.0"}), (0, "lidar", "ok", "lidar-0", {"frequency": "10.0"})])))


def patrol(day: int, start: float, hours: float, seed: int, mug_moves: int = MUG_MOVES
           ) -> tuple[list[g.Topic], dict[str, Any]]:
    """The day's patrol from ``start`` (seconds after WEEK_START): laps of the flat, as generate.record."""
    rng = random.Random(seed * 1000 + day)
    store = load_typestore("humble", own_msgs=False)
    m = WeekMessages(store)
    laps = max(1, round(hours * 3600.0 / LAP_SECONDS))
    poses = g.drive(laps)
    things = things_on(day, mug_moves)
    crowd = people(rng, poses[-1].t)
    topics = _topics(store)
    tracks = {thing: f"trk-{i + 1}" for i, thing in enumerate(things)}
    drain = (BATTERY_FULL - BATTERY_LOW) / max(poses[-1].t, 1.0)
    seen: dict[str, int] = {}
    for i, p in enumerate(poses):
        t = start + p.t
        here = things + tuple(person.thing for person in crowd if person.start <= p.t < person.end)
        topics["/odom"].messages.append((ns(t, 0.002), m.odometry(dataclasses.replace(p, t=t))))
        if i % 10 == 0:
            topics["/camera/camera_info"].messages.append((ns(t + g.CAMERA_PHASE, 0.005),
                                                          m.camera_info(t + g.CAMERA_PHASE)))
        if i % g.CAMERA_PERIOD == 0 and i + 1 < len(poses):
            at = g.pose_at(poses, p.t + g.CAMERA_PHASE)
            tc = t + g.CAMERA_PHASE
            topics["/cmd_vel"].messages.append((ns(t, 0.001), store.types["geometry_msgs/msg/Twist"](
                linear=m.vec3(p.v), angular=m.vec3(z=p.w))))
            detections = []
            for thing in here:
                box = g.project(at, thing)
                if box is None or rng.random() < g.MISSED:
                    continue
                score = min(0.99, max(0.35, 0.97 - 0.06 * box[4] + rng.gauss(0.0, 0.03)))
                hypotheses = [m.hypothesis(thing.name, score)]
                if thing.also and rng.random() < 0.5:
                    hypotheses.append(m.hypothesis(thing.also, score * 0.4))
                reported = g.detected_box(box, rng)
                if reported is None:
                    continue
                u, v, w, h = reported
                detections.append(m.detection2d(tc, hypotheses, round(u, 1), round(v, 1), round(w, 1), round(h, 1),
                                                tracks.get(thing, "trk-person")))
                seen[thing.name] = seen.get(thing.name, 0) + 1
            topics["/detections"].messages.append((ns(tc, 0.06), store.types["vision_msgs/msg/Detection2DArray"](
                header=m.header(tc, "camera"), detections=detections)))
        if i % 10 == 0:
            detections = []
            for thing in here:
                view = g.in_view(p, thing, g.RANGE_3D)
                if view is None:
                    continue
                found = (round(thing.x + rng.gauss(0.0, 0.04), 3), round(thing.y + rng.gauss(0.0, 0.04), 3), thing.z)
                score = min(0.99, 0.93 - 0.04 * view[0])
                detections.append(m.detection3d(t, [m.hypothesis(thing.name, score, found)], found, thing.size,
                                                tracks.get(thing, "trk-person")))
            if detections:
                topics["/detections_3d"].messages.append((ns(t, 0.12), store.types[
                    "vision_msgs/msg/Detection3DArray"](header=m.header(t, g.FRAME), detections=detections)))
            celsius = 41.0 + 7.0 * (1 - math.exp(-p.t / 240.0)) + 1.5 * math.sin(p.t / 40.0)
            _body(m, store, topics, t, round(BATTERY_FULL - drain * p.t, 4), 2, celsius)
        if i % 50 == 0:
            topics["/scene"].messages.append((ns(t, 0.3), store.types["std_msgs/msg/String"](data=caption(p, here))))
    truth = {"kind": "patrol", "day": day, "weekday": WEEKDAYS[day % 7], "start": WEEK_START + start,
             "end": WEEK_START + start + poses[-1].t, "laps": laps, "detections_2d": seen,
             "people": [{"room": g.room_of(c.thing.x, c.thing.y), "at": [c.thing.x, c.thing.y],
                         "start": WEEK_START + start + c.start, "end": WEEK_START + start + c.end} for c in crowd]}
    return list(topics.values()), truth


def night(day: int, start: float, end: float, battery: float) -> tuple[list[g.Topic], dict[str, Any]]:
    """Docked from ``start`` to ``end`` (seconds after WEEK_START): few messages, the battery charging."""
    store = load_typestore("humble", own_msgs=False)
    m = WeekMessages(store)
    topics = _topics(store)
    docked = g.Pose(0.0, DOCK[0], DOCK[1], -math.pi / 2, 0.0, 0.0)  # facing the kitchen door side of the hallway
    t = start
    k = 0
    charge = battery
    body_every = round(NIGHT_BODY / NIGHT_ODOM)
    caption_every = round(NIGHT_CAPTION / NIGHT_ODOM)
    while t < end:
        topics["/odom"].messages.append((ns(t, 0.002), m.odometry(dataclasses.replace(docked, t=t))))
        if k % body_every == 0:
            charge = min(1.0, battery + CHARGE_RATE * (t - start))
            _body(m, store, topics, t, round(charge, 4), 4 if charge >= 1.0 else 1, 38.0)
        if k % caption_every == 0:
            topics["/scene"].messages.append((ns(t, 0.3), store.types["std_msgs/msg/String"](
                data="a hallway, docked at the charging station")))
        k += 1
        t = start + k * NIGHT_ODOM
    keep = [topic for topic in topics.values() if topic.messages]
    truth = {"kind": "night", "day": day, "weekday": WEEKDAYS[day % 7], "start": WEEK_START + start,
             "end": WEEK_START + end, "battery_start": battery, "battery_end": round(charge, 4)}
    return keep, truth


def week(out: Path, days: int = 7, hours: float = 1.0, seed: int = 7,
         storage: StoragePlugin = StoragePlugin.SQLITE3, night_hours: Optional[float] = None,
         mug_moves: int = MUG_MOVES) -> dict[str, Any]:
    """Write every segment of ``days`` robot-days into ``out`` and return (and write) ``week.json``.

    ``night_hours``: the dock segment is cut short after this many hours (the robot is switched off
    until the next morning: a gap in bag time), for short soaks; None = docked until 08:00.
    ``mug_moves``: the day from which the red mug is in the office.
    """
    out.mkdir(parents=True, exist_ok=True)
    segments = []
    for day in range(days):
        morning = day * DAY + PATROL_HOUR * 3600.0
        for kind in ("patrol", "night"):
            if kind == "patrol":
                topics, truth = patrol(day, morning, hours, seed, mug_moves)
                patrol_end = truth["end"] - WEEK_START
            else:
                until = morning + DAY if night_hours is None else min(morning + DAY, patrol_end + night_hours * 3600.0)
                topics, truth = night(day, patrol_end + 1.0, until, BATTERY_LOW)
            name = f"{day:02d}-{WEEKDAYS[day % 7]}-{kind}"
            target = out / name
            if target.exists():
                shutil.rmtree(target)
            g.write_bag(target, topics, storage)
            truth.update({"name": name, "bag": str(target), "messages": sum(len(t.messages) for t in topics)})
            segments.append(truth)
    summary: dict[str, Any] = {
        "description": "A week of robot time (rosbags/generate_week.py); times are bag time, epoch seconds.",
        "seed": seed, "days": days, "hours": hours, "night_hours": night_hours, "mug_moves": mug_moves,
        "week_start": WEEK_START, "segments": segments,
        "moved": [
            {"name": "red mug", "room": "kitchen", "position": [MUG_KITCHEN.x, MUG_KITCHEN.y, MUG_KITCHEN.z],
             "days": [d for d in range(days) if d < mug_moves]},
            {"name": "red mug", "room": "office", "position": [MUG_OFFICE.x, MUG_OFFICE.y, MUG_OFFICE.z],
             "days": [d for d in range(days) if d >= mug_moves]},
            {"name": "laptop", "room": "living room", "position": [LAPTOP_LIVING.x, LAPTOP_LIVING.y, LAPTOP_LIVING.z],
             "days": [d for d in range(days) if d % 7 >= 5]},
        ],
        "rooms": {r.name: {"min": list(r.lo), "max": list(r.hi)} for r in g.ROOMS},
    }
    (out / "week.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the bags and week.json")
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--hours", type=float, default=1.0, help="hours of patrol per day")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--night-hours", type=float, default=None,
                        help="cut each night short after this many hours (default: docked until 08:00)")
    parser.add_argument("--mug-moves", type=int, default=MUG_MOVES, help="day the red mug moves to the office")
    parser.add_argument("--mcap", action="store_true", help="mcap storage instead of sqlite3")
    args = parser.parse_args(argv)
    summary = week(args.out, args.days, args.hours, args.seed,
                   StoragePlugin.MCAP if args.mcap else StoragePlugin.SQLITE3, args.night_hours, args.mug_moves)
    for segment in summary["segments"]:
        print(f"{segment['name']}: {(segment['end'] - segment['start']) / 3600:.2f} h, {segment['messages']} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
