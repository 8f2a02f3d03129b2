"""A small stand-in for the parts of rclpy that emem_ros/ros/node.py uses, for machines without ROS.

It is not rclpy: no middleware, no executor threads. It records what the
node creates (subscriptions, services, timers, publishers, with their callback
groups and QoS) and models the behaviours the node relies on: statically
typed parameters (an override of another type is refused, as rclpy does; an
empty STRING_ARRAY declared by type is "uninitialized"), and lifecycle
transitions that return a TransitionCallbackReturn. The generated interface
packages the node imports by name (``emem_ros.srv``, ``std_msgs.msg``, ...)
are served from a rosbags typestore.

The real thing is exercised by test/ros/ on a ROS 2 Humble machine; this lets
node.py's own logic (ordering, error handling, wiring) run everywhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from test.support.ros_messages import InterfaceFactory

PKG = "emem_ros"


# ---------------------------------------------------------------------- rclpy pieces
class ParameterType(enum.IntEnum):
    NOT_SET = 0
    BOOL = 1
    INTEGER = 2
    DOUBLE = 3
    STRING = 4
    BYTE_ARRAY = 5
    BOOL_ARRAY = 6
    INTEGER_ARRAY = 7
    DOUBLE_ARRAY = 8
    STRING_ARRAY = 9


def _infer(value: Any) -> ParameterType:
    if value is None:
        return ParameterType.NOT_SET
    if isinstance(value, bool):
        return ParameterType.BOOL
    if isinstance(value, int):
        return ParameterType.INTEGER
    if isinstance(value, float):
        return ParameterType.DOUBLE
    if isinstance(value, str):
        return ParameterType.STRING
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, bytes) for v in value):  # [] lands here, as in rclpy
            return ParameterType.BYTE_ARRAY
        if all(isinstance(v, str) for v in value):
            return ParameterType.STRING_ARRAY
        if all(isinstance(v, float) for v in value):
            return ParameterType.DOUBLE_ARRAY
    raise TypeError(f"The given value is not one of the allowed types: {value!r}")


class Parameter:
    Type = ParameterType

    def __init__(self, name: str, type_: Optional[ParameterType] = None, value: Any = None) -> None:
        self.name = name
        self.value = value
        self.type_ = _infer(value) if type_ is None else type_


@dataclass
class ParameterDescriptor:
    name: str = ""
    type: int = 0
    description: str = ""
    dynamic_typing: bool = False


class ParameterUninitializedException(Exception):
    pass


class InvalidParameterTypeException(Exception):
    pass


class TransitionCallbackReturn(enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    ERROR = "error"


class ReliabilityPolicy(enum.Enum):
    RELIABLE = 1
    BEST_EFFORT = 2


class DurabilityPolicy(enum.Enum):
    VOLATILE = 2
    TRANSIENT_LOCAL = 1


class HistoryPolicy(enum.Enum):
    KEEP_LAST = 1


@dataclass
class QoSProfile:
    history: Any = HistoryPolicy.KEEP_LAST
    depth: int = 10
    reliability: Any = ReliabilityPolicy.RELIABLE
    durability: Any = DurabilityPolicy.VOLATILE


class MutuallyExclusiveCallbackGroup:
    pass


class SignalHandlerOptions(enum.Enum):
    ALL = 0
    SIGINT = 1
    SIGTERM = 2
    NO = 3


class ExternalShutdownException(Exception):
    pass


class ClockType(enum.Enum):
    ROS_TIME = 1
    SYSTEM_TIME = 2
    STEADY_TIME = 3


@dataclass
class Entity:
    kind: str
    type: Any
    name: str
    callback: Any
    qos: Any = None
    callback_group: Any = None
    period: float = 0.0
    published: list = field(default_factory=list)
    raw: bool = False
    clock: Any = None

    def publish(self, msg: Any) -> None:
        self.published.append(msg)


class Logger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, message: str) -> None:
        self.lines.append(("info", message))

    def warning(self, message: str) -> None:
        self.lines.append(("warning", message))

    def error(self, message: str) -> None:
        self.lines.append(("error", message))


class Clock:
    def __init__(self, now: Optional[list[float]] = None, *, clock_type: ClockType = ClockType.ROS_TIME) -> None:
        self._now = now if now is not None else [0.0]
        self.clock_type = clock_type

    def now(self) -> Any:
        return types.SimpleNamespace(nanoseconds=int(round(self._now[0] * 1e9)))


class LifecycleNode:
    """Parameters, entities and transitions, as far as node.py uses them."""

    clock_seconds = [1_763_800_000.0]
    default_overrides: list[Parameter] = []
    """Stand-in for --ros-args / a params file when main() builds the node."""

    def __init__(self, node_name: str, *, parameter_overrides: Optional[list[Parameter]] = None,
                 namespace: str = "") -> None:
        self.name = node_name
        self.namespace = namespace
        given = parameter_overrides if parameter_overrides is not None else self.default_overrides
        self._parameter_overrides = {p.name: p for p in given}
        self._params: dict[str, Parameter] = {}
        self._descriptors: dict[str, ParameterDescriptor] = {}
        self.logger = Logger()
        self.entities: list[Entity] = []
        self.destroyed: list[Entity] = []
        self.node_destroyed = False
        self.context = None

    def get_name(self) -> str:
        return self.name

    def get_namespace(self) -> str:
        return self.namespace or "/"

    # parameters
    def declare_parameter(self, name: str, value: Any = None, descriptor: Optional[ParameterDescriptor] = None):
        if name in self._params:
            raise RuntimeError(f"parameter {name} already declared")
        descriptor = descriptor or ParameterDescriptor()
        if isinstance(value, ParameterType):
            declared, value = value, None
        elif descriptor.dynamic_typing:
            declared = None
        else:
            declared = _infer(value)
        override = self._parameter_overrides.get(name)
        if override is not None:
            value = override.value
        actual = _infer(value)
        if declared is not None and value is not None and actual != declared:
            raise InvalidParameterTypeException(
                f"Trying to set parameter '{name}' to '{value!r}' of type '{actual.name}', "
                f"expecting type '{declared.name}'")
        self._params[name] = Parameter(name, ParameterType.NOT_SET if value is None else actual, value)
        self._descriptors[name] = descriptor
        return self._params[name]

    def has_parameter(self, name: str) -> bool:
        return name in self._params

    def get_parameter(self, name: str) -> Parameter:
        parameter = self._params[name]
        if parameter.type_ == ParameterType.NOT_SET and not self._descriptors[name].dynamic_typing:
            raise ParameterUninitializedException(name)
        return parameter

    # basics
    def get_logger(self) -> Logger:
        return self.logger

    def get_clock(self) -> Clock:
        return Clock(self.clock_seconds)

    def get_fully_qualified_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    # entities
    def _add(self, entity: Entity) -> Entity:
        self.entities.append(entity)
        return entity

    def create_subscription(self, msg_type, topic, callback, qos_profile, *, callback_group=None, raw=False):
        return self._add(Entity("subscription", msg_type, topic, callback, qos_profile, callback_group, raw=raw))

    def create_service(self, srv_type, srv_name, callback, *, qos_profile=None, callback_group=None):
        return self._add(Entity("service", srv_type, srv_name, callback, qos_profile, callback_group))

    def create_timer(self, timer_period_sec, callback, callback_group=None, clock=None):
        return self._add(Entity("timer", None, "", callback, None, callback_group, float(timer_period_sec),
                                clock=clock))

    def create_publisher(self, msg_type, topic, qos_profile, *, callback_group=None):
        return self._add(Entity("publisher", msg_type, topic, None, qos_profile, callback_group))

    def _destroy(self, entity: Entity) -> bool:
        self.entities.remove(entity)
        self.destroyed.append(entity)
        return True

    destroy_subscription = destroy_service = destroy_timer = destroy_publisher = _destroy

    def destroy_node(self) -> None:
        self.node_destroyed = True

    # transitions, as the lifecycle services drive them
    def trigger(self, transition: str) -> TransitionCallbackReturn:
        return getattr(self, f"on_{transition}")(None)


class MultiThreadedExecutor:
    spin_raises: Optional[type] = None
    """Raised by spin() after activating; None: spin until shutdown() (what a signal leads to)."""
    last: Optional["MultiThreadedExecutor"] = None

    def __init__(self, num_threads: Optional[int] = None) -> None:
        self.num_threads = num_threads
        self.nodes: list[Any] = []
        self.shut_down = False
        self.spinning = threading.Event()
        self._stopped = threading.Event()
        MultiThreadedExecutor.last = self

    def add_node(self, node: Any) -> None:
        self.nodes.append(node)

    def spin(self) -> None:
        for node in self.nodes:  # what launch does: configure, activate, then Ctrl-C
            node.trigger("configure")
            node.trigger("activate")
        self.spinning.set()
        if self.spin_raises is not None:
            raise self.spin_raises()
        self._stopped.wait(30.0)

    def shutdown(self, timeout_sec: Optional[float] = None) -> bool:
        self.shut_down = True
        self._stopped.set()
        return True


class SingleThreadedExecutor:
    """Spins one helper node (the TF listener) until shut down; made nodes are kept in ``_State``."""

    def __init__(self, context: Any = None) -> None:
        self.nodes: list[Any] = []
        self._stopped = threading.Event()

    def add_node(self, node: Any) -> None:
        self.nodes.append(node)

    def spin(self) -> None:
        self._stopped.wait(30.0)

    def shutdown(self, timeout_sec: Optional[float] = None) -> bool:
        self._stopped.set()
        return True


def _create_node(node_name: str, *, namespace: str = "", context: Any = None, **options: Any) -> "LifecycleNode":
    node = LifecycleNode(node_name, parameter_overrides=[], namespace=namespace)
    node.options = options
    _State.made_nodes.append(node)
    return node


class _State:
    ok = False
    init_args: Any = None
    made_nodes: list = []


def _init(args: Any = None, **options: Any) -> None:
    _State.ok, _State.init_args = True, args


def _ok() -> bool:
    return _State.ok


def _shutdown() -> None:
    _State.ok = False


# ---------------------------------------------------------------------- interface packages
def _rclpy_like(make: InterfaceFactory, type_name: str, cls: type) -> type:
    """A subclass whose constructor takes any subset of fields (defaults for the rest), as rclpy's do."""

    def __init__(self: Any, **fields: Any) -> None:
        built = make._build(type_name, fields, {})
        for f in dataclasses.fields(cls):
            object.__setattr__(self, f.name, getattr(built, f.name))

    return type(cls.__name__, (cls,), {"__init__": __init__})


def _interface_modules(make: InterfaceFactory) -> dict[str, types.ModuleType]:
    modules: dict[str, types.ModuleType] = {}
    for type_name, cls in make.store.types.items():
        package, kind, name = type_name.split("/")
        if package == PKG and ("_Request" in name or "_Response" in name):
            continue  # our srv parts are registered under msg/ for rosbags; served below as srv/
        module = modules.setdefault(f"{package}.{kind}", types.ModuleType(f"{package}.{kind}"))
        setattr(module, name, _rclpy_like(make, type_name, cls))
    srv = modules.setdefault(f"{PKG}.srv", types.ModuleType(f"{PKG}.srv"))
    for type_name in make.store.types:
        if type_name.startswith(f"{PKG}/msg/") and type_name.endswith("_Request"):
            service = type_name.rsplit("/", 1)[1][: -len("_Request")]
            setattr(srv, service, type(service, (), {
                "Request": staticmethod(lambda s=service: make.request(s)),
                "Response": staticmethod(lambda s=service: make.response(s)),
                "name": service}))
    return modules


@contextlib.contextmanager
def installed(make: InterfaceFactory) -> Iterator[types.ModuleType]:
    """sys.modules holds the fake rclpy and interface packages; emem_ros.ros.node is imported fresh."""
    rclpy = types.ModuleType("rclpy")
    rclpy.init, rclpy.ok, rclpy.shutdown = _init, _ok, _shutdown
    rclpy.create_node = _create_node
    parts = {
        "rclpy": rclpy,
        "rclpy.callback_groups": {"MutuallyExclusiveCallbackGroup": MutuallyExclusiveCallbackGroup},
        "rclpy.clock": {"Clock": Clock, "ClockType": ClockType},
        "rclpy.executors": {"MultiThreadedExecutor": MultiThreadedExecutor,
                            "SingleThreadedExecutor": SingleThreadedExecutor,
                            "ExternalShutdownException": ExternalShutdownException},
        "rclpy.lifecycle": {"LifecycleNode": LifecycleNode, "TransitionCallbackReturn": TransitionCallbackReturn},
        "rclpy.parameter": {"Parameter": Parameter},
        "rclpy.qos": {"DurabilityPolicy": DurabilityPolicy, "HistoryPolicy": HistoryPolicy,
                      "QoSProfile": QoSProfile, "ReliabilityPolicy": ReliabilityPolicy},
        "rclpy.exceptions": {"ParameterUninitializedException": ParameterUninitializedException},
        "rclpy.signals": {"SignalHandlerOptions": SignalHandlerOptions},
        "rcl_interfaces": {},
        "rcl_interfaces.msg": {"ParameterDescriptor": ParameterDescriptor},
    }
    fakes: dict[str, types.ModuleType] = _interface_modules(make)
    for name, content in parts.items():
        module = content if isinstance(content, types.ModuleType) else types.ModuleType(name)
        if isinstance(content, dict):
            for attr, value in content.items():
                setattr(module, attr, value)
        fakes[name] = module
    saved = {name: sys.modules.get(name) for name in [*fakes, "emem_ros.ros.node"]}
    try:
        sys.modules.pop("emem_ros.ros.node", None)
        sys.modules.update(fakes)
        import emem_ros.ros.node as node_module

        yield node_module
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        import emem_ros.ros as ros_package

        if hasattr(ros_package, "node"):
            delattr(ros_package, "node")
