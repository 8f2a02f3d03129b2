"""The README stays true: its commands, parameter table, services and CLI match the code."""

from __future__ import annotations

import re
from pathlib import Path

from emem_ros.ros.params import declarations, layer_declarations

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _table_rows() -> dict[str, str]:
    rows = {}
    for line in README.splitlines():
        match = re.match(r"^\| `([^`]+)` \| (\w+) \| (.*?) \|", line)
        if match:
            rows[match.group(1)] = match.group(3)
    return rows


def test_it_opens_with_the_two_commands_and_ci_runs_the_test_one():
    first_block = README.split("```")[1]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_every_parameter_is_in_the_table_with_its_default():
    rows = _table_rows()
    declared = list(declarations()) + [
        (name.replace("NAME", "<name>"), default, kind, text) for name, default, kind, text in layer_declarations("NAME")]
    for name, default, _, _ in declared:
        assert name in rows, f"README parameter table lacks {name}"
        shown = rows[name]
        if isinstance(default, bool):
            assert shown == f"`{str(default).lower()}`", name
        elif isinstance(default, (int, float)):
            assert shown == f"`{default}`", name
        elif isinstance(default, str):
            assert shown == f'`"{default}"`', name


def test_every_service_and_cli_command_is_documented():
    from emem_ros.cli.main import build_parser
    from emem_ros.ros.services import SERVICES

    for spec in SERVICES:
        assert f"/memory/{spec.name} " in README, spec.name
    commands = build_parser()._subparsers._group_actions[0].choices
    for command in commands:
        assert f"emem {command} " in README, command


def test_the_service_table_is_the_declared_services():
    """One row per service, named and typed as the tool declarations say (no row missing, none extra)."""
    from emem_ros.ros.services import SERVICES

    rows = re.findall(r"^\| `([a-z_]+)` \| `([A-Za-z]+)` \| `ros2 service call /memory/([a-z_]+) emem_ros/srv/([A-Za-z]+) ",
                      README, re.M)
    assert rows, "the README's service table was not found"
    assert sorted((name, srv) for name, srv, _, _ in rows) == sorted((s.name, s.srv_name) for s in SERVICES)
    for name, srv, called, called_srv in rows:
        assert (called, called_srv) == (name, srv), f"the example of {name} calls {called} ({called_srv})"
