"""The memory as a ROS 2 lifecycle node (rclpy): the only module that imports rclpy.

A thin shell around ``MemoryRuntime`` (plain Python, tested without ROS):
this module declares parameters, creates and destroys subscriptions,
services, timers and the marker publisher, and turns every transition's
exception into a logged FAILURE (rclpy would otherwise swallow it).

- configure: declare the layer parameters named by ``layer_names``, validate
  everything (``parse_params``, rclpy's strict types), resolve every message
  and service type, open the memory with the node's clock as its clock
  (``use_sim_time`` works). A failure leaves the node unconfigured, the store
  closed, and one error line saying why.
- activate: subscriptions (intake callback group), services ``~/<tool>``
  (query group), timers and markers (maintenance group).
- deactivate: destroy them, flush. cleanup / shutdown: close the memory.

``main()`` spins a MultiThreadedExecutor; SIGINT (or SIGTERM) flushes and
closes the memory and exits with code 0. It installs its own handlers instead
of rclpy's: rclpy's shut the context down on the signal, so the closing log
lines could no longer reach /rosout, and a second SIGINT (a terminal's Ctrl-C
reaches both `ros2 launch` and the node) raised KeyboardInterrupt mid-close.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
import signal
import threading
import traceback
from typing import Any, Callable, Optional

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterUninitializedException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions

from emem_ros.ros import distro
from emem_ros.ros import services as service_table
from emem_ros.ros.msgtypes import ImportingFactory, MessageTypeError, resolve_type
from emem_ros.ros.params import declarations, layer_declarations
from emem_ros.ros.runtime import ConfigureError, MemoryRuntime

__all__ = ["MemoryNode", "main"]

NODE_NAME = "memory"
MARKER_TOPIC = "~/markers"
MARKER_ARRAY = "visualization_msgs/msg/MarkerArray"
ODOM_QOS_DEPTH = 50
TF_QOS_DEPTH = 100
ODOMETRY_CHECK_EVERY = 50
"""Odometry messages between checks whether /tf made the odometry subscription redundant."""
CAMERA_INFO_QOS_DEPTH = 5


class _Log:
    """The node's rclpy logger behind the small interface the runtime uses; remembers the last error."""

    def __init__(self, logger: Any) -> None:
        self._logger = logger
        self.last_error = ""

    def info(self, message: str) -> None:
        self._logger.info(message)

    def warning(self, message: str) -> None:
        self._logger.warning(message)

    def error(self, message: str) -> None:
        self.last_error = message
        self._logger.error(message)


class _ForwardToRos(logging.Handler):
    """Warnings and errors of the memory core (Python logging) also reach the ROS log."""

    def __init__(self, log: _Log) -> None:
        super().__init__(level=logging.WARNING)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"[{record.name}] {record.getMessage()}"
            if record.levelno >= logging.ERROR:
                self._log._logger.error(text)  # not last_error: that is the transitions' own
            else:
                self._log.warning(text)
        except Exception:  # logging must never raise into the caller
            pass


def _qos(depth: int, reliability: str) -> QoSProfile:
    policy = ReliabilityPolicy.BEST_EFFORT if reliability == "best_effort" else ReliabilityPolicy.RELIABLE
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=int(depth), reliability=policy)


class _TfListener:
    """/tf, /tf_static and the odometry on a node and executor of their own, spun on one thread, as
    tf2_ros's ``TransformListener(spin_thread=True)`` does (with a fixed frame).

    A robot's /tf is its busiest topic (50-100 Hz and more). Through the memory node's own executor every
    message would wake a wait set holding all its services, timers and subscriptions; here it wakes three
    subscriptions, and /tf comes raw (CDR bytes) to the memory's own parser (``emem_ros.frames.cdr``, what
    replay uses too). QoS as tf2_ros's listener: /tf reliable and volatile, /tf_static reliable and
    transient local (latched). The odometry feeds the odom -> base edge only while /tf lacks it; once
    /tf carries it the subscription is dropped, from its own callback on this executor's only thread (no
    other thread can be taking from it then). The callbacks feed the pipeline, which takes its own locks.
    """

    def __init__(self, parent: "MemoryNode", runtime: MemoryRuntime, tf_topic: str, static_topic: str,
                 odom_topic: str) -> None:
        name = f"{parent.get_name()}_tf_listener"
        # Its own __node remap: launch's `name=` renames every node of the process (-r __node:=memory), and
        # two nodes of one name clash. Topic remaps (-r /tf:=/robot1/tf) still apply.
        self.node = rclpy.create_node(name, namespace=parent.get_namespace(), context=parent.context,
                                      start_parameter_services=False,
                                      cli_args=["--ros-args", "-r", f"__node:={name}"])
        self.runtime, self.log, self.odom_topic = runtime, parent._log, odom_topic
        dynamic = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=TF_QOS_DEPTH, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=TF_QOS_DEPTH, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.node.create_subscription(runtime.tf_type, tf_topic, lambda msg: runtime.on_tf(msg, False), dynamic,
                                      raw=True)
        self.node.create_subscription(runtime.tf_type, static_topic, lambda msg: runtime.on_tf(msg, True), latched,
                                      raw=True)
        self.odometry: Any = self.node.create_subscription(runtime.odometry_type, odom_topic, self._on_odometry,
                                                           _qos(ODOM_QOS_DEPTH, "best_effort"))
        self._odometry_seen = 0
        self.executor = SingleThreadedExecutor(context=parent.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, name="memory-tf", daemon=True)
        self.thread.start()

    def _on_odometry(self, msg: Any) -> None:
        self.runtime.on_odometry(msg)
        self._odometry_seen += 1
        if self._odometry_seen % ODOMETRY_CHECK_EVERY == 0 and self.runtime.odometry_redundant():
            self.node.destroy_subscription(self.odometry)
            self.odometry = None
            self.log.info(f"{self.odom_topic} unsubscribed: /tf carries its odom -> base transform "
                          "(positions come from TF)")

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # shut down under it (deactivate, process exit): nothing left to do
            pass

    def close(self) -> None:
        try:
            self.executor.shutdown(timeout_sec=2.0)
        finally:
            self.thread.join(timeout=5.0)
            self.node.destroy_node()


class MemoryNode(LifecycleNode):  # type: ignore[misc]  # rclpy has no type information
    """Lifecycle node `memory`: layers in, services out, consolidation on timers."""

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._log = _Log(self.get_logger())
        self._forward = _ForwardToRos(self._log)
        logging.getLogger("emem_ros").addHandler(self._forward)
        self.runtime = MemoryRuntime(self._now, log=self._log)
        self._make = ImportingFactory()
        self._intake_group = MutuallyExclusiveCallbackGroup()
        self._query_group = MutuallyExclusiveCallbackGroup()
        self._maintenance_group = MutuallyExclusiveCallbackGroup()
        self._srv_types: dict[str, type] = {}
        self._marker_type: Optional[type] = None
        self._memory_subscriptions: list[Any] = []
        self._memory_services: list[Any] = []
        self._memory_timers: list[Any] = []
        self._marker_publisher: Any = None
        self._tf_listener: Optional[_TfListener] = None
        self._declare_errors: dict[str, str] = {}
        """Parameter name -> why rclpy refused to declare it (a params-file type clash)."""
        for name, default, type_name, description in declarations():
            self._declare(name, default, type_name, description)
        self._answer_invalid_transitions()

    def _answer_invalid_transitions(self) -> None:
        """An invalid transition request gets success=False, not silence.

        Humble's rclpy raises inside its change_state callback when the transition
        is not valid from the current state (e.g. activate while unconfigured), so
        the caller (`ros2 lifecycle set`, launch) never hears back.
        """
        service = getattr(self, "_service_change_state", None)
        if service is None:
            return
        answer = service.callback

        def guarded(request: Any, response: Any) -> Any:
            try:
                return answer(request, response)
            except Exception as exc:
                label = request.transition.label or f"id {request.transition.id}"
                self._log.warning(f"transition {label} refused in state '{self._state_label()}': {exc}")
                response.success = False
                return response

        service.callback = guarded

    def _state_label(self) -> str:
        try:
            return str(self._state_machine.current_state[1])
        except Exception:
            return "unknown"

    # ------------------------------------------------------------------ clock
    def _now(self) -> float:
        """The node's clock in seconds: ROS time, simulated when use_sim_time is set."""
        seconds: float = self.get_clock().now().nanoseconds * 1e-9
        return seconds

    @property
    def last_error(self) -> str:
        """The last error this node logged (a failed transition says why here too)."""
        return self._log.last_error

    # ------------------------------------------------------------------ parameters
    def _declare(self, name: str, default: Any, type_name: str, description: str) -> None:
        """Declare one parameter with its explicit type; a params-file type clash is kept for configure."""
        if self.has_parameter(name):
            return
        descriptor = ParameterDescriptor(description=description)
        try:
            if type_name == "STRING_ARRAY" and not default:
                # An empty list default would be typed BYTE_ARRAY: declare the type itself.
                self.declare_parameter(name, Parameter.Type.STRING_ARRAY, descriptor)
            else:
                self.declare_parameter(name, default, descriptor)
        except Exception as exc:  # InvalidParameterTypeException & co: report at configure, do not crash
            hint = " (write doubles with a decimal point, e.g. 1.0)" if type_name == "DOUBLE" else ""
            self._declare_errors[name] = f"parameter {name}: {exc}{hint}"

    def _value(self, name: str, default: Any) -> Any:
        try:
            value = self.get_parameter(name).value
        except ParameterUninitializedException:
            return list(default) if isinstance(default, list) else default
        if value is None:
            return list(default) if isinstance(default, list) else default
        return list(value) if isinstance(value, (list, tuple)) else value

    def _read_parameters(self) -> dict[str, Any]:
        """Every parameter of ours as a flat dict, layer parameters declared first."""
        flat: dict[str, Any] = {}
        for name, default, _, _ in declarations():
            if self.has_parameter(name):
                flat[name] = self._value(name, default)
        layer_names = flat.get("layer_names") or []
        for layer in layer_names:
            if not isinstance(layer, str) or not layer.strip():
                continue  # parse_params names the bad entry
            for name, default, type_name, description in layer_declarations(layer.strip()):
                self._declare(name, default, type_name, description)
                if self.has_parameter(name):
                    flat[name] = self._value(name, default)
        self._warn_unused_overrides(flat)
        return flat

    def _warn_unused_overrides(self, flat: dict[str, Any]) -> None:
        overrides = getattr(self, "_parameter_overrides", None) or {}
        for name in overrides:
            if name in flat or distro.is_ros_parameter(name):
                continue
            if name.startswith("layers."):
                layer = name.split(".")[1] if name.count(".") >= 2 else ""
                self._log.warning(f"parameter {name} is ignored: layer '{layer}' is not in layer_names")
            else:
                close = difflib.get_close_matches(name, list(flat), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                self._log.warning(f"parameter {name} is ignored: the memory node has no such parameter{hint}")

    # ------------------------------------------------------------------ transitions
    def _transition(self, name: str, action: Callable[[], None],
                    on_failure: Optional[Callable[[], None]] = None) -> TransitionCallbackReturn:
        try:
            action()
            return TransitionCallbackReturn.SUCCESS
        except ConfigureError as exc:
            self._log.error(f"{name} failed: {exc}")
        except Exception as exc:
            self._log.error(f"{name} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        if on_failure is not None:
            try:
                on_failure()
            except Exception as exc:
                self._log.error(f"cleaning up after the failed {name} failed: {type(exc).__name__}: {exc}")
        return TransitionCallbackReturn.FAILURE

    def on_configure(self, state: Any) -> TransitionCallbackReturn:
        return self._transition("configure", self._configure, on_failure=self.runtime.cleanup)

    def _configure(self) -> None:
        flat = self._read_parameters()
        if self._declare_errors:
            raise ConfigureError("; ".join(self._declare_errors.values())
                                 + " — fix the params file and restart the node (declared types cannot change)")
        srv_types = {}
        for spec in service_table.SERVICES:
            try:
                srv_types[spec.name] = resolve_type(spec.srv_type, kind="srv")
            except MessageTypeError as exc:
                raise ConfigureError(
                    f"service {spec.name}: {exc} (is emem_ros built and its install sourced?)") from None
        marker_type = None
        if flat.get("markers_enabled", True):
            try:
                marker_type = resolve_type(MARKER_ARRAY)
            except MessageTypeError as exc:
                raise ConfigureError(f"markers (markers_enabled): {exc}") from None
        # Types first, store last: a typo must not open (or create) the memory file.
        params = self.runtime.configure(flat)
        self._srv_types, self._marker_type = srv_types, marker_type
        layers = ", ".join(f"{s.name} <- {s.topic} [{s.msg_type}]" for s in params.layers) or "none"
        self._log.info(f"memory open at {params.memory.db_path} (embedding: {params.embedding_backend}"
                       f"{' ' + params.embedding_model if params.embedding_model else ''}); layers: {layers}; "
                       + (f"positions in {params.fixed_frame} from TF ({params.fixed_frame} <- {params.base_frame}, "
                          f"{params.tf_topic}, {params.tf_static_topic}; odometry <- {params.odom_topic} where /tf "
                          "lacks odom -> base)" if params.fixed_frame else
                          f"positions in the odometry frame, odometry <- {params.odom_topic} (fixed_frame is empty)"))

    def on_activate(self, state: Any) -> TransitionCallbackReturn:
        return self._transition("activate", self._activate, on_failure=self._destroy_entities)

    def _activate(self) -> None:
        runtime, params = self.runtime, self.runtime.params
        if params is None:
            raise ConfigureError("the memory is not configured")
        self._destroy_entities()  # nothing left from an earlier activation
        for spec in params.layers:
            callback = functools.partial(self._on_layer_message, spec.name)
            self._memory_subscriptions.append(self.create_subscription(
                runtime.layer_types[spec.name], spec.topic, callback, _qos(spec.qos_depth, spec.reliability),
                callback_group=self._intake_group))
        if not params.fixed_frame:
            self._memory_subscriptions.append(self.create_subscription(
                runtime.odometry_type, params.odom_topic, self._on_odometry, _qos(ODOM_QOS_DEPTH, "best_effort"),
                callback_group=self._intake_group))
        if params.fixed_frame:
            self._tf_listener = _TfListener(self, runtime, params.tf_topic, params.tf_static_topic, params.odom_topic)
            for timer in runtime.intake_timers():
                self._memory_timers.append(self.create_timer(timer.period, timer.tick,
                                                             callback_group=self._intake_group))
        for topic in sorted({spec.camera.info_topic for spec in params.layers if spec.camera.info_topic}):
            self._memory_subscriptions.append(self.create_subscription(  # best effort hears both kinds
                runtime.camera_info_type, topic, functools.partial(self._on_camera_info, topic),
                _qos(CAMERA_INFO_QOS_DEPTH, "best_effort"), callback_group=self._intake_group))
        for service in service_table.SERVICES:
            self._memory_services.append(self.create_service(
                self._srv_types[service.name], f"~/{service.name}", functools.partial(self._on_service, service.name),
                callback_group=self._query_group))
        for timer in runtime.timers():
            self._memory_timers.append(self.create_timer(timer.period, timer.tick,
                                                         callback_group=self._maintenance_group))
        if params.markers_enabled and self._marker_type is not None:
            latched = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL)
            self._marker_publisher = self.create_publisher(self._marker_type, MARKER_TOPIC, latched)
            # Markers are for people watching RViz: checked on the steady clock, so a bag replayed at 40x
            # does not rebuild them 40 times as often as on the robot.
            self._memory_timers.append(self.create_timer(params.marker_period, self._publish_markers,
                                                         callback_group=self._maintenance_group,
                                                         clock=Clock(clock_type=ClockType.STEADY_TIME)))
        self._log.info(f"active: {len(params.layers)} layer subscription(s), {len(self._memory_services)} "
                       f"services under {self.get_fully_qualified_name()}/, "
                       f"{len(self._memory_timers)} timer(s)")

    def on_deactivate(self, state: Any) -> TransitionCallbackReturn:
        def deactivate() -> None:
            self._destroy_entities()
            stored = self.runtime.deactivate()
            self._log.info(f"inactive: intake stopped, {stored} buffered observation(s) stored")
        return self._transition("deactivate", deactivate)

    def on_cleanup(self, state: Any) -> TransitionCallbackReturn:
        return self._transition("cleanup", self._release)

    def on_shutdown(self, state: Any) -> TransitionCallbackReturn:
        return self._transition("shutdown", self._release)

    def on_error(self, state: Any) -> TransitionCallbackReturn:
        self._log.error(f"error processing from '{getattr(state, 'label', state)}': releasing the memory")
        return self._transition("error processing", self._release)

    def _release(self) -> None:
        self._destroy_entities()
        was_open = self.runtime.configured
        self.runtime.cleanup()
        if was_open:
            self._log.info("memory flushed and closed")

    def release(self) -> bool:
        """Stop everything and close the memory (process exit); False if closing failed (logged)."""
        try:
            self._release()
            return True
        except Exception as exc:
            self._log.error(f"closing the memory failed: {type(exc).__name__}: {exc}")
            return False

    def destroy_node(self) -> None:
        logging.getLogger("emem_ros").removeHandler(self._forward)
        super().destroy_node()

    # ------------------------------------------------------------------ entities
    def _destroy_entities(self) -> None:
        listener, self._tf_listener = self._tf_listener, None
        if listener is not None:
            listener.close()
        for timer in self._memory_timers:
            self.destroy_timer(timer)
        for service in self._memory_services:
            self.destroy_service(service)
        for subscription in self._memory_subscriptions:
            self.destroy_subscription(subscription)
        if self._marker_publisher is not None:
            self.destroy_publisher(self._marker_publisher)
        self._memory_timers, self._memory_services, self._memory_subscriptions = [], [], []
        self._marker_publisher = None

    # ------------------------------------------------------------------ callbacks
    def _on_layer_message(self, layer: str, msg: Any) -> None:
        self.runtime.on_message(layer, msg)

    def _on_odometry(self, msg: Any) -> None:
        self.runtime.on_odometry(msg)

    def _on_camera_info(self, topic: str, msg: Any) -> None:
        self.runtime.on_camera_info(topic, msg)

    def _on_service(self, name: str, request: Any, response: Any) -> Any:
        return self.runtime.answer(name, request, response, self._make)

    def _publish_markers(self) -> None:
        publisher = self._marker_publisher
        if publisher is None:
            return
        try:
            self.runtime.publish_changed_markers(self._make, publisher.publish)
        except Exception as exc:  # a timer must survive anything
            self._log.error(f"publishing markers failed: {type(exc).__name__}: {exc}")


def main(args: Optional[list[str]] = None) -> int:
    """`ros2 run emem_ros memory_node`: spin until SIGINT/SIGTERM, then flush, close and exit 0."""
    stop = threading.Event()
    stop_signal: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        # One stop is enough: later signals (launch's SIGINT after the terminal's) must not
        # interrupt the flush.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_signal.append(signum)
        stop.set()

    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    node: Optional[MemoryNode] = None
    executor: Any = None
    spinner: Optional[threading.Thread] = None
    failure: list[BaseException] = []
    closed = True
    try:
        node = MemoryNode()
        # Separate callback groups only help with threads to run them: at least one per group.
        executor = distro.make_executor(distro.DEFAULT_EXECUTOR, threads=max(4, os.cpu_count() or 1))
        executor.add_node(node)
        spinner = threading.Thread(target=_spin, args=(executor, stop, failure), name="memory-spin", daemon=True)
        spinner.start()
        while not stop.wait(0.5):  # the main thread stays free to run the signal handler
            pass
    finally:
        if executor is not None:
            try:
                executor.shutdown(timeout_sec=5.0)
            except Exception:
                pass
        if spinner is not None:
            spinner.join(timeout=10.0)
        if node is not None:
            closed = node.release()  # the context is still valid: these log lines reach /rosout
            try:
                node.destroy_node()
            except Exception:
                pass
        try:
            if rclpy.ok():
                rclpy.shutdown()
        except Exception:
            pass
        for sig, handler in previous.items():
            # After a stop signal the process is on its way out: a late SIGINT (launch sends one after
            # the terminal's) must not turn the clean exit into "died, exit code -2".
            signal.signal(sig, signal.SIG_IGN if stop_signal else handler)
    if failure:
        raise failure[0]
    return 0 if closed else 1


def _spin(executor: Any, stop: threading.Event, failure: list[BaseException]) -> None:
    """Spin until the executor is shut down; a real error stops the process (main re-raises it)."""
    try:
        executor.spin()
    except ExternalShutdownException:
        pass
    except BaseException as exc:
        if not stop.is_set() and rclpy.ok():
            failure.append(exc)
    finally:
        stop.set()

