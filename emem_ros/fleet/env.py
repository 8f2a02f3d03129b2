"""``FleetEnv``: the tool runners' ``ToolContext`` over a fleet store (arguments, clock, robots, filters, notes).

The runners are the robot's own (``tools/``); this env checks their
arguments the same way, resolves times against the fleet's clock, keeps to
one call's ``robots`` (``scoped``) and words the notes of empty answers. Its
``reads`` (``fleet.reads.FleetReads``) are made by the factory it is given,
for it and for each scoped view.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Optional

import numpy as np

from emem_ros.core.config import MemoryConfig
from emem_ros.core.errors import InvalidInputError, TimeExpressionError
from emem_ros.core.timeexpr import parse_time
from emem_ros.fleet.reader import FleetReader, Scope
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.filters import Filters, episode_number
from emem_ros.tools.filters import area as make_area
from emem_ros.tools.reads import ToolReads
from emem_ros.tools.results import fmt_time
from emem_ros.tools.spec import ToolDef

VECTOR_MEMO = 256


class FleetEnv:
    """What every fleet tool needs: the reader, the embedder, the clock, argument checks.

    It is the tool runners' ``ToolContext`` over the fleet: ``scoped(robots)``
    gives the env of one call's ``robots`` filter, whose ``reads``
    (``FleetReads``) keep to those robots.
    """

    store_name = "the fleet store"

    def __init__(self, reader: FleetReader, embed: Callable[[list[str]], np.ndarray],
                 reads: Callable[["FleetEnv"], ToolReads], config: Optional[MemoryConfig] = None,
                 clock: Optional[Callable[[], float]] = None) -> None:
        self.reader = reader
        self._embed = embed
        self.config = config or MemoryConfig(db_path=":memory:")
        self._clock = clock
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._pinned = threading.local()
        self.chosen: Optional[tuple[str, ...]] = None
        """The robots this env's reads keep to (None: the whole fleet)."""
        self._make_reads = reads
        self.reads = reads(self)

    def scoped(self, robots: Optional[tuple[str, ...]]) -> "FleetEnv":
        """This env keeping to ``robots`` (already checked by ``robots()``); clock, memo and reader shared."""
        view = copy.copy(self)
        view.chosen = robots
        view.reads = self._make_reads(view)
        return view

    def prepare(self) -> float:
        return self.now()  # robots flush before they sync: what the store holds is all there is

    count = staticmethod(ToolEnv.count)
    positive = staticmethod(ToolEnv.positive)
    text = staticmethod(ToolEnv.text)
    layer = staticmethod(ToolEnv.layer)

    def now(self) -> float:
        pinned = getattr(self._pinned, "now", None)
        if pinned is not None:
            return float(pinned)
        return float(self._clock()) if self._clock is not None else time.time()

    def run(self, td: ToolDef, *args: Any, **kwargs: Any) -> Any:
        """Run a fleet tool with the clock read once (a 'latest' clock is a query)."""
        self._pinned.now = None
        self._pinned.now = self.now()
        try:
            return td.run(self, *args, **kwargs)
        finally:
            self._pinned.now = None

    def fmt(self, stamp: float) -> str:
        return fmt_time(stamp, self.now())

    def time(self, name: str, value: Any) -> Optional[float]:
        try:
            return parse_time(value, self.now())
        except TimeExpressionError as exc:
            raise TimeExpressionError(f"{name}: {exc}") from None

    def vector(self, text: str) -> np.ndarray:
        cached = self._vectors.get(text)
        if cached is None:
            cached = np.asarray(self._embed([text])[0], dtype=np.float32)
            norm = float(np.linalg.norm(cached))
            cached = cached / norm if norm > 0 else cached
            self._vectors[text] = cached
            if len(self._vectors) > VECTOR_MEMO:
                self._vectors.popitem(last=False)
        return cached

    def filters(self, layer: Any = None, time_after: Any = None, time_before: Any = None, near_x: Any = None,
                near_y: Any = None, spatial_radius: Any = None, episode_id: Any = None) -> Filters:
        after, before = self.time("time_after", time_after), self.time("time_before", time_before)
        if after is not None and before is not None and after > before:
            raise InvalidInputError(f"time_after ({self.fmt(after)}) is later than time_before "
                                    f"({self.fmt(before)}); swap them")
        center, radius = make_area(near_x, near_y, spatial_radius)
        return Filters(layer=self.layer(layer), after=after, before=before, center=center, radius=radius,
                       episode=self.episode(episode_id))

    def episode(self, value: Any) -> Optional[int]:
        """An episode number of the one robot asked about (episode ids are per robot)."""
        if value is None or value == "":
            return None
        chosen = self.chosen
        if not chosen or len(chosen) != 1:
            raise InvalidInputError("episode ids are per robot: give robots=['<robot id>'] (one robot) "
                                    "with episode_id")
        number = episode_number(value)
        if not self.reader.episodes(chosen, 1, number=number):
            latest = self.reader.episodes(chosen, 3)
            raise InvalidInputError(f"no episode ep-{number} of {chosen[0]} in the fleet store"
                                    + ("; its latest are " + ", ".join(f"ep-{r[1]} ({r[2]})" for r in latest)
                                       if latest else "; it recorded no episode yet"))
        return number

    def scope_of(self, f: Filters, three_d: bool = False) -> Scope:
        """One call's filters and robots, as the reader takes them."""
        return Scope(robots=self.chosen, layer=f.layer, after=f.after, before=f.before, center=f.center,
                     radius=f.radius, three_d=three_d, episode=f.episode)

    def describe(self, f: Filters) -> str:
        """The robots asked and the filters, in words ('' when nothing narrows the answer)."""
        words = [f"by {', '.join(self.chosen)}"] if self.chosen else []
        filtered = f.describe(self.fmt)
        return ", ".join(words + ([filtered] if filtered else []))

    def layer_notes(self, layer: Optional[str]) -> list[str]:
        """Why a layer filter matched nothing (or that nothing was synced yet)."""
        return self._no_layer(layer) if layer else self._unsynced()

    def empty_notes(self, f: Filters) -> list[str]:
        notes = self._no_layer(f.layer) if f.layer else []
        if notes:
            return notes
        if self.chosen or not f.empty:
            return [f"nothing passes the filters ({self.describe(f)}); try fewer filters"]
        return self._unsynced()

    def _no_layer(self, layer: str) -> list[str]:
        known = self.reader.layers(self.chosen)
        if layer in known:
            return []
        listing = ", ".join(known) if known else "none yet"
        return [f"there is no layer '{layer}'" + (" for these robots" if self.chosen else "")
                + f"; layers in the fleet store: {listing}"]

    def _unsynced(self) -> list[str]:
        if self.reader.robots():
            return []
        return ["no robot has synced into this fleet store yet (emem sync DB --to URL --robot-id R)"]

    def robots(self, value: Any) -> Optional[tuple[str, ...]]:
        """The ``robots`` argument: None (whole fleet), a name, or a list of names known to the store."""
        if value is None or value == "" or value == []:
            return None
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(r, str) and r.strip() for r in items):
            raise InvalidInputError(f"robots must be a list of robot ids such as ['robot1'], got {value!r}")
        return self.reader.check_robots([r.strip() for r in items])
