"""A multi-room patrol with known ground truth, shared by the consolidation tests and bench.

Six 5 m x 5 m rooms in a 3 x 2 grid, doors in the shared walls. The robot
goes round the rooms in a cycle; in each room it visits a few waypoints
(pausing to look around), then leaves through the door to the next room.
Every 0.5 s it reports 2-D detections of the room's objects (the robot's own
position, ``position_source: odometry``), every 2 s one 3-D detection (the
object's position), every 5 s a scene description and every 10 s a battery
reading. Every ``dock_every`` visits it docks for 15 minutes (a time gap).

Ground truth: ``PatrolInfo.visits`` (one per room entry) and the objects.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

ROOM = 5.0
MARGIN = 0.9
SPEED = 0.4
TICK = 0.5

# name, grid cell, scene descriptions, objects (label, x, y inside the room)
ROOMS: list[tuple[str, tuple[int, int], tuple[str, ...], tuple[tuple[str, float, float], ...]]] = [
    ("kitchen", (0, 0), ("a kitchen with a red mug on the table", "a kitchen counter next to a refrigerator"),
     (("refrigerator", 0.5, 4.5), ("red mug", 2.5, 2.0), ("sink", 4.5, 4.5), ("chair", 2.0, 1.0))),
    ("living room", (1, 0), ("a living room with a sofa facing the tv", "a bright living room with a plant"),
     (("sofa", 2.5, 4.5), ("tv", 2.5, 0.5), ("potted plant", 4.5, 0.5))),
    ("office", (2, 0), ("an office with a laptop on the desk", "a quiet office with a monitor"),
     (("laptop", 2.5, 2.5), ("monitor", 2.5, 3.0), ("chair", 2.0, 2.0), ("desk", 2.5, 2.7))),
    ("bedroom", (2, 1), ("a bedroom with an unmade bed", "a dim bedroom with a lamp"),
     (("bed", 2.5, 3.5), ("lamp", 4.5, 4.5), ("wardrobe", 0.5, 4.5))),
    ("hallway", (1, 1), ("a hallway with a closed door", "a hallway with a coat rack"),
     (("door", 2.5, 4.9), ("coat rack", 0.5, 2.5), ("shoe rack", 4.5, 2.5))),
    ("bathroom", (0, 1), ("a bathroom with a white sink", "a small bathroom with a towel"),
     (("toilet", 1.0, 4.5), ("sink", 4.5, 4.5), ("towel", 0.5, 2.5))),
]

AddFn = Callable[..., Any]


@dataclass
class PatrolInfo:
    observations: int = 0
    visits: int = 0
    visit_rooms: list[str] = field(default_factory=list)
    visit_spans: list[tuple[float, float]] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    layers: dict[str, int] = field(default_factory=dict)


def _room_origin(cell: tuple[int, int]) -> tuple[float, float]:
    return cell[0] * ROOM, cell[1] * ROOM


def _door(a: tuple[int, int], b: tuple[int, int]) -> tuple[float, float]:
    """The midpoint of the wall two adjacent rooms share."""
    ax, ay = _room_origin(a)
    bx, by = _room_origin(b)
    return (ax + bx) / 2 + ROOM / 2, (ay + by) / 2 + ROOM / 2


def multi_room_patrol(add: AddFn, n: int, *, start: float = 1_763_000_000.0, seed: int = 11,
                      dock_every: int = 12, with_3d: bool = True, add_body: Optional[AddFn] = None) -> PatrolInfo:
    """Feed about ``n`` observations (whole visits only) to ``add``; return the ground truth.

    ``add(text, x, y, z, stamp, layer, source_type, confidence, metadata, value)``;
    ``add_body`` (same signature) receives battery readings if given, else ``add``.
    """
    rng = random.Random(seed)
    body = add_body or add
    info = PatrolInfo(start=start)
    t = start
    x, y = _room_origin(ROOMS[0][1])[0] + ROOM / 2, _room_origin(ROOMS[0][1])[1] + ROOM / 2
    battery = 1.0
    tick = 0
    room_index = 0

    def emit(text: str, px: float, py: float, pz: float, layer: str, source: str, conf: float,
             meta: Optional[dict], value: Optional[float] = None, sink: AddFn = add) -> None:
        sink(text, px, py, pz, t, layer, source, conf, meta, value)
        info.observations += 1
        info.layers[layer] = info.layers.get(layer, 0) + 1

    def sample(room: int) -> None:
        nonlocal tick, battery
        name, cell, scenes, objects = ROOMS[room]
        ox, oy = _room_origin(cell)
        for label, _lx, _ly in objects:
            if rng.random() < 0.45:
                emit(label, x, y, 0.0, "detections", "perception", round(0.5 + rng.random() / 2, 3),
                     {"class_id": label, "score": 0.9, "position_source": "odometry"})
        if with_3d and tick % 4 == 0:
            label, lx, ly = objects[tick // 4 % len(objects)]
            emit(label, ox + lx + rng.gauss(0, 0.05), oy + ly + rng.gauss(0, 0.05), 0.8, "objects3d",
                 "perception", 0.9, {"class_id": label, "frame": "map"})
        if tick % 10 == 0:
            emit(scenes[rng.randrange(len(scenes))], x, y, 0.0, "scene", "perception", 1.0, None)
        if tick % 20 == 0:
            battery = max(0.05, battery - 0.002)
            emit(f"battery {round(battery * 100)}%", x, y, 0.0, "battery", "interoception", 1.0, None,
                 value=round(battery, 3), sink=body)
        tick += 1

    def walk_to(room: int, tx: float, ty: float) -> None:
        nonlocal x, y, t
        while True:
            dx, dy = tx - x, ty - y
            d = math.hypot(dx, dy)
            step = SPEED * TICK
            if d <= step:
                x, y = tx, ty
                return
            x, y = x + dx / d * step, y + dy / d * step
            t += TICK
            sample(room)

    def pause(room: int, seconds: float) -> None:
        nonlocal t
        for _ in range(int(seconds / TICK)):
            t += TICK
            sample(room)

    while info.observations < n:
        name, cell, _, _ = ROOMS[room_index]
        ox, oy = _room_origin(cell)
        info.visits += 1
        info.visit_rooms.append(name)
        began = t
        for _ in range(rng.randint(3, 5)):
            walk_to(room_index, ox + rng.uniform(MARGIN, ROOM - MARGIN), oy + rng.uniform(MARGIN, ROOM - MARGIN))
            pause(room_index, rng.uniform(5, 15))
        nxt = (room_index + 1) % len(ROOMS)
        dx, dy = _door(cell, ROOMS[nxt][1])
        walk_to(room_index, dx, dy)
        info.visit_spans.append((began, t))
        if info.observations >= n:
            break
        if info.visits % dock_every == 0:
            t += 900.0  # docked: nothing arrives for 15 minutes
        room_index = nxt
        nx, ny = _room_origin(ROOMS[room_index][1])
        # step through the door into the next room
        walk_to(room_index, min(max(x, nx + MARGIN), nx + ROOM - MARGIN), min(max(y, ny + MARGIN), ny + ROOM - MARGIN))
    info.end = t
    return info


def memory_adder(memory) -> AddFn:
    """An ``add`` for emem_ros ``Memory`` (body readings through ``add_body_state``)."""

    def add(text, x, y, z, stamp, layer, source, conf, meta, value=None):
        if source == "interoception":
            return memory.add_body_state(text, layer, x=x, y=y, z=z, timestamp=stamp, value=value)
        return memory.add(text, x=x, y=y, z=z, timestamp=stamp, layer_name=layer, source_type=source,
                          confidence=conf, metadata=meta)

    return add


# ---------------------------------------------------------------------- memories for the tests
def open_memory(path, clock, llm=None, provider=None, **overrides):
    """A Memory on ``path`` with the test defaults (no timers, deterministic embedder)."""
    from emem_ros import Memory, MemoryConfig
    from emem_ros.embeddings import HashingEmbeddingProvider

    settings = {"flush_interval": 0.0, "index_save_interval": 0.0, "working_memory_size": 20_000,
                "flush_batch_size": 2048}
    settings.update(overrides)
    return Memory(config=MemoryConfig(db_path=str(path), **settings),
                  embedding_provider=provider or HashingEmbeddingProvider(), llm_client=llm,
                  get_current_time=clock)


def patrol_into(memory, clock, n: int, **kwargs) -> PatrolInfo:
    """Feed a patrol starting at the clock's time, flush, and move the clock past it."""
    info = multi_room_patrol(memory_adder(memory), n, start=clock.now, **kwargs)
    memory.flush()
    clock.now = info.end
    return info


def age_past_window(memory, clock) -> None:
    """Move the clock so that everything stored is older than the consolidation window."""
    row = memory.store.reader().execute("SELECT MAX(stamp) FROM observations").fetchone()
    clock.now = max(clock.now, row[0]) + memory.config.consolidation_window + memory.config.consolidation_time_gap + 1


def gist_rows(memory):
    return memory.store.reader().execute(
        "SELECT id, text, source_count, time_start, time_end, layers, episode_id, radius FROM gists ORDER BY id"
    ).fetchall()
