"""Things named in free text, without an LLM: "a kitchen with a chair and a table" -> chair, table.

A caption or a spoken note names things in a sentence; without an LLM
(``Summarizer.extract_entities``) they are found by name: the names the
memory already knows (its detectors' labels in this run, its entities) and
a household vocabulary (the COCO classes and a few rooms' furniture), as
whole words, plurals included, the longest name first ("coffee mug" before
"mug"). A name right after a negation ("no mug", "without a chair") is not
a sighting.
"""

from __future__ import annotations

import re
from typing import Iterable

HOUSEHOLD = (
    "person", "bicycle", "car", "motorcycle", "bus", "truck", "boat", "traffic light", "fire hydrant",
    "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "backpack", "umbrella", "handbag",
    "tie", "suitcase", "frisbee", "skis", "snowboard", "ball", "kite", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "mug", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "pizza", "donut", "cake", "chair", "couch", "sofa",
    "potted plant", "plant", "bed", "dining table", "table", "desk", "toilet", "tv", "television", "laptop",
    "mouse", "remote", "keyboard", "cell phone", "phone", "microwave", "oven", "stove", "toaster", "sink",
    "refrigerator", "fridge", "book", "bookshelf", "clock", "vase", "scissors", "teddy bear", "hair drier",
    "toothbrush", "kettle", "lamp", "printer", "towel", "shoe rack", "door", "window", "cabinet", "shelf",
    "box", "pallet", "fire extinguisher", "charger", "charging station", "trash can", "bin", "monitor",
    "armchair", "wardrobe", "dishwasher", "washing machine", "plate", "glass", "jacket", "shoe", "bag",
)
_NEGATION = re.compile(r"(?:\bno|\bnot|\bwithout|\bnever|n't)\s+(?:a\s+|an\s+|the\s+|any\s+)?$")


def names_in(text: str, vocabulary: Iterable[str]) -> list[str]:
    """The names of ``vocabulary`` that ``text`` mentions (lower case, in order of first mention)."""
    lower = text.lower()
    taken = [False] * len(lower)
    found: list[tuple[int, str]] = []
    for name in sorted({v.strip().lower() for v in vocabulary if v and v.strip()}, key=lambda v: (-len(v), v)):
        for match in re.finditer(rf"(?<![a-z0-9]){re.escape(name)}(?:s|es)?(?![a-z0-9])", lower):
            start, end = match.span()
            if any(taken[start:end]) or _NEGATION.search(lower[:start]):
                continue
            for i in range(start, end):
                taken[i] = True
            found.append((start, name))
    return list(dict.fromkeys(name for _, name in sorted(found)))
