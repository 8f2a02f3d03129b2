"""test/ros/ runs in the ROS half of `make test` (.ci/ros_half.sh): real rclpy, launch_testing, the built package.

In the core run those tests are skipped, saying why: the core run uses pytest >= 8, which cannot load
the launch_testing plugin of Humble or Jazzy, and without that plugin a launch test would be collected as
plain unittest classes with no launch around them.

Humble-only tests: EmbodiedAgents (Cortex) is in the Humble overlay only. A module that needs it says
``pytestmark = pytest.mark.humble_only``; where another distribution is sourced such a module is not
collected at all (read here, never imported: its imports would fail), and a single test marked
``humble_only`` is deselected. The core run does not import such a module either (it skips test/ros/). They are not skips: the ROS half's summary line counts them apart
("N Humble-only not collected"), from the JSON this writes to ``$EMEM_ROS_LEFT_OUT``.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

_PLUGINS = ("launch_testing", "launch_testing.pytest.hooks")
HUMBLE_ONLY = "humble_only"
HUMBLE_ONLY_REASON = "EmbodiedAgents is in the Humble overlay only"
_left_out: dict[str, int] = {}
"""Module or test id -> number of tests not collected because they are Humble-only."""


def pytest_configure(config):
    config.addinivalue_line("markers", f"{HUMBLE_ONLY}: needs the Humble overlay ({HUMBLE_ONLY_REASON}); "
                                       "not collected on another ROS distribution")


def _other_distro() -> bool:
    """True when a ROS distribution other than Humble is sourced (not in the core run: none is)."""
    distro = os.environ.get("ROS_DISTRO", "").strip().lower()
    return bool(distro) and distro != "humble"


def _ros_half(config) -> bool:
    """True in the ROS half (the launch_testing plugin is loaded); False in the core run."""
    return any(config.pluginmanager.get_plugin(name) is not None for name in _PLUGINS)


def humble_only_tests(path: Path) -> int:
    """Tests in a module whose top level sets ``pytestmark`` to (a list with) ``humble_only``; 0 otherwise.

    Counted from the source, without importing it: test functions at the top level and in ``Test*``
    classes, each ``parametrize`` over a literal list counted once per case.
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return 0
    marked = any(isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
                 and HUMBLE_ONLY in ast.unparse(node.value) for node in tree.body)
    if not marked:
        return 0
    functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.startswith("Test")):
        functions += [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return sum(_cases(f) for f in functions if f.name.startswith("test"))


def _cases(function: ast.AST) -> int:
    cases = 1
    for decorator in getattr(function, "decorator_list", []):
        if (isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("parametrize")
                and len(decorator.args) >= 2 and isinstance(decorator.args[1], (ast.List, ast.Tuple))):
            cases *= max(1, len(decorator.args[1].elts))
    return cases


def pytest_ignore_collect(collection_path, config):
    """Humble-only modules: not imported on another distribution, nor in the core run (which skips test/ros/)."""
    path = Path(collection_path)
    in_ros_half = _ros_half(config)
    if (in_ros_half and not _other_distro()) or path.suffix != ".py" or not path.name.startswith("test_"):
        return None
    tests = humble_only_tests(path)
    if not tests:
        return None
    if in_ros_half:
        try:
            where = str(path.relative_to(config.rootpath))
        except ValueError:
            where = str(path)
        _left_out[where] = tests
    return True


def pytest_collection_modifyitems(config, items):
    if _other_distro():
        humble_only = [item for item in items if item.get_closest_marker(HUMBLE_ONLY) is not None]
        if humble_only:
            for item in humble_only:
                _left_out[item.nodeid] = 1
            config.hook.pytest_deselected(items=humble_only)
            items[:] = [item for item in items if item.get_closest_marker(HUMBLE_ONLY) is None]
    if _ros_half(config):
        return
    skip = pytest.mark.skip(reason="ROS half: needs the launch_testing pytest plugin of Humble or Jazzy (pytest < 8) "
                                   "and the built package; `make test` runs it through .ci/ros_half.sh")
    for item in items:
        if "/test/ros/" in str(item.path).replace("\\", "/"):
            item.add_marker(skip)


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get("EMEM_ROS_LEFT_OUT")
    if target:
        Path(target).write_text(json.dumps({"tests": sum(_left_out.values()), "reason": HUMBLE_ONLY_REASON,
                                            "where": sorted(_left_out)}))


def pytest_terminal_summary(terminalreporter):
    if _left_out:
        terminalreporter.write_line(f"{sum(_left_out.values())} Humble-only test(s) not collected on "
                                    f"{os.environ.get('ROS_DISTRO')} ({HUMBLE_ONLY_REASON}): "
                                    f"{', '.join(sorted(_left_out))}")
