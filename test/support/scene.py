"""A synthetic robot day with known ground truth, for the retrieval-tool tests.

Three rooms with objects at known places (some close together, some sharing
words: "red chair" vs "red door"), a patrol through the rooms in three
episodes, scene captions, a battery that drains steadily, one rare sighting
(a fire extinguisher, seen only in the office episode), and helpers that add
gists and entities the way consolidation would.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

START = 1_763_800_000.0
STEP = 2.0
"""Seconds between patrol steps."""
VIEW = 3.5
"""Metres: the robot detects objects this close."""

ROOMS = {
    "kitchen": (3.0, 3.0),
    "living room": (13.0, 3.0),
    "office": (3.0, 13.0),
}

OBJECTS: dict[str, tuple[str, tuple[float, float, float]]] = {
    "red chair": ("kitchen", (2.0, 3.0, 0.0)),
    "blue table": ("kitchen", (2.9, 3.4, 0.0)),
    "coffee mug": ("kitchen", (2.6, 2.3, 0.9)),
    "refrigerator": ("kitchen", (5.5, 1.0, 0.0)),
    "sink": ("kitchen", (4.2, 0.6, 0.0)),
    "green sofa": ("living room", (12.0, 3.0, 0.0)),
    "television": ("living room", (15.0, 3.2, 0.0)),
    "potted plant": ("living room", (13.5, 5.0, 0.0)),
    "laptop": ("office", (3.0, 13.0, 0.8)),
    "office chair": ("office", (3.6, 12.4, 0.0)),
    "printer": ("office", (5.2, 15.0, 0.0)),
    "red door": ("office", (0.5, 15.5, 0.0)),
}

CAPTIONS = {
    "kitchen": ["the red chair is in the kitchen", "a kitchen counter with a coffee mug next to the sink"],
    "living room": ["a green sofa faces the television", "the living room is quiet"],
    "office": ["a laptop sits on the office desk", "the office printer is blinking"],
}

RARE = "fire extinguisher"
RARE_POSITION = (1.0, 11.0, 0.0)


@dataclass
class Episode:
    id: str
    room: str
    start: float
    end: float


@dataclass
class Scene:
    memory: object
    clock: object
    episodes: dict[str, Episode] = field(default_factory=dict)
    detections: dict[str, int] = field(default_factory=dict)
    """Ground truth: how many times each object was detected."""
    battery: list[tuple[float, float]] = field(default_factory=list)
    """(stamp, percent) of every battery reading."""
    rare_stamp: float = 0.0
    end: float = 0.0

    def position(self, name: str) -> tuple[float, float, float]:
        return OBJECTS[name][1]


def _path(room: str, steps: int) -> list[tuple[float, float]]:
    """A small loop around the room's centre."""
    cx, cy = ROOMS[room]
    return [(cx + 1.2 * math.cos(2 * math.pi * i / 40), cy + 1.2 * math.sin(2 * math.pi * i / 40))
            for i in range(steps)]


def build_scene(memory, clock, steps_per_room: int = 300, seed: int = 11) -> Scene:
    """Patrol kitchen, living room, office (one episode each); returns the ground truth."""
    rng = random.Random(seed)
    clock.now = START
    scene = Scene(memory, clock)
    t = START
    battery = 100.0
    for room in ("kitchen", "living room", "office"):
        episode_id = memory.start_episode(f"{room} patrol", goal=f"check the {room}")
        start = t
        for i, (rx, ry) in enumerate(_path(room, steps_per_room)):
            t += STEP
            clock.now = t
            for name, (_, (ox, oy, oz)) in OBJECTS.items():
                if math.hypot(ox - rx, oy - ry) <= VIEW:
                    memory.add(name, ox + rng.gauss(0, 0.05), oy + rng.gauss(0, 0.05), oz, timestamp=t,
                               layer_name="detections", source_type="perception", confidence=0.9)
                    scene.detections[name] = scene.detections.get(name, 0) + 1
            if i % 10 == 0:
                memory.add(rng.choice(CAPTIONS[room]), rx, ry, 0.0, timestamp=t, layer_name="scene",
                           source_type="perception")
            if i % 5 == 0:
                battery -= 0.5
                memory.add_body_state(f"battery {battery:.0f}%", "battery", x=rx, y=ry, timestamp=t,
                                      value=battery / 100.0)
                scene.battery.append((t, battery))
            if room == "office" and i == steps_per_room // 2:
                memory.add(RARE, *RARE_POSITION, timestamp=t, layer_name="detections", source_type="perception")
                scene.rare_stamp = t
        t += STEP
        clock.now = t
        memory.end_episode(consolidate=False)
        scene.episodes[room] = Episode(episode_id, room, start, t)
    memory.add_body_state("cpu temperature 61 C", "cpu_temp", timestamp=t, value=61.0)
    memory.flush()
    scene.end = t
    return scene


def add_gist(memory, text: str, centroid: Optional[tuple[float, float, float]], radius: float,
             time_start: float, time_end: float, layers=("detections",), episode: Optional[int] = None,
             observation_ids=()) -> int:
    """Insert a gist the way consolidation does (row, FTS, vector)."""
    vector = memory.embedder.embed([text])[0]
    with memory.store.write() as conn:
        gist_id = memory.store.add_gist(conn, text=text, centroid=centroid, radius=radius, time_start=time_start,
                                        time_end=time_end, observation_ids=list(observation_ids),
                                        layers=list(layers), embedding=vector, episode_id=episode,
                                        now=time_end)
    memory.store.index_gist(gist_id, vector)
    return gist_id


def add_entity(memory, name: str, entity_type: str, position: tuple[float, float, float], sightings: int,
               first_seen: float, last_seen: float, spread: float = 0.2) -> int:
    """Insert a tracked entity the way consolidation does (row and vector)."""
    vector = memory.embedder.embed([name])[0]
    with memory.store.write() as conn:
        cursor = conn.execute(
            "INSERT INTO entities(name, entity_type, x, y, z, spread, first_seen, last_seen, sightings,"
            " confidence, layer, embedding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
            (name, entity_type, *position, spread, first_seen, last_seen, sightings, 0.9, "detections",
             np.asarray(vector, np.float32).tobytes()))
        entity_id = int(cursor.lastrowid)
    memory.store.vectors["entities"].add(np.array([entity_id]), np.asarray(vector).reshape(1, -1))
    return entity_id


def scene_memory(folder, steps_per_room: int = 300, **overrides):
    """A memory in ``folder`` holding the scene; returns (memory, clock, scene). Close it when done."""
    from emem_ros import Memory, MemoryConfig
    from emem_ros.embeddings import HashingEmbeddingProvider
    from test.conftest import FakeClock

    settings = {"flush_interval": 0.0, "index_save_interval": 0.0}
    settings.update(overrides)
    clock = FakeClock(START)
    memory = Memory(config=MemoryConfig(db_path=str(folder / "scene.db"), **settings),
                    embedding_provider=HashingEmbeddingProvider(), get_current_time=clock)
    return memory, clock, build_scene(memory, clock, steps_per_room)
