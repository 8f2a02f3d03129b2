"""The docs stay true: README.md and docs/*.md are checked against the code they describe.

- the README opens with the two commands, and CI runs the test one;
- docs/ros.md's parameter table has one row per declared parameter, with its type and default, and
  no row for a parameter that does not exist; every parameter of config/memory.yaml has its row;
- the README's service table is the declared services, each with its type;
- every `emem` command and flag the docs mention exists in the argparse parser, and every subcommand
  is mentioned;
- every relative link resolves (the pages other changes are adding are listed in PENDING_PAGES);
- the README's quick starts run: each fenced shell block either runs here (the test runs it, against a
  temporary folder, with the hashing embedder) or says on its first line what it needs (``# needs a
  robot``, ``# needs the network``, ...); the Python block runs as a script; the params file parses.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from emem_ros.ros.params import _flatten, declarations, layer_declarations, load_params_yaml

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
ROS_MD = (ROOT / "docs" / "ros.md").read_text(encoding="utf-8")

PENDING_PAGES: tuple[str, ...] = ()
"""Pages other changes are writing. Links to them may dangle until they are merged; once one exists,
test_pending_pages_are_still_missing fails: take it off this list, and its links are then checked."""

NEEDS = ("a robot", "the network", "an LLM server", "PostgreSQL")
"""What a quick-start shell block may say it needs on its first line (``# needs a robot``) instead of
running here. Anything else in a shell block of the README runs in this test."""

TYPE_NAMES = {"BOOL": "bool", "INTEGER": "integer", "DOUBLE": "double", "STRING": "string",
              "STRING_ARRAY": "string_array"}


def _pages() -> list[Path]:
    return [README_PATH, *DOCS]


def _fences(text: str) -> Iterator[tuple[str, str]]:
    """(info string, body) of every fenced code block."""
    for match in re.finditer(r"^```([^\n]*)\n(.*?)^```", text, re.M | re.S):
        yield match.group(1).strip(), match.group(2)


def _prose(text: str) -> str:
    return re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)


# ---------------------------------------------------------------------- the two commands
def test_it_opens_with_the_two_commands_and_ci_runs_the_test_one() -> None:
    first_block = README.split("```")[1]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(README.splitlines()) <= 300


# ---------------------------------------------------------------------- parameters
def _table_rows() -> dict[str, tuple[str, str, str]]:
    """docs/ros.md's parameter table: name -> (type, default as written, meaning)."""
    rows: dict[str, tuple[str, str, str]] = {}
    for line in ROS_MD.splitlines():
        match = re.match(r"^\| `([^`]+)` \| (\w+) \| (`.*?`) \| (.*) \|$", line)
        if match:
            assert match.group(1) not in rows, f"two rows for {match.group(1)}"
            rows[match.group(1)] = (match.group(2), match.group(3), match.group(4))
    assert rows, "the parameter table of docs/ros.md was not found"
    return rows


def _declared() -> list[tuple[str, Any, str, str]]:
    return list(declarations()) + [
        (name.replace("NAME", "<name>"), default, kind, text) for name, default, kind, text in layer_declarations("NAME")]


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (int, float)):
        return f"`{value}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, list):
        return "`[" + ", ".join(f'"{v}"' for v in value) + "]`"
    raise TypeError(value)


def test_every_declared_parameter_has_its_row_with_its_type_and_default() -> None:
    rows = _table_rows()
    for name, default, kind, _ in _declared():
        assert name in rows, f"docs/ros.md's parameter table lacks {name} (default {default!r})"
        shown_type, shown_default, _ = rows[name]
        assert shown_type == TYPE_NAMES[kind], f"{name}: the table says {shown_type}, the node declares {kind}"
        assert shown_default == _shown(default), f"{name}: the table says {shown_default}, the default is {default!r}"


def test_no_row_for_a_parameter_that_does_not_exist() -> None:
    declared = {name for name, _, _, _ in _declared()}
    stale = sorted(set(_table_rows()) - declared)
    assert not stale, f"docs/ros.md documents parameters the node does not declare: {stale}"


def test_every_parameter_of_the_packaged_config_has_its_row() -> None:
    """config/memory.yaml's values that differ from the defaults are named in their row."""
    document = yaml.safe_load((ROOT / "config" / "memory.yaml").read_text(encoding="utf-8"))
    flat: dict[str, Any] = {}
    _flatten(document["/**"]["ros__parameters"], "", flat)
    rows = _table_rows()
    defaults = {name: default for name, default, _, _ in _declared()}
    for name, value in flat.items():
        row = re.sub(r"^layers\.[^.]+\.", "layers.<name>.", name)
        assert row in rows, f"config/memory.yaml sets {name}, which has no row in docs/ros.md"
        if row == name and name != "layer_names" and value != defaults[name]:
            assert f"config/memory.yaml: {_shown(value)}" in rows[name][2], (
                f"config/memory.yaml sets {name} to {value!r}, not its default: say so in its row")


def test_the_quick_start_params_file_is_valid(tmp_path: Path) -> None:
    blocks = [body for info, body in _fences(README) if info == "yaml"]
    assert len(blocks) == 1, "the README's ROS quick start has one params file"
    path = tmp_path / "my_robot.yaml"
    path.write_text(blocks[0], encoding="utf-8")
    params = load_params_yaml(path)  # strict types, as rclpy reads a params file
    assert [layer.name for layer in params.layers] == ["detections", "scene", "battery"]
    assert params.layer("detections").camera.info_topic == "/camera/camera_info"
    assert params.layer("battery").is_internal_state


# ---------------------------------------------------------------------- services
def test_the_service_table_is_the_declared_services() -> None:
    """One row per service, named and typed as the tool declarations say (no row missing, none extra)."""
    from emem_ros.ros.services import SERVICES

    rows = re.findall(r"^\| `([a-z_]+)` \| `([A-Za-z]+)` \| `ros2 service call /memory/([a-z_]+) emem_ros/srv/([A-Za-z]+) ",
                      README, re.M)
    assert rows, "the README's service table was not found"
    assert sorted((name, srv) for name, srv, _, _ in rows) == sorted((s.name, s.srv_name) for s in SERVICES)
    for name, srv, called, called_srv in rows:
        assert (called, called_srv) == (name, srv), f"the example of {name} calls {called} ({called_srv})"
    for srv in {srv for _, srv, _, _ in rows}:
        assert (ROOT / "srv" / f"{srv}.srv").is_file(), srv


# ---------------------------------------------------------------------- the emem command
def _emem_mentions() -> Iterator[tuple[str, str]]:
    """(page, command line) of every `emem ...` in code: inline spans and lines of fenced blocks."""
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for _, body in _fences(text):
            for line in body.splitlines():
                line = line.strip().removeprefix("$ ")
                if line.startswith("emem "):
                    yield page.name, line
        for span in re.findall(r"`([^`\n]+)`", _prose(text)):
            if span.startswith("emem "):
                yield page.name, span


def _tokens(command: str) -> list[str]:
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError:
        tokens = command.split()
    return [token.strip("[]") for token in tokens[1:]]


def _subparsers(parser: argparse.ArgumentParser) -> Any:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _check_command(tokens: list[str]) -> list[str]:
    """What in an `emem` command line the parser does not know (empty: all of it exists)."""
    from emem_ros.cli.main import build_parser

    parser = build_parser()
    problems: list[str] = []
    positional = 0
    for token in tokens:
        if token.startswith("-") and len(token) > 1 and not re.match(r"^-\d", token):
            flag = token.split("=", 1)[0]
            known = {option for action in parser._actions for option in action.option_strings}
            if flag not in known:
                problems.append(f"{parser.prog} has no option {flag}")
            continue
        sub = _subparsers(parser)
        if sub is None:
            continue
        if token in sub.choices:
            parser, positional = sub.choices[token], 0
            continue
        before = [a for a in parser._actions if not a.option_strings]
        index = before.index(sub)
        if all(a.nargs is None for a in before[:index]) and positional == index:
            problems.append(f"{parser.prog} has no command {token} (it has {', '.join(sub.choices)})")
        positional += 1
    return problems


def test_every_emem_command_and_flag_in_the_docs_exists() -> None:
    mentions = list(_emem_mentions())
    assert len(mentions) > 30, "the docs' emem commands were not found"
    problems = [f"{page}: `{line}`: {problem}" for page, line in mentions for problem in _check_command(_tokens(line))]
    assert not problems, "\n".join(problems)


def test_the_command_check_catches_what_does_not_exist() -> None:
    assert _check_command(_tokens("emem query patrol.db --list")) == []
    assert _check_command(_tokens("emem fs patrol.db ls /memory --depth 2")) == []
    assert _check_command(_tokens("emem qeury patrol.db"))
    assert _check_command(_tokens("emem replay bag --no-such-flag"))
    assert _check_command(_tokens("emem fleet init-all URL"))
    assert _check_command(_tokens("emem fs patrol.db list /memory"))


def test_every_emem_subcommand_is_documented() -> None:
    from emem_ros.cli.main import build_parser

    used = {_tokens(line)[0] for _, line in _emem_mentions() if _tokens(line)}
    missing = sorted(set(_subparsers(build_parser()).choices) - used)
    assert not missing, f"no page shows these emem commands: {missing}"


# ---------------------------------------------------------------------- links
def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", _prose(page.read_text(encoding="utf-8")), re.M)}


def test_every_relative_link_resolves() -> None:
    problems = []
    for page in _pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text(encoding="utf-8"))):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            shown = f"{page.relative_to(ROOT)}: ({target})"
            relative = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else str(file)
            if not file.exists():
                if relative not in PENDING_PAGES:
                    problems.append(f"{shown}: no file {relative}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                problems.append(f"{shown}: no heading #{anchor} in {relative}")
    assert not problems, "\n".join(problems)


def test_pending_pages_are_still_missing() -> None:
    """A page that arrived is no longer pending: remove it from PENDING_PAGES so its links are checked."""
    arrived = [page for page in PENDING_PAGES if (ROOT / page).exists()]
    assert not arrived, f"take {arrived} off PENDING_PAGES in test/test_docs.py"


# ---------------------------------------------------------------------- the quick starts run
def _shell_blocks() -> list[str]:
    blocks = [body for info, body in _fences(README) if info in ("bash", "sh", "shell", "console")]
    return blocks[1:]  # the first is `make demo` / `make test` (test_it_opens_with_the_two_commands...)


def _needs(block: str) -> str:
    first = block.splitlines()[0].strip() if block.strip() else ""
    match = re.match(r"^# needs (.+)$", first)
    return match.group(1).strip() if match else ""


def _run_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_every_quick_start_shell_block_runs_or_says_what_it_needs(tmp_path: Path) -> None:
    """Blocks without a `# needs ...` line run here: `emem` from this checkout (one process, the
    commands in order), in a temporary folder holding the bundled bags, with `--embedding hashing`
    added to `emem replay` (the model is not what is tested here)."""
    blocks = _shell_blocks()
    assert blocks, "the README's quick-start shell blocks were not found"
    commands: list[list[str]] = []
    for block in blocks:
        need = _needs(block)
        if need:
            assert need in NEEDS, f"'# needs {need}': say one of {NEEDS}"
            continue
        for line in block.splitlines():
            tokens = shlex.split(line, comments=True)
            if not tokens:
                continue
            assert tokens[0] == "emem", (f"`{line}` cannot run in this test: mark its block '# needs ...' "
                                         f"(one of {NEEDS}) on its first line")
            if tokens[1] == "replay":
                tokens += ["--embedding", "hashing", "--no-progress"]
            commands.append(tokens[1:])
    assert len(commands) >= 5, "the quick starts' emem commands were not found"
    (tmp_path / "rosbags").symlink_to(ROOT / "rosbags")
    for info, body in _fences(README):  # a file the quick start writes names itself: `# my_robot.yaml`
        named = re.match(r"^# ([\w.-]+\.yaml)\n", body)
        if info == "yaml" and named:
            (tmp_path / named.group(1)).write_text(body, encoding="utf-8")
    runner = ("import json, sys\n"
              "from emem_ros.cli.main import main\n"
              "for argv in json.loads(sys.argv[1]):\n"
              "    print('$ emem', ' '.join(argv), flush=True)\n"
              "    code = main(argv)\n"
              "    if code:\n"
              "        sys.exit(f'exit code {code}')\n")
    done = subprocess.run([sys.executable, "-c", runner, json.dumps(commands)], cwd=tmp_path, env=_run_env(),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.count("$ emem") == len(commands)
    assert done.stdout.count('"red mug" is most likely at (1.0, 4.6, 0.9)') == 2, done.stdout


def test_the_python_quick_start_runs(tmp_path: Path) -> None:
    blocks = [body for info, body in _fences(README) if info == "python"]
    assert len(blocks) == 1, "the README's Python quick start has one Python block"
    script = tmp_path / "quick_start.py"
    script.write_text("import emem_ros.memory\n"
                      "from emem_ros.embeddings import HashingEmbeddingProvider\n"
                      "emem_ros.memory.default_embedding_provider = HashingEmbeddingProvider  # no model here\n"
                      + blocks[0], encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_run_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"red mug" is most likely at (1.0, 4.6)' in done.stdout, done.stdout
    assert "below 60%" in done.stdout, done.stdout


@pytest.mark.parametrize("page", [p.name for p in DOCS])
def test_every_page_has_one_title(page: str) -> None:
    titles = re.findall(r"^# ", _prose((ROOT / "docs" / page).read_text(encoding="utf-8")), re.M)
    assert len(titles) == 1, page


# ---------------------------------------------------------------------- where a robot builder lands
def test_the_package_index_pages_point_at_the_docs_folder() -> None:
    import configparser
    import xml.etree.ElementTree as ElementTree

    websites = [u.text for u in ElementTree.parse(ROOT / "package.xml").getroot().findall("url")
                if u.get("type") == "website"]
    assert len(websites) == 1, "package.xml needs one <url type=\"website\">"
    metadata = configparser.ConfigParser()
    metadata.read(ROOT / "setup.cfg", encoding="utf-8")
    project_urls = {key.strip(): value.strip() for key, value in
                    (line.split("=", 1) for line in metadata["metadata"]["project_urls"].strip().splitlines())}
    docs = websites[0] or ""
    assert docs.endswith("/tree/main/docs"), docs
    assert metadata["metadata"]["url"] == docs
    assert project_urls["Documentation"] == docs
    assert (ROOT / "docs").is_dir()
