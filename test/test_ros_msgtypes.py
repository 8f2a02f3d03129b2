"""Message types from their names (emem_ros/ros/msgtypes.py), against stand-in modules."""

from __future__ import annotations

import types

import pytest

from emem_ros.core.errors import InvalidInputError
from emem_ros.ros.msgtypes import ImportingFactory, MessageTypeError, parse_type_name, resolve_type, time_fields


class String:
    def __init__(self, data: str = "") -> None:
        self.data = data


def importer(modules: dict[str, types.ModuleType]):
    def load(name: str) -> types.ModuleType:
        if name in modules:
            return modules[name]
        error = ModuleNotFoundError(f"No module named '{name}'")
        error.name = name.split(".")[0]
        raise error
    return load


STD = types.ModuleType("std_msgs.msg")
STD.String = String
STD.lowercase_helper = lambda: None
FAKE = importer({"std_msgs.msg": STD})


def test_parse_type_name():
    assert parse_type_name("std_msgs/String") == ("std_msgs", "msg", "String")
    assert parse_type_name(" emem_ros/srv/Locate ") == ("emem_ros", "srv", "Locate")
    with pytest.raises(MessageTypeError, match="not an interface type name"):
        parse_type_name("std_msgs.msg.String")


def test_resolve_type_finds_the_class():
    assert resolve_type("std_msgs/msg/String", importer=FAKE) is String
    assert resolve_type("std_msgs/String", importer=FAKE) is String


@pytest.mark.parametrize("name, words", [
    ("vision_msgs/msg/Detection2DArray", "package 'vision_msgs' is not installed or not sourced"),
    ("std_msgs/msg/Strin", "did you mean std_msgs/msg/String"),
    ("std_msgs/msg/NoSuchType", "has no msg named 'NoSuchType'"),
    ("std_srvs/srv/Trigger", "is a srv type; a msg type is needed"),
    ("std_msgs/msg/string", "not an interface type name"),
])
def test_resolve_type_explains_failures(name, words):
    with pytest.raises(MessageTypeError) as caught:
        resolve_type(name, importer=FAKE)
    assert words in str(caught.value)
    assert isinstance(caught.value, InvalidInputError)


def test_resolve_type_reports_a_broken_package():
    def broken(name):
        raise ImportError("undefined symbol: rosidl_typesupport_c__get_message_type_support_handle")

    with pytest.raises(MessageTypeError, match="importing std_msgs.msg failed .*undefined symbol"):
        resolve_type("std_msgs/msg/String", importer=broken)

    def missing_dependency(name):
        error = ModuleNotFoundError("No module named 'numpy'")
        error.name = "numpy"
        raise error

    with pytest.raises(MessageTypeError, match="needs the missing module 'numpy'"):
        resolve_type("std_msgs/msg/String", importer=missing_dependency)


def test_importing_factory_builds_and_caches():
    calls = []

    def counting(name):
        calls.append(name)
        return FAKE(name)

    make = ImportingFactory(counting)
    assert make("std_msgs/msg/String", data="hi").data == "hi"
    assert make("std_msgs/msg/String").data == ""
    assert calls == ["std_msgs.msg"]
    with pytest.raises(MessageTypeError):
        make("std_msgs/msg/Nope")


@pytest.mark.parametrize("seconds, fields", [
    (1763800000.25, {"sec": 1763800000, "nanosec": 250_000_000}),
    (12.9999999999, {"sec": 13, "nanosec": 0}),
    (-1.5, {"sec": -2, "nanosec": 500_000_000}),
    (None, {"sec": 0, "nanosec": 0}),
    (float("nan"), {"sec": 0, "nanosec": 0}),
    (1e12, {"sec": 0, "nanosec": 0}),
])
def test_time_fields(seconds, fields):
    assert time_fields(seconds) == fields
