"""ROS interface types from their names, and messages built by name.

Layers name their message type as a string (``vision_msgs/msg/Detection2DArray``);
the node turns it into the generated Python class at configure, where a typo
or a package that is not installed must fail the transition with one clear
sentence instead of an ImportError traceback. Plain Python (importlib only),
so the whole resolution is tested without ROS against stand-in modules.

``ImportingFactory`` builds messages by type name (``make("geometry_msgs/msg/Point",
x=1.0)``): the service handlers and the marker converter take such a factory,
so the node passes generated rclpy classes and the tests pass ``rosbags`` ones.
"""

from __future__ import annotations

import importlib
import math
import re
import threading
from types import ModuleType
from typing import Any, Callable

from emem_ros.core.errors import InvalidInputError

__all__ = [
    "MessageTypeError",
    "ImportingFactory",
    "MessageFactory",
    "parse_type_name",
    "resolve_type",
    "time_fields",
]

MessageFactory = Callable[..., Any]
"""``make(type_name, **fields) -> message``; fields not given keep the message's defaults."""

_TYPE_NAME = re.compile(r"^([a-z][a-z0-9_]*)/(?:(msg|srv|action)/)?([A-Z][A-Za-z0-9]*)$")
_INT32_MAX = 2**31 - 1


class MessageTypeError(InvalidInputError):
    """A type name does not resolve to an installed interface; the message says why."""


def parse_type_name(name: str, default_kind: str = "msg") -> tuple[str, str, str]:
    """'std_msgs/String' -> ('std_msgs', 'msg', 'String'); 'emem_ros/srv/Locate' keeps 'srv'."""
    text = str(name).strip()
    match = _TYPE_NAME.match(text)
    if match is None:
        raise MessageTypeError(f"{text!r} is not an interface type name like 'std_msgs/msg/String'")
    package, kind, type_name = match.groups()
    return package, kind or default_kind, type_name


def resolve_type(name: str, *, kind: str = "msg",
                 importer: Callable[[str], ModuleType] = importlib.import_module) -> type:
    """The generated class of ``name`` (``pkg/msg/Type``), or ``MessageTypeError`` in plain words.

    ``kind`` is what the caller needs: a subscription needs a message, a
    service server a service; asking for one and naming the other is an error.
    """
    package, named_kind, type_name = parse_type_name(name, default_kind=kind)
    full = f"{package}/{named_kind}/{type_name}"
    if named_kind != kind:
        raise MessageTypeError(f"{full} is a{'n' if named_kind == 'action' else ''} {named_kind} type; "
                               f"a {kind} type is needed here")
    module_name = f"{package}.{named_kind}"
    try:
        module = importer(module_name)
    except ModuleNotFoundError as exc:
        missing = getattr(exc, "name", None) or module_name
        if missing in (package, module_name):
            raise MessageTypeError(
                f"cannot resolve {full}: the package '{package}' is not installed or not sourced "
                f"(no Python module {module_name}; install ros-<distro>-{package.replace('_', '-')} "
                "and source its setup file)") from None
        raise MessageTypeError(f"cannot resolve {full}: importing {module_name} needs the missing module "
                               f"'{missing}'") from None
    except Exception as exc:  # a broken generated package: say so, do not crash the caller
        raise MessageTypeError(f"cannot resolve {full}: importing {module_name} failed "
                               f"({type(exc).__name__}: {exc})") from None
    cls = getattr(module, type_name, None)
    if cls is None or not isinstance(cls, type):
        known = sorted(n for n in dir(module) if n[:1].isupper() and not n.startswith("_"))
        hint = _closest(type_name, known)
        raise MessageTypeError(
            f"cannot resolve {full}: package '{package}' has no {named_kind} named '{type_name}'"
            + (f" (did you mean {package}/{named_kind}/{hint}?)" if hint else ""))
    return cls


def _closest(name: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else ""


def time_fields(seconds: float | None) -> dict[str, int]:
    """``builtin_interfaces/Time`` fields of epoch seconds; None, non-finite or out of range -> zero."""
    if seconds is None or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return {"sec": 0, "nanosec": 0}
    sec = math.floor(seconds)
    nanosec = int(round((seconds - sec) * 1e9))
    if nanosec >= 1_000_000_000:
        sec, nanosec = sec + 1, nanosec - 1_000_000_000
    if not -_INT32_MAX - 1 <= sec <= _INT32_MAX:
        return {"sec": 0, "nanosec": 0}
    return {"sec": int(sec), "nanosec": nanosec}


class ImportingFactory:
    """Builds messages of generated packages by type name (the live node's factory)."""

    def __init__(self, importer: Callable[[str], ModuleType] = importlib.import_module) -> None:
        self._importer = importer
        self._classes: dict[str, type] = {}
        self._lock = threading.Lock()

    def cls(self, type_name: str) -> type:
        with self._lock:
            found = self._classes.get(type_name)
        if found is None:
            found = resolve_type(type_name, importer=self._importer)
            with self._lock:
                self._classes[type_name] = found
        return found

    def __call__(self, type_name: str, **fields: Any) -> Any:
        return self.cls(type_name)(**fields)
