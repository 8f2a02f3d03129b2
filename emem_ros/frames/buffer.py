"""A transform tree with history, as tf2 keeps it, without ROS: the live node and replay feed the same one.

Each frame has at most one parent. A dynamic edge (``/tf``, or odometry where
``/tf`` lacks that edge) keeps a time-sorted history; a static edge
(``/tf_static``) holds at any time. ``lookup(target, source, t)`` composes the
chain through the frames' common ancestor, each dynamic edge interpolated at
``t`` (tf2's lerp + slerp).

Where this differs from tf2, on purpose:
- A stamp newer than a moving frame's newest transform (the robot's motion,
  ``odom -> base_link``) is *not yet* answerable (``retry``): the caller waits
  for the transform. Only a caller that has stopped waiting (``clamp=True``)
  gets the newest transform, and only within ``max_extrapolation`` seconds of
  it. A correction edge (``map -> odom``) holds its newest transform for
  ``max_extrapolation`` seconds: it changes by millimetres between two
  corrections, and waiting for the next would delay every message by its
  period.
- No interpolation across a gap longer than ``max_gap`` nor across a jump of
  a correction edge (``map -> odom``: translation over ``max_jump`` metres or
  rotation over ``max_jump`` radians between two consecutive transforms: a
  relocalization, the jump that absorbs an odometry restart):
  the nearer transform answers if it is within ``max_extrapolation``, else
  nothing does. A pose is never smeared across a discontinuity.
- A transform that would give a frame a second parent, close a cycle, is not
  finite, or is stamped ahead of the clock is refused and counted (tf2
  would re-parent silently or fail lookups later).

Thread-safe: one lock; the node's TF and layer callbacks run on executor threads.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from emem_ros.frames.cdr import StampedTransform, parse_tf_message
from emem_ros.frames.transform import Transform, from_message, interpolate

FUTURE_TOLERANCE = 5.0
"""Seconds a transform may be stamped ahead of the clock before it is refused as 'from the future'."""
MAX_SAMPLES = 50_000
"""Transforms kept per dynamic edge at most (besides the ``history`` seconds)."""
MAX_DEPTH = 64
"""Frames in one chain at most (a deeper tree is malformed)."""

SOURCE_TF = "tf"
SOURCE_ODOMETRY = "odometry"


@dataclass(frozen=True)
class LookupFailure:
    """Why a lookup has no answer; ``retry`` when waiting may still bring the transform."""

    kind: str
    """'unknown frame', 'not connected', 'not yet', 'too old', 'gap' or 'jump'."""
    message: str
    retry: bool
    target: str
    source: str
    newest_age: Optional[float] = None
    """Seconds from the newest transform on the failing edge to the stamp asked for (None: no edge)."""


Lookup = Union[Transform, LookupFailure]


@dataclass
class BufferStats:
    accepted: int = 0
    static: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    """Reason -> transforms refused (not finite, second parent, cycle, from the future, ...)."""
    jumps: int = 0
    """Discontinuities seen on dynamic edges (not interpolated across)."""
    time_jumps: int = 0
    """Times the clock went back further than the history (bag loop, simulator reset): history cleared."""
    odometry_superseded: int = 0
    """Odometry poses ignored because /tf carries that edge."""


@dataclass
class _Edge:
    parent: str
    static: bool
    source: str
    stamps: list[float] = field(default_factory=list)
    transforms: list[Transform] = field(default_factory=list)
    jump_before: list[bool] = field(default_factory=list)
    """jump_before[i]: transform i is discontinuous from transform i - 1."""


class TransformBuffer:
    """Frames, their parents and the transforms between them over time (see the module docstring)."""

    def __init__(self, history: float = 60.0, *, max_extrapolation: float = 0.5, max_gap: float = 5.0,
                 max_jump: float = 0.25, moving_frames: frozenset[str] = frozenset()) -> None:
        for name, value in (("history", history), ("max_extrapolation", max_extrapolation),
                            ("max_gap", max_gap), ("max_jump", max_jump)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise ValueError(f"{name} must be zero or a positive number, got {value!r}")
        if history <= 0:
            raise ValueError(f"history must be a positive number of seconds, got {history!r}")
        self.history = float(history)
        self.max_extrapolation = float(max_extrapolation)
        self.max_gap = float(max_gap)
        """0 = any gap is interpolated across."""
        self.max_jump = float(max_jump)
        """0 = no jump detection."""
        self.moving_frames = frozenset(normalize(f) for f in moving_frames)
        """Frames whose edge to their parent is motion (odom -> base_link): it may move by more than
        ``max_jump`` between two transforms, so only gaps stop its interpolation. Every other dynamic edge
        is a correction (map -> odom), which changes smoothly unless localization jumps."""
        self._edges: dict[str, _Edge] = {}
        """child frame -> its edge to its parent."""
        self._stats = BufferStats()
        self._newest = 0.0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ writing
    def set_transform(self, parent: str, child: str, stamp: float, transform: Optional[Transform], *,
                      static: bool = False, source: str = SOURCE_TF, now: Optional[float] = None) -> Optional[str]:
        """Add one transform child -> parent; None when accepted, else the reason it was refused (counted)."""
        parent, child = normalize(parent), normalize(child)
        with self._lock:
            reason = self._refusal(parent, child, stamp, transform, static, source, now)
            if reason is not None:
                if reason != "superseded by /tf":
                    self._stats.rejected[reason] += 1
                return reason
            assert transform is not None
            edge = self._edges.get(child)
            if edge is None or (edge.source == SOURCE_ODOMETRY and source == SOURCE_TF):
                edge = self._edges[child] = _Edge(parent, static, source)
            self._stats.accepted += 1
            if static:
                self._stats.static += 1
                edge.stamps[:] = [stamp]
                edge.transforms[:] = [transform]
                edge.jump_before[:] = [False]
                return None
            self._insert(edge, child, float(stamp), transform)
            return None

    def add_tf_message(self, msg: Any, *, static: bool, now: Optional[float] = None) -> tuple[int, list[str]]:
        """Every transform of a ``tf2_msgs/TFMessage`` (a message object, or its CDR bytes as a raw
        subscription and a bag give them): (accepted, reasons of the refused)."""
        try:
            items = _stamped_transforms(msg)
        except ValueError as exc:
            with self._lock:
                self._stats.rejected["not a TFMessage"] += 1
            return 0, [f"not a TFMessage: {exc}"]
        refused: list[str] = []
        accepted = 0
        for item in items:
            if item.stamp is None and not static:
                reason: Optional[str] = "unstamped"
                with self._lock:
                    self._stats.rejected["unstamped"] += 1
            else:
                reason = self.set_transform(item.parent, item.child, item.stamp or 0.0, item.transform,
                                            static=static, now=now)
            if reason is None:
                accepted += 1
            else:
                refused.append(f"{reason} ({normalize(item.parent) or '?'} -> {normalize(item.child) or '?'})")
        return accepted, refused

    def add_pose(self, parent: str, child: str, stamp: float, transform: Optional[Transform], *,
                 now: Optional[float] = None) -> Optional[str]:
        """An odometry pose as the edge child -> parent, unless /tf already carries that edge."""
        return self.set_transform(parent, child, stamp, transform, source=SOURCE_ODOMETRY, now=now)

    def clear(self) -> None:
        with self._lock:
            self._edges.clear()
            self._newest = 0.0

    # ------------------------------------------------------------------ reading
    def lookup(self, target: str, source: str, stamp: float, *, clamp: bool = False) -> Lookup:
        """The transform source -> target at ``stamp``, or why not (``LookupFailure``)."""
        target, source = normalize(target), normalize(source)
        with self._lock:
            return self._lookup(target, source, float(stamp), clamp)

    def latest_time(self, target: str, source: str) -> Optional[float]:
        """The newest stamp at which every dynamic edge between the two frames has data (None: not connected)."""
        target, source = normalize(target), normalize(source)
        with self._lock:
            chain = self._chain(target, source)
            if isinstance(chain, LookupFailure):
                return None
            newest = [edge.stamps[-1] for edge in chain if not edge.static]
            return min(newest) if newest else self._newest or None

    @property
    def newest(self) -> float:
        """The newest stamp of any dynamic transform taken (0 before the first): how far TF has got."""
        with self._lock:
            return self._newest

    def knows(self, frame: str) -> bool:
        frame = normalize(frame)
        with self._lock:
            return frame in self._edges or any(edge.parent == frame for edge in self._edges.values())

    def parent_of(self, frame: str) -> Optional[str]:
        with self._lock:
            edge = self._edges.get(normalize(frame))
            return edge.parent if edge is not None else None

    def stats(self) -> BufferStats:
        with self._lock:
            s = self._stats
            return BufferStats(s.accepted, s.static, Counter(s.rejected), s.jumps, s.time_jumps,
                               s.odometry_superseded)

    # ------------------------------------------------------------------ internals
    def _refusal(self, parent: str, child: str, stamp: float, transform: Optional[Transform], static: bool,
                 source: str, now: Optional[float]) -> Optional[str]:
        if not parent or not child:
            return "empty frame_id"
        if parent == child:
            return "a frame as its own parent"
        if transform is None:
            return "not finite (NaN) or not a rotation"
        if not static and (not math.isfinite(stamp) or stamp <= 0.0):
            return "unstamped"
        if not static and now is not None and now > 0.0 and stamp > now + FUTURE_TOLERANCE:
            return "stamped in the future"
        edge = self._edges.get(child)
        if edge is not None:
            if edge.parent != parent:
                if edge.source == SOURCE_ODOMETRY and source == SOURCE_TF:
                    pass  # /tf takes the edge over: its tree wins over the odometry's frames
                else:
                    return "second parent"
            elif edge.static != static:
                return "both static and dynamic"
            elif edge.source == SOURCE_TF and source == SOURCE_ODOMETRY:
                self._stats.odometry_superseded += 1
                return "superseded by /tf"
        frame, depth = parent, 0
        while frame in self._edges and depth < MAX_DEPTH:
            frame = self._edges[frame].parent
            if frame == child:
                return "cycle"
            depth += 1
        return None

    def _insert(self, edge: _Edge, edge_child: str, stamp: float, transform: Transform) -> None:
        stamps, transforms, jumps = edge.stamps, edge.transforms, edge.jump_before
        if stamp > self._newest:
            self._newest = stamp
        elif stamp < self._newest - self.history:
            # The clock went back further than the history reaches: another timeline.
            for other in self._edges.values():
                if not other.static:
                    del other.stamps[:], other.transforms[:], other.jump_before[:]
            self._stats.time_jumps += 1
            self._newest = stamp
        if not stamps or stamp > stamps[-1]:
            index = len(stamps)
            stamps.append(stamp)
            transforms.append(transform)
            jumps.append(False)
        else:
            index = bisect_left(stamps, stamp)
            if index < len(stamps) and stamps[index] == stamp:
                transforms[index] = transform
            else:
                stamps.insert(index, stamp)
                transforms.insert(index, transform)
                jumps.insert(index, False)
        if edge_child not in self.moving_frames:
            where = self._robot_in(edge_child)
            for i in (index, index + 1):
                if 0 < i < len(stamps):
                    jumps[i] = self._jumped(transforms[i - 1], transforms[i], where)
                    self._stats.jumps += jumps[i]
        cutoff = self._newest - self.history
        drop = max(bisect_left(stamps, cutoff), len(stamps) - MAX_SAMPLES)
        if drop > 0:
            del stamps[:drop], transforms[:drop], jumps[:drop]

    def _robot_in(self, frame: str) -> tuple[float, float, float]:
        """Where a moving frame (the robot) last was in ``frame``: a correction is measured there.

        A ``map -> odom`` correction turns the whole odometry frame: measured at
        its origin, a yaw noise of a few mrad moves points far out (the robot,
        metres from where its odometry started) by decimetres, and measured at
        the origin it looks like a jump when it is not one.
        """
        for child, edge in self._edges.items():
            if child in self.moving_frames and edge.parent == frame and edge.transforms:
                return edge.transforms[-1].translation
        return (0.0, 0.0, 0.0)

    def _jumped(self, a: Transform, b: Transform, where: tuple[float, float, float]) -> bool:
        """Whether two consecutive corrections differ by more than ``max_jump`` where the robot is."""
        if self.max_jump <= 0:
            return False
        _, radians = a.distance_to(b)
        pa, pb = a.apply(where), b.apply(where)
        metres = sum((x - y) ** 2 for x, y in zip(pa, pb)) ** 0.5
        return metres > self.max_jump or radians > self.max_jump

    def _chain(self, target: str, source: str) -> Union[list[_Edge], LookupFailure]:
        """The edges from source up to the common ancestor, then from target up to it (both upwards)."""
        up_source = self._ancestors(source)
        up_target = self._ancestors(target)
        for frame in (source, target):
            if frame not in self._edges and not any(e.parent == frame for e in self._edges.values()):
                return LookupFailure("unknown frame", f"frame '{frame}' has not been seen on /tf or /tf_static",
                                     True, target, source)
        position = {frame: i for i, (frame, _) in enumerate(up_target)}
        for i, (frame, _) in enumerate(up_source):
            if frame in position:
                edges = [edge for _, edge in up_source[:i]] + [edge for _, edge in up_target[:position[frame]]]
                return [e for e in edges if e is not None]
        return LookupFailure("not connected", f"'{source}' and '{target}' are in two trees that no transform "
                                              "joins (is localization publishing?)", True, target, source)

    def _ancestors(self, frame: str) -> list[tuple[str, Optional[_Edge]]]:
        """[(frame, edge to its parent), (parent, edge), ..., (root, None)]."""
        out: list[tuple[str, Optional[_Edge]]] = []
        while len(out) < MAX_DEPTH:
            edge = self._edges.get(frame)
            out.append((frame, edge))
            if edge is None:
                break
            frame = edge.parent
        return out

    def _lookup(self, target: str, source: str, t: float, clamp: bool) -> Lookup:
        if target == source:
            return Transform.identity()
        up_source = self._ancestors(source)
        up_target = self._ancestors(target)
        chain = self._chain(target, source)
        if isinstance(chain, LookupFailure):
            return chain
        ancestor_of_source = self._compose_up(up_source, chain, target, source, t, clamp)
        if isinstance(ancestor_of_source, LookupFailure):
            return ancestor_of_source
        ancestor_of_target = self._compose_up(up_target, chain, target, source, t, clamp)
        if isinstance(ancestor_of_target, LookupFailure):
            return ancestor_of_target
        return ancestor_of_target.inverse().compose(ancestor_of_source)

    def _compose_up(self, ancestors: list[tuple[str, Optional[_Edge]]], chain: list[_Edge], target: str,
                    source: str, t: float, clamp: bool) -> Lookup:
        """frame -> common ancestor, following ``ancestors`` while its edges are on ``chain``."""
        result = Transform.identity()
        members = {id(edge) for edge in chain}
        for frame, edge in ancestors:
            if edge is None or id(edge) not in members:
                break
            step = self._at(edge, frame, t, clamp, target, source)
            if isinstance(step, LookupFailure):
                return step
            result = step.compose(result)
        return result

    def _at(self, edge: _Edge, child: str, t: float, clamp: bool, target: str, source: str) -> Lookup:
        stamps, transforms = edge.stamps, edge.transforms
        if edge.static:
            return transforms[0]
        n = len(stamps)
        what = f"{edge.parent} -> {child}"
        if n == 0:
            return LookupFailure("not yet", f"no transform {what} yet", True, target, source)
        newest, oldest = stamps[-1], stamps[0]
        if t > newest:
            # A correction (map -> odom) holds until the next one, which localization publishes at 1-10 Hz:
            # waiting for it would hold every message back by up to its period for a change of millimetres.
            # The robot's motion (a moving frame) is waited for and interpolated.
            if (clamp or child not in self.moving_frames) and t - newest <= self.max_extrapolation:
                return transforms[-1]
            return LookupFailure("not yet", f"the newest transform {what} is {t - newest:.3f} s older than the "
                                 "stamp", True, target, source, t - newest)
        if t < oldest:
            if oldest - t <= self.max_extrapolation:
                return transforms[0]
            return LookupFailure("too old", f"the stamp is {oldest - t:.1f} s older than the history of {what}",
                                 False, target, source, t - newest)
        i = bisect_left(stamps, t)
        if stamps[i] == t:
            return transforms[i]
        before, after = stamps[i - 1], stamps[i]
        gap = after - before
        jumped = edge.jump_before[i]
        if jumped or (self.max_gap > 0 and gap > self.max_gap):
            nearer = i - 1 if t - before <= after - t else i
            if abs(t - stamps[nearer]) <= self.max_extrapolation:
                return transforms[nearer]
            kind = "jump" if jumped else "gap"
            return LookupFailure(kind, f"the stamp falls in a {gap:.1f} s {kind} of {what}", False, target, source,
                                 t - newest)
        return interpolate(transforms[i - 1], transforms[i], (t - before) / gap)


def _stamped_transforms(msg: Any) -> list[StampedTransform]:
    """The transforms of a TFMessage object or of its CDR bytes; ValueError for anything else."""
    if isinstance(msg, (bytes, bytearray, memoryview)):
        return parse_tf_message(msg)
    try:
        items = list(msg.transforms)
    except (AttributeError, TypeError):
        raise ValueError(f"a {type(msg).__name__} has no transforms") from None
    out = []
    for item in items:
        try:
            header = item.header
            out.append(StampedTransform(header.frame_id, item.child_frame_id, stamp_seconds(header.stamp),
                                        from_message(item.transform)))
        except AttributeError:
            out.append(StampedTransform("", "", None, None))
    return out


def normalize(frame: Any) -> str:
    """'/map' (ROS 1 style) and 'map' are the same frame; anything but a string is no frame."""
    return frame.strip().lstrip("/") if isinstance(frame, str) else ""


def stamp_seconds(stamp: Any) -> Optional[float]:
    """Seconds of a builtin_interfaces/Time; None when absent, zero or not finite."""
    try:
        seconds = float(stamp.sec) + float(stamp.nanosec) * 1e-9
    except (AttributeError, TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds > 0.0 else None
