"""Synthetic robot streams shared by bench_ingest.py and bench_tools.py.

A robot patrols a floor of rooms. Every 0.5 s it reports the detection
classes it sees (at its own odometry position), every 2 s one 3-D detection
(at the object's position), every 5 s a scene description of the room, and
every 10 s battery and CPU-temperature readings (interoception, with a
numeric value). Like a real robot it repeats itself: the *realistic* stream
holds a few hundred distinct strings in total. The *unique* stream walks the
same path at the same rates, but every text is different (a captioner that
never says the same thing twice, readings with full precision).

Streams are column arrays (numpy), so that a million rows cost ~50 MB and
the engines' own memory dominates the measured peak. ``Stream.text(i)``
builds row i's text; ``Stream.rows(start, stop)`` yields the fields in the
order of ``Memory.add``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np

ROOM = 6.0
GRID = (5, 4)  # 20 rooms
TICK = 0.5
SPEED = 0.5

ROOM_TYPES = ["kitchen", "office", "laboratory", "storage room", "meeting room", "bathroom", "lounge",
              "workshop", "bedroom", "hallway"]
CLASSES = [
    "person", "chair", "table", "desk", "sofa", "tv", "laptop", "monitor", "keyboard", "mouse", "cup", "red mug",
    "bottle", "bowl", "plate", "refrigerator", "microwave", "oven", "sink", "toaster", "potted plant", "vase",
    "clock", "book", "bookshelf", "lamp", "bed", "pillow", "wardrobe", "door", "window", "coat rack",
    "shoe rack", "toilet", "towel", "mirror", "cabinet", "drawer", "box", "cardboard box", "trash can",
    "fire extinguisher", "whiteboard", "projector", "printer", "phone", "backpack", "umbrella", "handbag",
    "suitcase", "scissors", "toolbox", "drill", "ladder", "bicycle", "cat", "dog", "remote", "fan", "heater",
]
COLOURS = ["red", "blue", "green", "white", "black", "grey", "yellow", "wooden", "metal", "small", "large"]
PLACES = ["on the table", "next to the door", "in the corner", "against the wall", "near the window",
          "on the floor", "on the shelf", "by the sink", "under the desk", "behind the sofa"]
ACTIONS = ["walking toward", "standing near", "sitting at", "carrying a box past", "looking at", "leaving"]

LAYERS = ["detections", "objects3d", "scene", "battery", "cpu_temp"]
SOURCES = ["perception", "perception", "perception", "interoception", "interoception"]
"""Source type by layer index."""


@dataclass
class Room:
    index: int
    name: str
    origin: tuple[float, float]
    objects: list[tuple[str, float, float]]
    scenes: list[str]


def build_floor(seed: int = 3) -> list[Room]:
    rng = random.Random(seed)
    rooms = []
    for i in range(GRID[0] * GRID[1]):
        gx, gy = i % GRID[0], i // GRID[0]
        kind = ROOM_TYPES[i % len(ROOM_TYPES)]
        name = f"{kind} {i // len(ROOM_TYPES) + 1}"
        objects = [(label, rng.uniform(0.5, ROOM - 0.5), rng.uniform(0.5, ROOM - 0.5))
                   for label in rng.sample(CLASSES, rng.randint(6, 10))]
        scenes = []
        for _ in range(8):
            a, b = rng.sample(objects, 2)
            scenes.append(f"a {rng.choice(COLOURS)} {name} with a {a[0]} {rng.choice(PLACES)} and a {b[0]}")
        rooms.append(Room(i, name, (gx * ROOM, gy * ROOM), objects, scenes))
    return rooms


@dataclass
class Stream:
    """n observations as columns; texts are built on demand from ``kind`` + ``ref``."""

    name: str
    unique: bool
    kind: np.ndarray  # layer index per row (int8)
    ref: np.ndarray  # pool index (realistic) or a number that makes the text unique
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    stamp: np.ndarray
    conf: np.ndarray
    value: np.ndarray  # NaN when the row has no numeric value
    pool: list[str]
    room: np.ndarray  # room index per row (ground truth for the tools bench)
    episodes: list[tuple[int, str]] = field(default_factory=list)
    """(first row, name) of each patrol round."""
    rooms: list[Room] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kind)

    def text(self, i: int) -> str:
        ref = int(self.ref[i])
        if not self.unique:
            return self.pool[ref]
        kind = int(self.kind[i])
        rng = random.Random(ref)
        if kind == 3:
            return f"battery {self.value[i] * 100:.2f}% at {22.0 + self.value[i] * 3.2:.3f} V (reading {ref})"
        if kind == 4:
            return f"cpu temperature {self.value[i]:.2f} C, fan {rng.randint(1800, 4200)} rpm (reading {ref})"
        room = self.rooms[int(self.room[i])]
        obj = room.objects[ref % len(room.objects)][0]
        other = room.objects[(ref // 7) % len(room.objects)][0]
        return (f"frame {ref}: a person {rng.choice(ACTIONS)} the {rng.choice(COLOURS)} {obj} "
                f"{rng.choice(PLACES)} in the {room.name}, {rng.randint(2, 40)} cm from a {other}")

    def rows(self, start: int = 0, stop: Optional[int] = None) -> Iterator[tuple]:
        """(text, x, y, z, stamp, layer, source_type, confidence, value or None, metadata or None).

        Metadata as the ROS adapters write it: detections carry their class,
        score and where their position came from; battery readings their
        percentage.
        """
        stop = len(self) if stop is None else stop
        part = slice(start, stop)
        kind, x, y, z, st, conf, val = (a[part].tolist() for a in (self.kind, self.x, self.y, self.z, self.stamp,
                                                                    self.conf, self.value))
        for j, i in enumerate(range(start, stop)):
            k = kind[j]
            v = val[j]
            text = self.text(i)
            meta = None
            if k == 0:
                meta = {"class_id": text if not self.unique else "object", "score": conf[j],
                        "position_source": "odometry"}
            elif k == 1:
                meta = {"class_id": text if not self.unique else "object", "score": conf[j]}
            elif k == 3:
                meta = {"percentage": v}
            yield (text, x[j], y[j], z[j], st[j], LAYERS[k], SOURCES[k], conf[j], None if v != v else v, meta)

    def distinct_texts(self) -> int:
        if self.unique:
            return len(self)
        return len(set(self.ref.tolist()))


def make_stream(n: int, unique: bool = False, seed: int = 11, start: float = 1_763_000_000.0,
                round_visits: int = 10) -> Stream:
    """A patrol of exactly n observations (see the module docstring)."""
    rooms = build_floor()
    rng = random.Random(seed)
    pool: list[str] = []
    index: dict[str, int] = {}

    def intern(text: str) -> int:
        got = index.get(text)
        if got is None:
            got = index[text] = len(pool)
            pool.append(text)
        return got

    kind = np.empty(n, np.int8)
    ref = np.empty(n, np.int64)
    xs, ys, zs = np.empty(n), np.empty(n), np.empty(n)
    stamp, conf, value = np.empty(n), np.empty(n), np.full(n, np.nan)
    room_of = np.empty(n, np.int16)
    episodes: list[tuple[int, str]] = []
    count = 0
    t = start
    battery = 1.0
    temp = 55.0
    tick = 0
    current = 0
    x, y = rooms[0].origin[0] + ROOM / 2, rooms[0].origin[1] + ROOM / 2

    def emit(k: int, text_ref: int, px: float, py: float, pz: float, c: float, v: float = math.nan) -> bool:
        nonlocal count
        if count >= n:
            return False
        kind[count], ref[count] = k, text_ref
        xs[count], ys[count], zs[count] = px, py, pz
        stamp[count], conf[count], value[count] = t, c, v
        room_of[count] = current
        count += 1
        return True

    def sample() -> None:
        nonlocal tick, battery, temp
        room = rooms[current]
        ox, oy = room.origin
        for label, _, _ in room.objects:
            if rng.random() < 0.4:
                emit(0, count if unique else intern(label), x, y, 0.0, round(0.5 + rng.random() / 2, 3))
        if tick % 4 == 0:
            label, lx, ly = room.objects[tick // 4 % len(room.objects)]
            emit(1, count if unique else intern(label), ox + lx + rng.gauss(0, 0.05),
                 oy + ly + rng.gauss(0, 0.05), 0.8, 0.9)
        if tick % 10 == 0:
            emit(2, count if unique else intern(rng.choice(room.scenes)), x, y, 0.0, 1.0)
        if tick % 20 == 0:
            battery = battery - 0.002 if battery > 0.15 else 1.0  # drains, then a recharge
            temp = min(85.0, max(40.0, temp + rng.gauss(0, 0.8)))
            emit(3, count if unique else intern(f"battery {round(battery * 100)}%"), x, y, 0.0, 1.0,
                 round(battery, 3))
            emit(4, count if unique else intern(f"cpu temperature {round(temp)} C"), x, y, 0.0, 1.0,
                 round(temp, 1))
        tick += 1

    def walk_to(tx: float, ty: float) -> None:
        nonlocal x, y, t
        while count < n:
            dx, dy = tx - x, ty - y
            d = math.hypot(dx, dy)
            step = SPEED * TICK
            if d <= step:
                x, y = tx, ty
                return
            x, y = x + dx / d * step, y + dy / d * step
            t += TICK
            sample()

    def pause(seconds: float) -> None:
        nonlocal t
        for _ in range(int(seconds / TICK)):
            if count >= n:
                return
            t += TICK
            sample()

    visits = 0
    while count < n:
        if visits % round_visits == 0:
            episodes.append((count, f"patrol round {visits // round_visits + 1}"))
        visits += 1
        room = rooms[current]
        ox, oy = room.origin
        for _ in range(rng.randint(2, 4)):
            walk_to(ox + rng.uniform(0.8, ROOM - 0.8), oy + rng.uniform(0.8, ROOM - 0.8))
            pause(rng.uniform(4, 12))
        gx, gy = current % GRID[0], current // GRID[0]
        options = [(gx + dx, gy + dy) for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1))
                   if 0 <= gx + dx < GRID[0] and 0 <= gy + dy < GRID[1]]
        nx, ny = rng.choice(options)
        door = ((gx + nx) / 2 * ROOM + ROOM / 2, (gy + ny) / 2 * ROOM + ROOM / 2)
        walk_to(*door)
        current = ny * GRID[0] + nx
    name = "unique" if unique else "realistic"
    return Stream(name, unique, kind, ref, xs, ys, zs, stamp, conf, value, pool, room_of, episodes, rooms)


class CachedProvider:
    """Wraps a provider; texts in ``precomputed`` are answered from a dict.

    The tools bench pre-embeds its queries through this, for both engines, so
    query latency excludes the embedding model (both engines embed the query
    through their provider).
    """

    def __init__(self, inner) -> None:
        self.inner = inner
        self.model_name = getattr(inner, "model_name", type(inner).__name__)
        self.precomputed: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return self.inner.dim

    def precompute(self, texts) -> None:
        texts = [t for t in texts if t not in self.precomputed]
        if texts:
            for text, vector in zip(texts, self.inner.embed(texts)):
                self.precomputed[text] = np.asarray(vector, np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        if texts and all(t in self.precomputed for t in texts):
            return np.stack([self.precomputed[t] for t in texts])
        return self.inner.embed(texts)
