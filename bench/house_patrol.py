#!/usr/bin/env python3
"""A six-room house patrolled by a robot whose memory is fed the way eMEM's callers feed it.

The robot's own pose is the position of everything it stores (``memory.add(text,
x, y, z, layer_name=..., timestamp=...)``, nothing declared), as EmbodiedAgents'
Memory component and eMEM's examples do:

- ``detections``: a detector that names the objects within a few metres of the
  robot in the room it is in (walls hide the rest): "detected: mug, stove";
  nearer objects are named more reliably. Nothing is stored when it names none.
- ``scene``: a caption every few steps naming the room and one or two things
  in view: "a kitchen with a chair and a table".
- ``battery``: a body reading at the robot's pose.

Ground truth: every object's position, two classes twice (a chair in the
kitchen and in the office, a plant in the living room and the bedroom).
``ask`` locates every class and scores the answers like bench_locate_accuracy
does (error, whether the stated radius holds the object, stated confidence,
both twins reported); ``entities`` does the same for ``entity_query``.

    python bench/house_patrol.py                 # MiniLM, 3 seeds, this checkout
    python bench/house_patrol.py --src /work/main # the same world against another checkout (before/after)
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from engines import percentile  # noqa: E402

ROOM_W, ROOM_H = 5.0, 4.0
ROOMS = {  # name: (column, row) in a 3 x 2 grid of 5 x 4 m rooms
    "kitchen": (0, 0), "living room": (1, 0), "hallway": (2, 0),
    "office": (0, 1), "bedroom": (1, 1), "bathroom": (2, 1),
}
OBJECTS: list[tuple[str, str, tuple[float, float]]] = [  # (name, room, offset from the room's corner)
    ("mug", "kitchen", (4.0, 1.0)), ("stove", "kitchen", (0.6, 0.5)), ("refrigerator", "kitchen", (0.5, 3.4)),
    ("chair", "kitchen", (2.6, 2.2)), ("kettle", "kitchen", (1.4, 0.4)),
    ("sofa", "living room", (2.5, 3.5)), ("television", "living room", (2.5, 0.4)),
    ("plant", "living room", (4.5, 3.5)), ("bookshelf", "living room", (0.4, 2.0)),
    ("umbrella", "hallway", (4.6, 0.5)), ("shoe rack", "hallway", (0.8, 3.6)),
    ("laptop", "office", (1.0, 1.0)), ("chair", "office", (1.6, 1.5)), ("printer", "office", (4.5, 3.5)),
    ("bed", "bedroom", (2.5, 3.2)), ("lamp", "bedroom", (0.4, 3.6)), ("plant", "bedroom", (0.5, 0.5)),
    ("toilet", "bathroom", (4.5, 3.5)), ("sink", "bathroom", (0.5, 3.6)), ("towel", "bathroom", (2.5, 0.3)),
]
RANGE = 3.0
"""Metres: the detector names nothing farther than this."""
STEP = 0.3
"""Metres the robot moves per second."""


def corner(room: str) -> tuple[float, float]:
    col, row = ROOMS[room]
    return col * ROOM_W, row * ROOM_H


def truth() -> list[tuple[str, str, tuple[float, float]]]:
    out = []
    for name, room, (ox, oy) in OBJECTS:
        cx, cy = corner(room)
        out.append((name, room, (cx + ox, cy + oy)))
    return out


def room_of(x: float, y: float) -> Optional[str]:
    for name, (col, row) in ROOMS.items():
        if col * ROOM_W <= x < (col + 1) * ROOM_W and row * ROOM_H <= y < (row + 1) * ROOM_H:
            return name
    return None


def patrol(rng: random.Random, loops: int) -> list[tuple[float, float]]:
    """Waypoints: in each room a loop 1-1.8 m inside its walls (jittered), rooms in a fixed tour, repeated."""
    tour = ["kitchen", "living room", "hallway", "bathroom", "bedroom", "office"]
    points: list[tuple[float, float]] = []
    for _ in range(loops):
        for room in tour:
            cx, cy = corner(room)
            inset = rng.uniform(1.0, 1.6)
            ring = [(cx + inset, cy + inset), (cx + ROOM_W - inset, cy + inset),
                    (cx + ROOM_W - inset, cy + ROOM_H - inset), (cx + inset, cy + ROOM_H - inset)]
            start = rng.randrange(4)
            points += [ring[(start + k) % 4] for k in range(5)]
    path = []
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        n = max(1, int(math.hypot(x1 - x0, y1 - y0) / STEP))
        path += [(x0 + (x1 - x0) * k / n + rng.gauss(0, 0.03), y0 + (y1 - y0) * k / n + rng.gauss(0, 0.03))
                 for k in range(n)]
    return path


def p_named(distance: float) -> float:
    """How often the detector names an object this far away (same room)."""
    if distance > RANGE:
        return 0.0
    return 0.9 if distance < 1.5 else 0.9 - 0.6 * (distance - 1.5) / (RANGE - 1.5)


def feed(memory: Any, seed: int, loops: int = 3, start: float = 1_764_000_000.0) -> float:
    """Patrol and store, eMEM-style; returns the last stamp."""
    rng = random.Random(seed)
    things = truth()
    t = start
    for i, (x, y) in enumerate(patrol(rng, loops)):
        t += 1.0
        here = room_of(x, y)
        seen = [name for name, room, (ox, oy) in things
                if room == here and rng.random() < p_named(math.hypot(ox - x, oy - y))]
        seen = list(dict.fromkeys(seen))
        rng.shuffle(seen)
        if seen:
            memory.add("detected: " + ", ".join(seen), x=x, y=y, z=0.0, layer_name="detections", timestamp=t)
        if i % 5 == 0 and here is not None:
            named = seen[:2]
            caption = f"a {here}" + (" with a " + " and a ".join(named) if named else "")
            memory.add(caption, x=x, y=y, z=0.0, layer_name="scene", timestamp=t)
        if i % 10 == 0:
            memory.add_body_state(f"battery {100 - i / 50:.0f}%", "battery", x=x, y=y, timestamp=t,
                                  value=1.0 - i / 5000)
    memory.flush()
    return t


@dataclass
class Answer:
    seed: int
    name: str
    kind: str
    error: float
    radius: float
    confidence: float

    @property
    def hit(self) -> bool:
        return self.error <= self.radius


def ask(memory: Any, seed: int) -> tuple[list[Answer], list[tuple[str, bool]]]:
    things = truth()
    answers, twins = [], []
    for name in sorted({n for n, _, _ in things}):
        instances = [p for n, _, p in things if n == name]
        result = memory.tools.locate(name)
        if result.position is None:
            answers.append(Answer(seed, name, "none", math.inf, 0.0, 0.0))
            continue
        nearest = min(instances, key=lambda p: math.dist(p, result.position[:2]))
        answers.append(Answer(seed, name, result.source or "?", math.dist(nearest, result.position[:2]),
                              result.radius or 0.0, result.confidence))
        if len(instances) > 1:
            spots = [(result.position, result.radius)] + [(p.position, p.radius) for p in result.elsewhere]
            both = all(any(math.dist(o, s[:2]) <= r for s, r in spots) for o in instances)
            twins.append((f"seed {seed}: {name} x{len(instances)}", both))
    return answers, twins


def entities(memory: Any, seed: int) -> list[tuple[str, float, float]]:
    """Per object: distance to the nearest entity entity_query(name=...) lists (inf: none), and the radius its
    metadata states (nan: none)."""
    import json

    out = []
    conn = memory.store.reader()
    for name, _, position in truth():
        hits = [h for h in memory.tools.entity_query(name=name, n_results=20).hits if h.position is not None]
        if not hits:
            out.append((name, math.inf, math.nan))
            continue
        best = min(hits, key=lambda h: math.dist(h.position[:2], position))
        meta = conn.execute("SELECT metadata FROM entities WHERE id = ?", (int(best.id.split("-")[1]),)).fetchone()
        radius = json.loads(meta[0] or "{}").get("radius", math.nan) if meta else math.nan
        out.append((name, math.dist(best.position[:2], position), float(radius)))
    return out


def run(embedding: str, seeds: list[int], loops: int) -> list[str]:
    from emem_ros import Memory, MemoryConfig

    if embedding == "hashing":
        from emem_ros.embeddings import HashingEmbeddingProvider

        provider: Any = HashingEmbeddingProvider()
    else:
        from emem_ros.embeddings.factory import make_embedder

        provider = make_embedder("auto")
    answers: list[Answer] = []
    twins: list[tuple[str, bool]] = []
    found: list[tuple[str, float, float]] = []
    timings = []
    with tempfile.TemporaryDirectory(prefix="bench-house-") as tmp:
        for seed in seeds:
            clock = [0.0]
            memory = Memory(config=MemoryConfig(db_path=os.path.join(tmp, f"house{seed}.db"), flush_interval=0.0,
                                                index_save_interval=0.0),
                            embedding_provider=provider, get_current_time=lambda clock=clock: clock[0])
            try:
                clock[0] = feed(memory, seed, loops) + 60.0
                started = time.perf_counter()
                got, dup = ask(memory, seed)
                timings.append((time.perf_counter() - started) / max(len(got), 1))
                answers += got
                twins += dup
                memory.extract_entities(final=True)
                found += entities(memory, seed)
            finally:
                memory.close()
    placed = [a for a in answers if math.isfinite(a.error)]
    lines = [f"house patrol ({embedding}; seeds {seeds}, {loops} tours each; positions = the robot's pose, "
             "nothing declared)",
             f"  locate: {len(placed)}/{len(answers)} answered; error p50 {percentile([a.error for a in placed], 0.5):.2f}"
             f" p90 {percentile([a.error for a in placed], 0.9):.2f} m; radius p50 "
             f"{percentile([a.radius for a in placed], 0.5):.2f} m; radius holds the object "
             f"{sum(a.hit for a in placed) / max(len(placed), 1):.2f}; stated confidence "
             f"{statistics.fmean(a.confidence for a in placed) if placed else math.nan:.2f}; "
             f"{1000 * statistics.fmean(timings):.1f} ms a question"]
    kinds = sorted({a.kind for a in placed})
    for kind in kinds:
        group = [a for a in placed if a.kind == kind]
        lines.append(f"    placed by {kind:10}: {len(group):3} answers, error p50 "
                     f"{percentile([a.error for a in group], 0.5):.2f} m, holds {sum(a.hit for a in group) / len(group):.2f}")
    lines.append(f"  twins both reported: {sum(ok for _, ok in twins)}/{len(twins)}"
                 + "".join(f"; NOT {what}" for what, ok in twins if not ok))
    with_entity = [e for _, e, _ in found if math.isfinite(e)]
    stated = [(e, r) for _, e, r in found if math.isfinite(e) and not math.isnan(r)]
    holds = f"{sum(e <= r for e, r in stated) / len(stated):.2f}" if stated else "-"
    lines.append(f"  entity_query name=<object>: {len(with_entity)}/{len(found)} objects have an entity of their name; "
                 f"nearest one's error p50 {percentile(with_entity, 0.5):.2f} m, p90 {percentile(with_entity, 0.9):.2f} m; "
                 f"its stated radius holds the object {holds}")
    worst = sorted(placed, key=lambda a: -a.error)[:5]
    lines.append("  worst: " + "; ".join(f"{a.name} (seed {a.seed}) {a.error:.1f} m, r {a.radius:.1f}" for a in worst))
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedding", choices=("minilm", "hashing"), default="minilm")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--loops", type=int, default=3)
    parser.add_argument("--src", default=None, help="run against the emem_ros of this checkout (default: this one)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(args.src).resolve() if args.src else HERE.parent))
    started = time.perf_counter()
    lines = run(args.embedding, list(range(1, args.seeds + 1)), args.loops)
    load = os.getloadavg()
    lines.append(f"  source {args.src or HERE.parent}; {time.perf_counter() - started:.0f} s; "
                 f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores, shared)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
