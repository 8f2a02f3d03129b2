"""A robot-pose placement from the layer's whole track: where it named the thing and where it did not.

``locate`` clusters the places of the texts that match a concept; for a
cluster stored at the robot's pose this reads every place of its layers
around it (``PlaceCache.in_box``) and sorts them by text:

- *seen*: a text that matched the concept, or that names it as a word
  ("detected: kettle, mug" for "mug"), in or next to the cluster;
- *not seen*: a detector's list that does not name it ("detected: stove,
  kettle"): the layer was perceiving there and did not name it;
- anything else (a caption that does not mention it, a text that names a
  "blue mug" when asked for a "red mug") says nothing either way.

``geometry.pose_evidence`` turns those counts into a position and a radius.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

import numpy as np

from emem_ros.consolidation.rows import labels_of
from emem_ros.geometry.pose_evidence import locate_from_poses
from emem_ros.geometry.uncertainty import Region
from emem_ros.tools.placement import LINK

_DENSE = 100_000
"""Place x pose pairs up to which ``_near`` compares all of them at once (beyond, a k-d tree is faster)."""
_FILLER = re.compile(r"^(where\s+is|where's|find|locate|the|a|an|my|our|your)\s+")
_WORD = re.compile(r"[a-z0-9][a-z0-9' -]*[a-z0-9]|[a-z0-9]")


def concept_words(concept: str) -> tuple[str, str]:
    """(phrase, head noun) of a concept: 'where is the red mug?' -> ('red mug', 'mug')."""
    text = concept.strip().lower().rstrip("?.! ")
    while True:
        stripped = _FILLER.sub("", text)
        if stripped == text:
            break
        text = stripped
    found = _WORD.findall(text)
    phrase = " ".join(" ".join(found).split())
    return phrase, phrase.split()[-1] if phrase else ""


def mentions(text: str, word: str) -> bool:
    """``word`` (or its plural) as a whole word or phrase of ``text`` (lower case)."""
    if not word:
        return False
    return re.search(rf"(?<![a-z0-9]){re.escape(word)}(?:s|es)?(?![a-z0-9])", text) is not None


class TrackEvidence:
    """Reads, for robot-pose placements of one concept, the places its layers perceived from."""

    def __init__(self, store: object, concept: str, relevant: set[int]) -> None:
        self.store = store
        self.phrase, self.head = concept_words(concept)
        self.relevant = relevant

    def region(self, seen_from: Optional[np.ndarray], layers: Sequence[str], view_range: float) -> Optional[Region]:
        """Where the thing seen from the places ``seen_from`` (n, 2) is; None when the track says nothing
        against any spot (then every spot within view of the poses stays possible: ``pose_region``)."""
        if seen_from is None or not len(seen_from) or not self.phrase:
            return None
        reach = 2.0 * view_range
        lo = seen_from.min(axis=0) - reach
        hi = seen_from.max(axis=0) + reach
        places = self.store.place_cache.in_box(list(layers), (float(lo[0]), float(lo[1])),  # type: ignore[attr-defined]
                                               (float(hi[0]), float(hi[1])))
        if not len(places):
            return None
        names = self.store.text_names.get(set(places.text_id.tolist()))  # type: ignore[attr-defined]
        said = {t: names.get(t, "").lower() for t in set(places.text_id.tolist())}
        named = {t for t, text in said.items() if mentions(text, self.phrase)}
        # Texts that name the concept; when none does (a concept no text words: 'something to sit on'), the
        # texts that matched it by meaning, and then nothing counts against it.
        seen = named or (self.relevant & said.keys())
        positive = np.fromiter((t in seen for t in places.text_id.tolist()), dtype=bool, count=len(places))
        xy = np.column_stack([places.sx / places.count, places.sy / places.count])
        positive &= _near(xy, seen_from)
        if not positive.any():
            return None
        # Not naming it counts against a place only where the layer saw the same scene: it named something
        # named together with the thing (a wall hides the thing from the next room, and its scene too).
        beside = {label for t in set(places.text_id[positive].tolist()) for label in labels_of(said[t], None)
                  if not mentions(label, self.head)}
        unseen = set()
        for t, text in said.items():
            if named and t not in seen and not mentions(text, self.head):
                labels = labels_of(text, None)
                if labels and not beside.isdisjoint(labels):
                    unseen.add(t)
        negative = np.fromiter((t in unseen for t in places.text_id.tolist()), dtype=bool, count=len(places))
        if not negative.any():  # nothing says where it is not: every spot within view of the poses stays open
            return None
        use = positive | negative
        cells = places.cx[use] * 1_000_003 + places.cy[use]  # one term per cell: its sightings of all texts
        _, index = np.unique(cells, return_inverse=True)
        index = index.reshape(-1)
        count = places.count[use]
        perceived = np.bincount(index, weights=count)
        hits = np.bincount(index, weights=np.where(positive[use], count, 0.0))
        where = np.column_stack([np.bincount(index, weights=xy[use, 0] * count),
                                 np.bincount(index, weights=xy[use, 1] * count)]) / perceived[:, None]
        return locate_from_poses(where, hits, perceived, view_range)


def _near(xy: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    """Places within ``LINK`` of the cluster's own (one step: chaining would walk through a doorway to the
    other instance of the class)."""
    if len(xy) * len(cluster) <= _DENSE:
        d2 = ((xy[:, None, :] - cluster[None, :, :]) ** 2).sum(axis=2).min(axis=1)
        near: np.ndarray = d2 <= LINK * LINK
        return near
    from scipy.spatial import cKDTree  # a long track against many places: the dense table grew as their product

    distance, _ = cKDTree(cluster).query(xy, k=1, distance_upper_bound=LINK * (1.0 + 1e-12))
    return np.asarray(distance <= LINK)
