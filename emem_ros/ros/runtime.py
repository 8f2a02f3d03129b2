"""What the memory node does, as plain Python: the lifecycle node is a thin shell around it.

``MemoryRuntime`` holds the validated parameters, the open ``Memory``, the
shared ingest pipeline and the resolved message classes. Each lifecycle
transition of the node is one call here (``configure``, ``deactivate``,
``cleanup``); each subscription, timer and service callback is one method
that never raises. Keeping this out of ``node.py`` means everything but the
rclpy wiring is tested without a ROS runtime.

Configure order matters: parameters are validated and every message type is
resolved *before* the store is opened, so a typo in ``msg_type`` fails the
transition without touching the memory file; anything opened by a configure
that then fails is closed again.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol

from emem_ros.core.errors import EmemError
from emem_ros.ros import markers as marker_module
from emem_ros.ros import services
from emem_ros.ros.camera import CAMERA_INFO_TYPE
from emem_ros.ros.msgtypes import MessageFactory, MessageTypeError, resolve_type
from emem_ros.ros.params import NodeParams, ParamError, parse_params
from emem_ros.ros.pipeline import IngestOutcome, IngestPipeline

__all__ = ["ConfigureError", "MemoryRuntime", "TimerSpec", "ODOMETRY_TYPE", "TF_TYPE"]

ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
TF_TYPE = "tf2_msgs/msg/TFMessage"
TF_TICK = 1.0
"""Seconds between checks of the drafts waiting for transforms when no message arrives (every message and
transform checks them too)."""
ODOMETRY_SUPERSEDED = 50
"""Odometry poses /tf made redundant (it carries their odom -> base edge) before the node stops listening."""
WARM_WAIT = 60.0
"""Seconds cleanup waits for the configure-time catalog build before closing the store anyway."""


class Log(Protocol):
    def info(self, message: str) -> Any: ...

    def warning(self, message: str) -> Any: ...

    def error(self, message: str) -> Any: ...


class ConfigureError(EmemError):
    """Configure cannot complete; the message is the one log line an operator needs."""


@dataclass(frozen=True)
class TimerSpec:
    """A periodic job of the active node (period in seconds of the node's clock)."""

    name: str
    period: float
    tick: Callable[[], Any]


class MemoryRuntime:
    """The memory node's state and callbacks, without rclpy."""

    def __init__(self, clock: Callable[[], float], *, log: Optional[Log] = None,
                 build: Optional[Callable[[NodeParams, Callable[[], float]], Any]] = None,
                 resolve: Callable[[str], type] = resolve_type) -> None:
        self.clock = clock
        """Seconds on the node's clock (ROS time, so use_sim_time works); also the memory's clock."""
        self.log: Log = log or logging.getLogger("emem_ros.node")
        self._build = build
        self._resolve = resolve
        self.params: Optional[NodeParams] = None
        self.memory: Any = None
        self.pipeline: Optional[IngestPipeline] = None
        self.layer_types: dict[str, type] = {}
        self.odometry_type: Optional[type] = None
        self.camera_info_type: Optional[type] = None
        """sensor_msgs/CameraInfo, resolved when a layer has a camera_info_topic."""
        self.tf_type: Optional[type] = None
        """tf2_msgs/TFMessage, resolved when fixed_frame is set."""
        self._pending: dict[str, Future[Any]] = {}
        self._lock = threading.Lock()
        self._warming: Optional[threading.Thread] = None
        self.fleet: Any = None
        """The fleet sync worker when ``fleet.url`` is set (``emem_ros.fleet.worker``)."""
        self._published_markers: Optional[list[marker_module.MarkerSpec]] = None
        """What the last ``publish_changed_markers`` published (None: nothing yet, or a new memory)."""

    @property
    def configured(self) -> bool:
        return self.memory is not None

    # ------------------------------------------------------------------ lifecycle
    def configure(self, flat: dict[str, Any]) -> NodeParams:
        """Validate, resolve message types, open the memory; ``ConfigureError`` leaves nothing open."""
        if self.memory is not None:
            raise ConfigureError("the memory is already open; clean up before configuring again")
        try:
            params = parse_params(flat, strict_types=True)
        except ParamError as exc:
            raise ConfigureError(f"invalid parameters: {exc}") from None
        layer_types: dict[str, type] = {}
        for spec in params.layers:
            try:
                layer_types[spec.name] = self._resolve(spec.msg_type)
            except MessageTypeError as exc:
                raise ConfigureError(f"layer '{spec.name}' (layers.{spec.name}.msg_type): {exc}") from None
        try:
            odometry_type = self._resolve(ODOMETRY_TYPE)
        except MessageTypeError as exc:
            raise ConfigureError(f"odometry ({params.odom_topic}): {exc}") from None
        camera_info_type = None
        camera_layers = [spec for spec in params.layers if spec.camera.info_topic]
        if camera_layers:
            try:
                camera_info_type = self._resolve(CAMERA_INFO_TYPE)
            except MessageTypeError as exc:
                raise ConfigureError(f"layers.{camera_layers[0].name}.camera_info_topic: {exc}") from None
        tf_type = None
        if params.fixed_frame:
            try:
                tf_type = self._resolve(TF_TYPE)
            except MessageTypeError as exc:
                raise ConfigureError(f"fixed_frame {params.fixed_frame!r} needs TF ({params.tf_topic}): {exc} "
                                     "(install tf2_msgs, or set fixed_frame '' to use the odometry frame)") from None
        memory = self._open(params)
        try:
            pipeline = IngestPipeline(memory, params, warn=self.log.warning)
        except Exception:
            self._close_quietly(memory)
            raise
        memory.set_live_pose(pipeline.live_pose)  # get_current_context reports where the robot is now
        with self._lock:
            self.params, self.memory, self.pipeline = params, memory, pipeline
            self.layer_types, self.odometry_type = layer_types, odometry_type
            self.camera_info_type, self.tf_type = camera_info_type, tf_type
        self._warming = threading.Thread(target=self._warm, args=(memory,), name="emem-warm", daemon=True)
        self._warming.start()
        if params.fleet_url:
            self._start_fleet(params)
        return params

    def _start_fleet(self, params: NodeParams) -> None:
        """The fleet sync worker; a missing driver is logged, never a failed configure (the robot works alone)."""
        try:
            from emem_ros.fleet.worker import FleetSyncWorker

            self.fleet = FleetSyncWorker(params.memory.db_path, params.fleet_url, params.fleet_robot_id,
                                         max_seconds=max(1.0, params.fleet_sync_period), logger=self.log)
            self.fleet.start()
        except Exception as exc:
            self.fleet = None
            self.log.error(f"fleet sync disabled: {type(exc).__name__}: {exc}")

    def _warm(self, memory: Any) -> None:
        """Build the tools' text catalog now: after a reboot onto a large memory (about 1.5 s at a
        million observations) the first planner question should not be the one that waits for it."""
        try:
            memory.tools.warm()
        except Exception as exc:  # the first query builds it instead; nothing is lost
            if not getattr(memory, "closed", False):
                self.log.warning(f"warming the memory's query catalog failed ({type(exc).__name__}: {exc}); "
                                 "the first query will build it")
        self._check_frames(memory)

    def _check_frames(self, memory: Any) -> None:
        """Warn when the file holds positions in another frame than the memory's (a config moved from the
        odometry frame to map on an existing file): answers would mix two frames."""
        try:
            frame = memory.config.frame_id
            others = memory.store.reader().execute(
                "SELECT frame_id, COUNT(*) FROM observations WHERE x IS NOT NULL AND frame_id IS NOT NULL "
                "AND frame_id != ? GROUP BY frame_id", (frame,)).fetchall()
        except Exception:  # a closed or foreign store: nothing to say
            return
        if others:
            found = ", ".join(f"{n} in '{name}'" for name, n in others)
            self.log.warning(f"this memory file holds positions in other frames than '{frame}' ({found}): answers "
                             "compare them as if they were in one frame. Start a new db_path when changing "
                             "fixed_frame, or keep the old one")

    def wait_warm(self, timeout: Optional[float] = None) -> bool:
        """True once the catalog built at configure is ready (or there is none to wait for)."""
        thread = self._warming
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _open(self, params: NodeParams) -> Any:
        build = self._build
        if build is None:
            from emem_ros.ros.factory import build_memory

            build = build_memory
        try:
            return build(params, self.clock)
        except EmemError as exc:
            raise ConfigureError(f"db_path: cannot open the memory at {params.memory.db_path}: {exc}") from None
        except (OSError, ImportError, RuntimeError, ValueError) as exc:
            raise ConfigureError(f"db_path: cannot open the memory at {params.memory.db_path} "
                                 f"({type(exc).__name__}: {exc})") from None

    def deactivate(self) -> int:
        """Intake has stopped (the node destroyed its subscriptions): store what is buffered."""
        if self.memory is None:
            return 0
        if self.pipeline is not None:
            self.pipeline.finish()  # no transform comes to an inactive node: store what waits
        flushed: int = self.memory.flush()
        return flushed

    def cleanup(self) -> None:
        """Close the memory (final flush, index save). State is cleared even if closing fails."""
        self.wait_warm(WARM_WAIT)  # never close the store under the warming thread's feet
        fleet, self.fleet = self.fleet, None
        if fleet is not None:
            fleet.close()
        with self._lock:
            memory, self.memory = self.memory, None
            pipeline = self.pipeline
            self.params, self.pipeline = None, None
            self.layer_types, self.odometry_type = {}, None
            self.camera_info_type, self.tf_type = None, None
            self._pending.clear()
            self._published_markers = None
        if pipeline is not None:
            self._guard_finish(pipeline, memory)
            self.log.info(intake_report(pipeline.counts()))
        if memory is not None:
            memory.close()

    def _guard_finish(self, pipeline: IngestPipeline, memory: Any) -> None:
        if memory is None or getattr(memory, "closed", False):
            return
        try:
            pipeline.finish()
        except Exception as exc:
            self.log.error(f"storing the drafts that waited for a transform failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _close_quietly(memory: Any) -> None:
        try:
            memory.close()
        except Exception:
            logging.getLogger(__name__).exception("closing the memory after a failed configure failed")

    # ------------------------------------------------------------------ intake
    def on_message(self, layer: str, msg: Any) -> Optional[IngestOutcome]:
        """A layer message, stamped on arrival with the node's clock; never raises."""
        pipeline = self.pipeline
        if pipeline is None:
            return None
        try:
            return pipeline.on_message(layer, msg, self.clock())
        except Exception as exc:  # the pipeline does not raise; this guards the executor anyway
            self.log.error(f"layer {layer}: message dropped ({type(exc).__name__}: {exc})")
            return None

    def on_odometry(self, msg: Any) -> bool:
        pipeline = self.pipeline
        if pipeline is None:
            return False
        try:
            return pipeline.on_odometry(msg, self.clock())
        except Exception as exc:
            self.log.error(f"odometry dropped ({type(exc).__name__}: {exc})")
            return False

    def on_tf(self, msg: Any, static: bool) -> int:
        """A TFMessage from tf_topic / tf_static_topic (fixed_frame set); never raises."""
        pipeline = self.pipeline
        if pipeline is None:
            return 0
        try:
            return pipeline.on_tf(msg, static=static, receive_time=self.clock())
        except Exception as exc:
            self.log.error(f"transforms dropped ({type(exc).__name__}: {exc})")
            return 0

    def tf_tick(self) -> None:
        """Store the drafts that waited tf_timeout for their transform (messages may have stopped)."""
        pipeline = self.pipeline
        if pipeline is None:
            return
        try:
            pipeline.expire(self.clock())
        except Exception as exc:
            self.log.error(f"placing drafts that waited for a transform failed ({type(exc).__name__}: {exc})")

    def intake_timers(self) -> list[TimerSpec]:
        """Periodic jobs of the intake callback group (with fixed_frame: the transform wait)."""
        params = self.params
        if params is None or not params.fixed_frame or params.tf_timeout <= 0:
            return []
        return [TimerSpec("tf_wait", TF_TICK, self.tf_tick)]

    def odometry_redundant(self) -> bool:
        """With a fixed frame: /tf carries the odometry's edge (odom -> base), so the odometry topic adds
        nothing but callbacks (the node then unsubscribes it)."""
        pipeline = self.pipeline
        if pipeline is None or not pipeline.placer.uses_tf:
            return False
        return pipeline.transforms.stats().odometry_superseded >= ODOMETRY_SUPERSEDED

    def on_camera_info(self, topic: str, msg: Any) -> bool:
        """A CameraInfo for the layers whose camera_info_topic this is; never raises."""
        pipeline = self.pipeline
        if pipeline is None:
            return False
        try:
            return pipeline.on_camera_info(topic, msg)
        except Exception as exc:
            self.log.error(f"camera info on {topic} dropped ({type(exc).__name__}: {exc})")
            return False

    # ------------------------------------------------------------------ queries
    def answer(self, service: str, request: Any, response: Any, make: MessageFactory) -> Any:
        """One service call (see ``services.handle``); never raises."""
        return services.handle(self.memory, service, request, response, make)

    # ------------------------------------------------------------------ timers
    def timers(self) -> list[TimerSpec]:
        """The periodic jobs the parameters switch on (a period of 0 switches one off)."""
        params = self.params
        if params is None:
            return []
        wanted = [
            TimerSpec("flush", params.flush_period, self.flush_tick),
            TimerSpec("consolidation", params.consolidation_period, self.consolidation_tick),
            TimerSpec("archive", params.archive_period, self.archive_tick),
            TimerSpec("index_save", params.index_save_period, self.index_save_tick),
        ]
        if self.fleet is not None:
            wanted.append(TimerSpec("fleet_sync", params.fleet_sync_period, self.fleet_sync_tick))
        return [t for t in wanted if t.period > 0]

    def fleet_sync_tick(self) -> None:
        """Start a fleet sync on its worker thread and return (ticks during a running sync are dropped)."""
        fleet = self.fleet
        if fleet is not None:
            fleet.trigger()

    def flush_tick(self) -> None:
        self._guard("flush", lambda memory: memory.flush())

    def index_save_tick(self) -> None:
        self._guard("index save", lambda memory: memory.store.save_indexes())

    def consolidation_tick(self) -> None:
        """Queue entity extraction and time-window gists on the consolidation worker; returns at once.

        What is still buffered is stored first, so the pass sees everything up to now.
        """
        self.flush_tick()
        self._submit("entities")
        self._submit("time_window")

    def archive_tick(self) -> None:
        self._submit("archive")

    def _submit(self, job: str) -> None:
        def queue(memory: Any) -> None:
            future = memory.submit_job(job)
            with self._lock:
                if self._pending.get(job) is future:
                    return  # the previous tick's job is still queued: ticks coalesce
                self._pending[job] = future
            future.add_done_callback(lambda f: self._report(job, f))

        self._guard(f"queueing {job}", queue)

    def _report(self, job: str, future: Future[Any]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None and self.memory is not None:
            self.log.error(f"consolidation job '{job}' failed: {type(error).__name__}: {error}")

    def pending_jobs(self) -> dict[str, Future[Any]]:
        with self._lock:
            return dict(self._pending)

    def _guard(self, what: str, action: Callable[[Any], Any]) -> None:
        memory = self.memory
        if memory is None or getattr(memory, "closed", False):
            return
        try:
            action(memory)
        except Exception as exc:  # a timer must survive anything; the data stays buffered or queued
            self.log.error(f"{what} failed: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ markers
    def marker_specs(self) -> list[marker_module.MarkerSpec]:
        memory = self.memory
        if memory is None or getattr(memory, "closed", False):
            return []
        try:
            return marker_module.marker_specs(memory)
        except Exception as exc:
            self.log.error(f"reading entities and gists for markers failed: {type(exc).__name__}: {exc}")
            return []

    def publish_changed_markers(self, make: MessageFactory, publish: Callable[[Any], None]) -> bool:
        """Publish the MarkerArray (DELETEALL first, then entities and gists) if what it shows changed since
        the last one published; whether it did.

        The publisher is latched (transient local), so a subscriber that joins later still gets the last
        array; sending the same markers again would only cost CPU (up to 800 messages built each time).
        An array whose ``publish`` raised counts as not sent: the next call tries again.
        """
        specs = self.marker_specs()
        if specs == self._published_markers:
            return False
        frame = self.params.memory.frame_id if self.params is not None else ""
        publish(marker_module.to_marker_array(specs, make, stamp=self.clock(), frame=frame))
        self._published_markers = specs
        return True


def intake_report(counts: dict[str, Any]) -> str:
    """One log line: what became of each layer's messages since configure (a replay's summary, live)."""
    parts = [f"{name} {c.messages} message(s) -> {c.observations} stored, {c.dropped_by_intake} thinned, "
             f"{sum(c.skipped.values())} skipped" for name, c in counts.items()]
    return "intake since configure: " + ("; ".join(parts) or "no layers")
