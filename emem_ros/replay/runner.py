"""Replay a bag into a memory through the node's own ingest path, in bag time.

Each message goes where the live node would send it: the odometry topic to
``IngestPipeline.on_odometry``, a layer's topic to ``on_message`` (adapter,
intake policy, pose interpolated at the message stamp, ``Memory.add_draft``).
The memory's clock is the bag's: it reads the time of the message being
replayed, so relative times, intake periods and consolidation windows mean
what they would have meant on the robot.

The memory is opened without background threads (no timed flushes, index
saves or maintenance): the replay flushes when the working memory fills and
once at the end, so a .db3 and an .mcap of the same recording give the same
rows.

Final consolidation. Live, time-window consolidation only touches
observations older than ``consolidation_window`` and leaves a visit still in
progress open. After a bag nothing is in progress any more: the recording has
ended. So the final pass extracts entities with ``final=True`` (closing the
last visit) and then runs time-window consolidation with the clock moved past
the end of the bag by ``consolidation_window + consolidation_time_gap`` (plus
a second), which makes every observation of the bag old enough and closes the
last cluster. The clock then goes back to the last bag time. Archival is not
run: it counts from promotion, in wall-clock terms of the robot's life, and a
replayed memory should keep its raw observations.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TextIO, Union

from emem_ros.core.errors import EmemError
from emem_ros.replay.bagreader import BagError, BagInfo, BagReader
from emem_ros.replay.decoder import DecodeError, Decoder
from emem_ros.replay.progress import make_progress
from emem_ros.replay.summary import FramesReport, LayerReport, OdometryReport, ReplaySummary
from emem_ros.replay.typestore import DISTROS, load_typestore
from emem_ros.ros.distro import typestore_distro
from emem_ros.ros.params import NodeParams
from emem_ros.ros.pipeline import IngestPipeline

log = logging.getLogger(__name__)

ODOMETRY = "\0odometry"
"""Route of the odometry topic (not a valid layer name, so it cannot clash with one)."""
CAMERA_INFO = "\0camera:"
"""Route prefix of a CameraInfo topic (followed by the topic)."""
TF = "\0tf"
TF_STATIC = "\0tf_static"
"""Routes of the TF topics (used when the parameters name a fixed frame)."""


class ReplayError(EmemError):
    """The replay cannot start (bag, parameters or memory file); nothing was written."""


@dataclass
class ReplayOptions:
    db_path: Optional[str] = None
    """Memory file to write; None = the params' db_path."""
    append: bool = False
    """Add to an existing memory file instead of refusing to touch it."""
    consolidate: bool = True
    distro: str = "auto"
    """Typestore: 'humble', 'jazzy', or 'auto' (the bag's recorded distro, else humble)."""
    progress: bool = True
    progress_stream: Optional[TextIO] = None


class BagClock:
    """The memory's clock during a replay: the bag time of the message being replayed."""

    def __init__(self, start: float) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now


def replay_params(params: NodeParams, db_path: Optional[str] = None) -> NodeParams:
    """The node's parameters with the memory's own threads off (the replay flushes itself)."""
    memory = dataclasses.replace(params.memory, flush_interval=0.0, index_save_interval=0.0,
                                 maintenance_interval=0.0)
    if db_path is not None:
        memory.db_path = str(db_path)
    return dataclasses.replace(params, memory=memory)


def resolve_distro(requested: str, recorded: Optional[str]) -> str:
    choice = (requested or "auto").strip().lower()
    if choice == "auto":
        return typestore_distro(recorded)
    if choice not in DISTROS:
        raise ReplayError(f"--distro must be auto, {' or '.join(DISTROS)}; got {requested!r}")
    return choice


def replay_bag(bag: Union[str, Path], params: NodeParams, options: Optional[ReplayOptions] = None, *,
               memory: Any = None) -> ReplaySummary:
    """Replay ``bag`` into a new memory file (or ``memory``, left open) and say what happened.

    A ``memory`` passed in is left open with the bag's clock (at the last bag
    time); call its ``set_clock`` to go back to live time.

    Raises ``ReplayError``/``BagError`` before writing anything when the bag
    cannot be opened or the memory file already exists (without ``append``).
    A bag damaged half-way stops the replay; what was read is kept, consolidated
    and reported (``summary.stopped_early``).
    """
    options = options or ReplayOptions()
    started = time.perf_counter()
    params = replay_params(params, options.db_path)
    db_path = Path(params.memory.db_path)
    with BagReader(bag) as reader:
        info = reader.info()
        distro = resolve_distro(options.distro, info.ros_distro)
        decoder = Decoder(load_typestore(distro), distro)
        routes, ignored = _routes(reader.connections, params)
        summary = _empty_summary(info, params, distro, str(db_path) if memory is None else _memory_path(memory))
        summary.ignored_topics = ignored
        present = {conn.topic for conn in reader.connections}
        summary.missing_topics = {spec.name: spec.topic for spec in params.layers if spec.topic not in present}
        for spec in params.layers:
            info_topic = spec.camera.info_topic
            if info_topic and info_topic not in present and spec.topic in present:
                fallback = ("the camera.fx parameters are used" if spec.camera.intrinsics() is not None
                            else "its detections keep no bearing (stored at the robot's pose)")
                summary.notes.append(f"layer {spec.name}: the bag has no CameraInfo on {info_topic}; {fallback}")
        if params.fixed_frame and params.tf_topic not in present:
            summary.notes.append(f"the bag has no {params.tf_topic}: with fixed_frame {params.fixed_frame!r} nothing "
                                 "can be placed from TF; observations get no position (set fixed_frame '' to "
                                 "use the odometry frame)")
        elif not params.fixed_frame and params.tf_topic in present:
            summary.notes.append(f"the bag has {params.tf_topic}, but fixed_frame is empty: positions stay in the "
                                 "odometry frame (set fixed_frame, e.g. 'map', to place them from TF)")
        if params.odom_topic not in present and not params.fixed_frame:
            summary.notes.append(f"the bag has no odometry on {params.odom_topic}: observations get no position "
                                 "unless a 3-D detection carries one")
        clock = BagClock(info.start)
        own_memory = memory is None
        if own_memory:
            _check_target(db_path, options.append)
            from emem_ros.ros.factory import build_memory

            memory = build_memory(params, get_current_time=clock, db_path=str(db_path))
        else:
            memory.set_clock(clock)
        try:
            _feed(reader, decoder, routes, memory, params, clock, summary, options)
            summary.notes.extend(decoder.notes)
            memory.flush()
            if options.consolidate:
                _consolidate(memory, clock, summary)
            counts = memory.store.counts()
            summary.observations_total = counts["observations"]
            summary.gists_total = counts["gists"]
            summary.entities_total = counts["entities"]
        finally:
            if own_memory:
                memory.close()
    summary.wall_seconds = time.perf_counter() - started
    return summary


# ---------------------------------------------------------------------- steps
def _routes(connections: list[Any], params: NodeParams) -> tuple[dict[int, str], dict[str, int]]:
    """connection id -> layer name (or ODOMETRY); topics nobody subscribes -> message counts."""
    by_topic = {spec.topic: spec.name for spec in params.layers}
    cameras = {spec.camera.info_topic for spec in params.layers if spec.camera.info_topic}
    routes: dict[int, str] = {}
    ignored: Counter[str] = Counter()
    for conn in connections:
        if params.fixed_frame and conn.topic in (params.tf_topic, params.tf_static_topic):
            routes[conn.id] = TF if conn.topic == params.tf_topic else TF_STATIC
        elif conn.topic == params.odom_topic:
            routes[conn.id] = ODOMETRY
        elif conn.topic in cameras:
            routes[conn.id] = CAMERA_INFO + conn.topic
        elif conn.topic in by_topic:
            routes[conn.id] = by_topic[conn.topic]
        else:
            ignored[conn.topic] += int(conn.msgcount)
    return routes, dict(ignored)


def _check_target(db_path: Path, append: bool) -> None:
    if db_path.exists() and not append:
        raise ReplayError(f"{db_path} already exists; pass --append to add this bag to it, "
                          "or choose another --db")
    if not db_path.parent.exists():
        raise ReplayError(f"the folder of the memory file does not exist: {db_path.parent}")


def _feed(reader: BagReader, decoder: Decoder, routes: dict[int, str], memory: Any, params: NodeParams,
          clock: BagClock, summary: ReplaySummary, options: ReplayOptions) -> None:
    pipeline = IngestPipeline(memory, params, warn=log.info)  # the summary reports every skip reason
    wanted = [conn for conn in reader.connections if conn.id in routes]
    total = sum(int(conn.msgcount) for conn in wanted)
    progress = make_progress(total, options.progress, options.progress_stream)
    decode_skips: dict[str, Counter[str]] = {}
    odom_accepted = 0
    tf_messages = {TF: 0, TF_STATIC: 0}
    camera_infos: dict[str, int] = {}
    first: Optional[float] = None
    last: Optional[float] = None
    try:
        for conn, stamp_ns, raw in reader.messages(wanted):
            t = stamp_ns * 1e-9
            if first is None:
                first = t
            last = t
            clock.now = t
            summary.messages_read += 1
            route = routes[conn.id]
            if route in tf_messages:  # the node reads /tf raw: the same bytes, the same parser
                tf_messages[route] += 1
                pipeline.on_tf(raw, static=route == TF_STATIC, receive_time=t)
                progress.update()
                continue
            try:
                msg = decoder.decode(conn, raw)
            except DecodeError as exc:
                decode_skips.setdefault(route, Counter())[str(exc)] += 1
            else:
                if route == ODOMETRY:
                    odom_accepted += bool(pipeline.on_odometry(msg, t))
                elif route.startswith(CAMERA_INFO):
                    topic = route[len(CAMERA_INFO):]
                    camera_infos[topic] = camera_infos.get(topic, 0) + 1
                    pipeline.on_camera_info(topic, msg)
                else:
                    pipeline.on_message(route, msg, t)
            progress.update()
    except BagError as exc:
        summary.stopped_early = str(exc)
        log.error("%s", exc)
    finally:
        progress.close()
        pipeline.finish()  # the recording has ended: no transform is still coming
    summary.bag_start, summary.bag_end = first, last
    if summary.stopped_early is None and summary.messages_read < total:
        # rosbags' mcap reader ends quietly at a damaged chunk: the bag's own counts reveal it.
        summary.stopped_early = (f"read {summary.messages_read} of the {total} messages the bag lists on the "
                                 "subscribed topics; the rest could not be read (damaged, or still being written?)")
    _fill_reports(summary, pipeline, decode_skips, odom_accepted)
    summary.camera_infos = camera_infos
    if summary.frames is not None:
        stats = pipeline.transforms.stats()
        summary.frames.tf_messages, summary.frames.static_messages = tf_messages[TF], tf_messages[TF_STATIC]
        summary.frames.transforms = stats.accepted
        summary.frames.refused = dict(stats.rejected)
        summary.frames.jumps = stats.jumps


def _fill_reports(summary: ReplaySummary, pipeline: IngestPipeline, decode_skips: dict[str, Counter[str]],
                  odom_accepted: int) -> None:
    counts = pipeline.counts()
    for report in summary.layers:
        c = counts[report.name]
        failed = decode_skips.get(report.name, Counter())
        report.messages = c.messages + sum(failed.values())
        report.observations = c.observations
        report.dropped_by_intake = c.dropped_by_intake
        report.without_position = c.without_position
        report.object_position_dropped = c.object_position_dropped
        report.no_transform = c.no_transform
        report.skipped = dict(c.skipped + failed)
        report.bearings = c.bearings
        report.without_bearing = dict(c.without_bearing)
        camera = pipeline.cameras.get(report.name)
        report.camera = camera.intrinsics if camera is not None else None
    stats = pipeline.poses.stats()
    odom = summary.odometry
    failed = decode_skips.get(ODOMETRY, Counter())
    odom.accepted = odom_accepted
    if pipeline.placer.uses_tf:
        odometry = pipeline.odometry_counts()
        superseded = pipeline.transforms.stats().odometry_superseded
        odom.messages = odometry.messages + sum(failed.values())
        refused = odometry.messages - odometry.accepted - superseded
        odom.rejected = dict(Counter(failed) + Counter({"malformed, NaN or refused": refused} if refused else {}))
        if superseded:
            summary.notes.append(f"{superseded} odometry poses not needed: {pipeline.params.tf_topic} carries "
                                 "their odom -> base edge")
        return
    odom.messages = odom_accepted + stats.malformed + stats.rejected_nonfinite + stats.rejected_frame \
        + sum(failed.values())
    rejected: Counter[str] = Counter(failed)
    if stats.malformed + stats.rejected_nonfinite:
        rejected["malformed, unstamped or not finite (NaN)"] += stats.malformed + stats.rejected_nonfinite
    if stats.rejected_frame:
        rejected[f"not in frame {pipeline.params.odom_frame!r}"] += stats.rejected_frame
    odom.rejected = dict(rejected)
    if stats.time_jumps:
        summary.notes.append(f"odometry time jumped back {stats.time_jumps} time(s); pose history restarted")


def _consolidate(memory: Any, clock: BagClock, summary: ReplaySummary) -> None:
    """Entities (closing the last visit), then gists over the whole bag; see the module docstring."""
    end = clock.now
    config = memory.config
    entities = memory.extract_entities(final=True)
    clock.now = end + float(config.consolidation_window) + float(config.consolidation_time_gap) + 1.0
    try:
        gists = memory.consolidate_time_window()
    finally:
        clock.now = end
    summary.consolidated = True
    summary.entities_created = entities.created
    summary.entities_merged = entities.merged
    summary.gists_created = gists.gists
    if not (entities.complete and gists.complete):
        summary.notes.append("consolidation was interrupted; the rest runs when the memory is next maintained")


def _empty_summary(info: BagInfo, params: NodeParams, distro: str, db_path: str) -> ReplaySummary:
    layers = [LayerReport(spec.name, spec.topic, spec.msg_type, spec.is_internal_state) for spec in params.layers]
    frames = FramesReport(params.fixed_frame, params.base_frame) if params.fixed_frame else None
    return ReplaySummary(bag=str(info.path), storage=info.storage, db_path=db_path, distro=distro, layers=layers,
                         odometry=OdometryReport(params.odom_topic), frames=frames)


def _memory_path(memory: Any) -> str:
    config = getattr(memory, "config", None)
    return str(getattr(config, "db_path", "memory"))
