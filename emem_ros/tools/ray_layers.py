"""Which layers carry camera rays, remembered per store (a layer is one sensor: it has them or not).

``locate`` learns a layer's kind from a few of the matching observations; a
camera layer's newest sightings of one thing may all lack a ray (a sofa
whose boxes are cut by the image border, a stretch without CameraInfo).
So a robot-pose layer whose sample shows no ray is probed once: does any of
the newest ``PROBE_ROWS`` observations of the memory carry one? A yes is
kept; a no is asked again once ``PROBE_ROWS / 2`` more observations exist
(looked at no more often than every ``RECHECK`` seconds).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

PROBE_ROWS = 5000
RECHECK = 10.0

_probes: "weakref.WeakKeyDictionary[Any, _Probe]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class _Probe:
    def __init__(self) -> None:
        self.yes: set[str] = set()
        self.no: dict[str, tuple[int, float]] = {}
        """Layer -> (the highest observation id, monotonic time) when it had no ray among the newest rows."""


def layer_has_rays(store: Any, conn: Any, layer: str) -> bool:
    with _lock:
        probe = _probes.get(store)
        if probe is None:
            probe = _probes[store] = _Probe()
        if layer in probe.yes:
            return True
        asked = probe.no.get(layer)
    if asked is not None and time.monotonic() - asked[1] < RECHECK:
        return False
    top = conn.execute("SELECT COALESCE(MAX(id), 0) FROM observations").fetchone()[0]
    if asked is not None and top - asked[0] < PROBE_ROWS // 2:
        with _lock:
            probe.no[layer] = (asked[0], time.monotonic())
        return False
    found = conn.execute(
        "SELECT 1 FROM observations WHERE id > ? AND layer = ? AND json_type(metadata, '$.ray') = 'array' LIMIT 1",
        (top - PROBE_ROWS, layer)).fetchone() is not None
    with _lock:
        if found:
            probe.yes.add(layer)
            probe.no.pop(layer, None)
        else:
            probe.no[layer] = (top, time.monotonic())
    return found
