"""Small deterministic robot streams for tests."""

from __future__ import annotations

import math
import random

LABELS = ["chair", "table", "red mug", "refrigerator", "sofa", "tv", "potted plant", "laptop", "door"]
SCENES = [
    "a kitchen with a red mug on the table",
    "a living room with a sofa facing the tv",
    "a hallway with a closed door",
]


def patrol(memory, n: int, start: float = 1_000_000.0, seed: int = 7) -> list[str]:
    """Add n observations along a circular patrol; returns their ids."""
    rng = random.Random(seed)
    ids = []
    for i in range(n):
        angle = i / 200.0
        x, y = 5.0 * math.cos(angle), 5.0 * math.sin(angle)
        if i % 20 == 0:
            ids.append(memory.add_body_state(f"battery {100 - i * 50 // n}%", "battery",
                                             x=x, y=y, timestamp=start + i, value=1 - i / (2 * n)))
        elif i % 7 == 0:
            ids.append(memory.add(rng.choice(SCENES), x=x, y=y, timestamp=start + i, layer_name="scene",
                                  source_type="perception"))
        else:
            ids.append(memory.add(rng.choice(LABELS), x=x, y=y, timestamp=start + i,
                                  layer_name="detections", source_type="perception",
                                  confidence=0.5 + rng.random() / 2))
    return ids


QUERIES = ["red mug", "sofa tv", "door", "kitchen table"]


def answers(memory) -> dict:
    """What a planner would see: semantic, spatial and temporal answers."""
    out = {}
    for q in QUERIES:
        labels, sims = memory.store.vectors["texts"].search(memory.embed_query(q), 3)
        out[("semantic", q)] = [(int(l), round(float(s), 5)) for l, s in zip(labels, sims)]
    for center in [(5.0, 0.0, 0.0), (0.0, 5.0, 0.0), (-5.0, 0.0, 0.0)]:
        places = memory.store.places_within(center, 1.5)
        out[("spatial", center)] = sorted((p.text, p.count, p.last_obs_id) for p in places)
    recent = memory.store.query_observations("o.stamp >= ?", (1_000_000.0 + 300,), "o.stamp", 50)
    out["temporal"] = [(o.id, o.text, o.position) for o in recent]
    out["counts"] = memory.store.counts()
    return out


