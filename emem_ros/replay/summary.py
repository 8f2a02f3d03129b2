"""What a replay did, as data (for tests and callers) and as text (for a person).

Every message of the bag is accounted for: stored as an observation, thinned
by the intake policy, skipped with a reason, used as odometry, or on a topic
the parameters do not subscribe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional

MAX_REASONS = 6
"""Skip reasons listed per layer; the rest are summed into one line."""


@dataclass
class LayerReport:
    name: str
    topic: str
    msg_type: str
    internal: bool = False
    messages: int = 0
    """Messages read from the bag on the layer's topic."""
    observations: int = 0
    dropped_by_intake: int = 0
    without_position: int = 0
    object_position_dropped: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason -> messages (or single detections) that produced nothing."""
    bearings: int = 0
    """Observations stored with a ray (a camera layer)."""
    without_bearing: dict[str, int] = field(default_factory=dict)
    """Reason -> observations of a camera layer stored without a ray."""
    camera: Any = None
    """The layer camera's intrinsics at the end (``geometry.rays.Intrinsics``), None without a camera."""
    no_transform: int = 0
    """Observations stored without a position: their transform did not come within tf_timeout."""

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


@dataclass
class OdometryReport:
    topic: str
    messages: int = 0
    accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)


@dataclass
class FramesReport:
    """What TF did in a replay with a fixed frame."""

    fixed_frame: str
    base_frame: str
    tf_messages: int = 0
    static_messages: int = 0
    transforms: int = 0
    """Transforms taken (dynamic and static)."""
    refused: dict[str, int] = field(default_factory=dict)
    """Reason -> transforms refused (not finite, second parent, cycle, from the future, ...)."""
    jumps: int = 0
    """Discontinuities (relocalization, odometry restart) that were not interpolated across."""


@dataclass
class ReplaySummary:
    bag: str
    storage: str
    db_path: str
    distro: str
    layers: list[LayerReport]
    odometry: OdometryReport
    frames: Optional[FramesReport] = None
    """Set when the parameters name a fixed frame (positions from TF)."""
    bag_start: Optional[float] = None
    """Bag time of the first and last message read (epoch seconds)."""
    bag_end: Optional[float] = None
    messages_read: int = 0
    ignored_topics: dict[str, int] = field(default_factory=dict)
    """Topics in the bag that no layer (nor odometry) subscribes, with their message counts."""
    missing_topics: dict[str, str] = field(default_factory=dict)
    """Layer -> topic for layers whose topic the bag does not contain."""
    camera_infos: dict[str, int] = field(default_factory=dict)
    """CameraInfo topic -> messages read."""
    notes: list[str] = field(default_factory=list)
    consolidated: bool = False
    gists_created: int = 0
    entities_created: int = 0
    entities_merged: int = 0
    gists_total: int = 0
    entities_total: int = 0
    observations_total: int = 0
    """Observations in the memory file after the replay (more than this replay's when appending)."""
    stopped_early: Optional[str] = None
    wall_seconds: float = 0.0

    @property
    def observations(self) -> int:
        return sum(layer.observations for layer in self.layers)

    @property
    def dropped_by_intake(self) -> int:
        return sum(layer.dropped_by_intake for layer in self.layers)

    @property
    def skipped(self) -> int:
        return sum(layer.skipped_total for layer in self.layers)

    @property
    def without_position(self) -> int:
        return sum(layer.without_position for layer in self.layers)

    def layer(self, name: str) -> LayerReport:
        for report in self.layers:
            if report.name == name:
                return report
        raise KeyError(f"no layer {name!r} in this replay")

    # ------------------------------------------------------------------ text
    def render(self) -> str:
        lines = [f"Replayed {self.bag} ({self.storage}, {self.distro} types) into {self.db_path}"]
        if self.bag_start is not None and self.bag_end is not None:
            lines.append(f"  bag time  {_clock(self.bag_start)} .. {_clock(self.bag_end)} "
                         f"({_duration(self.bag_end - self.bag_start)}), {self.messages_read} messages read")
        if self.stopped_early:
            lines.append(f"  STOPPED EARLY: {self.stopped_early} (everything read before it is stored)")
        odom = self.odometry
        odom_line = f"  odometry  {odom.topic}: {odom.messages} messages, {odom.accepted} poses used"
        if odom.rejected:
            odom_line += "; rejected: " + ", ".join(f"{n} {why}" for why, n in sorted(odom.rejected.items()))
        lines.append(odom_line)
        if self.frames is not None:
            lines.append(self._frames_line(self.frames))
        width = max([len(l.name) for l in self.layers] + [5])
        lines.append(f"  {'layer'.ljust(width)}  {'msgs':>6}  {'stored':>6}  {'thinned':>7}  {'skipped':>7}  "
                     f"{'no pos':>6}  topic")
        for layer in self.layers:
            lines.append(f"  {layer.name.ljust(width)}  {layer.messages:>6}  {layer.observations:>6}  "
                         f"{layer.dropped_by_intake:>7}  {layer.skipped_total:>7}  {layer.without_position:>6}  "
                         f"{layer.topic}{' (body)' if layer.internal else ''}")
        lines.append(f"  {'total'.ljust(width)}  {sum(l.messages for l in self.layers):>6}  {self.observations:>6}  "
                     f"{self.dropped_by_intake:>7}  {self.skipped:>7}  {self.without_position:>6}")
        if any(l.observations + l.dropped_by_intake > l.messages for l in self.layers):
            lines.append("  (stored and thinned count single detections and statuses: one message can hold several)")
        reasons = [(layer.name, why, n) for layer in self.layers for why, n in layer.skipped.items()]
        if reasons:
            lines.append("  skipped, and why:")
            reasons.sort(key=lambda r: -r[2])
            for name, why, n in reasons[:MAX_REASONS]:
                lines.append(f"    {name}: {n} × {why}")
            if len(reasons) > MAX_REASONS:
                rest = sum(r[2] for r in reasons[MAX_REASONS:])
                lines.append(f"    ... {rest} more in {len(reasons) - MAX_REASONS} other reasons")
        for layer in self.layers:
            if layer.camera is None and not layer.bearings and not layer.without_bearing:
                continue
            line = f"  bearings  {layer.name}: {layer.bearings} of {layer.observations} observations have a ray"
            if layer.camera is not None:
                line += f" (fx {layer.camera.fx:g}, cx {layer.camera.cx:g}, {layer.camera.width} px wide)"
            if layer.without_bearing:
                line += "; without: " + ", ".join(f"{n} {why}" for why, n in sorted(layer.without_bearing.items()))
            lines.append(line)
        if self.camera_infos:
            lines.append("  camera info  " + ", ".join(f"{t} ({n})" for t, n in sorted(self.camera_infos.items())))
        dropped = sum(l.object_position_dropped for l in self.layers)
        if dropped:
            lines.append(f"  {dropped} 3-D detections had no transform into the memory's frame: "
                         "stored at the robot's position (object position kept in metadata)")
        if self.missing_topics:
            lines.append("  no messages for: " + ", ".join(f"{l} ({t})" for l, t in self.missing_topics.items()))
        if self.ignored_topics:
            lines.append("  not subscribed (ignored): "
                         + ", ".join(f"{t} ({n})" for t, n in sorted(self.ignored_topics.items())))
        for note in self.notes:
            lines.append(f"  note: {note}")
        if self.consolidated:
            lines.append(f"  consolidation: {self.gists_created} gists and {self.entities_created} new entities "
                         f"({self.entities_merged} sightings merged into known ones)")
        else:
            lines.append("  consolidation: not run (--no-consolidate); gists and entities come later")
        lines.append(f"  memory now holds {self.observations_total} observations, {self.gists_total} gists, "
                     f"{self.entities_total} entities")
        lines.append(f"  took {self.wall_seconds:.1f} s")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def _frames_line(self, frames: FramesReport) -> str:
        line = (f"  frames    {frames.fixed_frame} <- {frames.base_frame} from TF: {frames.tf_messages} /tf and "
                f"{frames.static_messages} /tf_static messages, {frames.transforms} transforms taken")
        if frames.refused:
            line += "; refused: " + ", ".join(f"{n} {why}" for why, n in sorted(frames.refused.items()))
        if frames.jumps:
            line += f"; {frames.jumps} jump(s) not interpolated across"
        no_transform = sum(layer.no_transform for layer in self.layers)
        if no_transform:
            line += f"; {no_transform} observation(s) stored without a position (no transform in time)"
        return line


def _clock(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
