"""The ROS packaging without ROS: interfaces, CMakeLists.txt, package.xml, launch, entry script.

Interfaces are parsed with `rosbags` (our own messages registered into a
ROS2_HUMBLE typestore), so a typo, an unresolvable type, a file missing from
CMakeLists.txt or a renamed tool parameter fails here instead of in colcon.
"""

from __future__ import annotations

import ast
import keyword
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

rosbags_typesys = pytest.importorskip("rosbags.typesys")
from rosbags.typesys import Stores, get_types_from_msg, get_typestore  # noqa: E402
from rosbags.typesys.base import Nodetype  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PKG = "emem_ros"

MESSAGES = ("BodyCrossing", "BodyReading", "Entity", "Episode", "Gist", "MemoryHit")

# The contract with planners written for the peer `emem` package: tool names and
# parameter names, in order. Renaming any of them breaks those planners.
TOOLS: dict[str, tuple[str, ...]] = {
    "semantic_search": ("query", "n_results", "layer", "time_after", "time_before",
                        "near_x", "near_y", "spatial_radius", "episode_id"),
    "spatial_query": ("x", "y", "z", "radius", "layer", "time_after", "time_before", "n_results"),
    "temporal_query": ("time_after", "time_before", "last_n_minutes", "layer",
                       "near_x", "near_y", "spatial_radius", "order", "n_results"),
    "episode_summary": ("episode_id", "task_name", "last_n"),
    "get_current_context": ("radius", "include_recent_minutes"),
    "search_gists": ("query", "n_results", "time_after", "time_before"),
    "entity_query": ("name", "entity_type", "near_x", "near_y", "spatial_radius", "last_seen_after", "n_results"),
    "locate": ("concept", "n_results", "layer", "time_after", "time_before"),
    "recall": ("query", "n_results", "radius_multiplier"),
    # Optional parameters may be added after emem's; body_status(layers) calls keep working.
    "body_status": ("layers", "at_time", "below", "above", "time_after", "time_before", "n_results"),
}
ACTIONS: dict[str, tuple[str, ...]] = {
    "store_specific_memory": ("text", "x", "y", "z", "layer_name", "metadata_json", "position_is", "view_range"),
    "start_episode": ("name", "parent_episode_id", "goal", "agent_id"),
    "end_episode": ("consolidate", "result", "reflection", "success"),
}
OTHER_SERVICES: dict[str, tuple[str, ...]] = {
    "record_experience": ("goal", "action", "result", "reflection", "success", "tags", "metadata_json"),
    "find_experiences": ("query", "success", "tags", "time_after", "time_before", "episode_id", "n_results"),
    "memory_stats": (),
    "forget": ("ids", "match", "similar_to", "min_similarity", "entity", "x", "y", "radius", "since", "until",
               "layer", "reason", "dry_run"),
    "call_tool": ("tool", "arguments_json"),
    "list_tools": ("read_only",),
}
ALL_SERVICES = {**TOOLS, **ACTIONS, **OTHER_SERVICES}

# Typed result lists beyond the common success / message / text.
RESULT_LISTS: dict[str, dict[str, str]] = {
    "semantic_search": {"hits": "MemoryHit[]"},
    "spatial_query": {"hits": "MemoryHit[]"},
    "temporal_query": {"hits": "MemoryHit[]"},
    "episode_summary": {"episodes": "Episode[]"},
    "get_current_context": {"nearby": "MemoryHit[]", "entities": "MemoryHit[]", "gists": "MemoryHit[]",
                            "recent": "MemoryHit[]", "body": "BodyReading[]"},
    "search_gists": {"gists": "Gist[]"},
    "entity_query": {"entities": "Entity[]"},
    "locate": {"hits": "MemoryHit[]", "location": "geometry_msgs/msg/PointStamped", "radius": "float64",
               "found": "bool"},
    "recall": {"hits": "MemoryHit[]", "nearby": "MemoryHit[]"},
    "body_status": {"readings": "BodyReading[]", "crossings": "BodyCrossing[]"},
    "store_specific_memory": {"id": "string"},
    "start_episode": {"episode_id": "string"},
    "end_episode": {"episode_id": "string"},
    "forget": {"id": "string"},
    "record_experience": {"id": "string"},
    "find_experiences": {"result_json": "string"},
    "memory_stats": {"stats_json": "string"},
    "call_tool": {"result_json": "string"},
    "list_tools": {"tools_json": "string"},
}

# Request conventions, by field name.
REQUEST_TYPES: dict[str, str] = {
    "time_after": "string", "time_before": "string", "last_seen_after": "string",
    "x": "float64", "y": "float64", "z": "float64", "near_x": "float64", "near_y": "float64",
    "spatial_radius": "float64", "radius": "float64", "n_results": "uint32", "last_n": "uint32",
    "last_n_minutes": "float64", "include_recent_minutes": "float64", "radius_multiplier": "float64",
    "success": "int8", "layers": "string[]", "tags": "string[]", "consolidate": "bool",
    "at_time": "string", "below": "float64", "above": "float64", "read_only": "bool",
    "ids": "string[]", "min_similarity": "float64", "dry_run": "bool", "view_range": "float64",
}

# Field names that collide with a keyword of a generated language break the build
# (ros2/rosidl#272) or the IDL step (ros2/rosidl#740).
CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
decltype default delete do double dynamic_cast else enum explicit export extern false float for friend
goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private
protected public register reinterpret_cast requires restrict return short signed sizeof static
static_assert static_cast struct switch template this thread_local throw true try typedef typeid
typename union unsigned using virtual void volatile wchar_t while xor xor_eq
""".split())
IDL_KEYWORDS = frozenset(k.lower() for k in """
abstract any alias attribute bitfield bitmask bitset boolean case char component connector const consumes
context custom default double exception emits enum eventtype factory false finder fixed float getraises
getter home import in inout interface local long manages map mirrorport module multiple native object
octet oneway out primarykey private port porttype provides public publishes raises readonly setraises
setter sequence short string struct supports switch true truncatable typedef typeid typename typeprefix
unsigned union uses valuebase valuetype void wchar wstring int8 uint8 int16 uint16 int32 uint32 int64
uint64
""".split())
# `concept` (locate) is part of the emem contract; it is a keyword only from C++20 on,
# and the generated C++ is compiled as C++17 or older (documented in Locate.srv).
KEYWORD_EXCEPTIONS = frozenset({"concept"})

FIELD_NAME = re.compile(r"^[a-z](?:_?[a-z0-9]+)*$")  # rosidl: lower snake, no '__', no trailing '_'
CONSTANT_NAME = re.compile(r"^[A-Z](?:_?[A-Z0-9]+)*$")
TYPE_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def srv_name(tool: str) -> str:
    return "".join(part.capitalize() for part in tool.split("_"))


def split_srv(text: str) -> tuple[str, str]:
    lines = text.splitlines(keepends=True)
    separators = [i for i, line in enumerate(lines) if line.strip() == "---"]
    assert len(separators) == 1, f"a .srv needs exactly one '---' line, found {len(separators)}"
    cut = separators[0]
    return "".join(lines[:cut]), "".join(lines[cut + 1:])


def type_str(desc: Any) -> str:
    """'string', 'float64', 'geometry_msgs/msg/Point', 'MemoryHit[]' (own types short)."""
    node, detail = desc
    if node == Nodetype.BASE:
        return detail[0]
    if node == Nodetype.NAME:
        return detail.removeprefix(f"{PKG}/msg/")
    if node in (Nodetype.SEQUENCE, Nodetype.ARRAY):
        inner, size = detail
        return f"{type_str(inner)}[{size if node == Nodetype.ARRAY else ''}]"
    raise AssertionError(f"unexpected field type {desc!r}")


def parts_of(service: str) -> tuple[str, str]:
    # rosbags resolves an unqualified type relative to its owner's folder, rosidl
    # to the package's msg/; naming the parts under msg/ gives rosidl's meaning.
    return f"{PKG}/msg/{service}_Request", f"{PKG}/msg/{service}_Response"


@pytest.fixture(scope="module")
def typestore():
    store = get_typestore(Stores.ROS2_HUMBLE)
    types: dict[str, Any] = {}
    for name in MESSAGES:
        types.update(get_types_from_msg((ROOT / "msg" / f"{name}.msg").read_text(), f"{PKG}/msg/{name}"))
    for path in sorted((ROOT / "srv").glob("*.srv")):
        request, response = split_srv(path.read_text())
        request_name, response_name = parts_of(path.stem)
        types.update(get_types_from_msg(request, request_name))
        types.update(get_types_from_msg(response, response_name))
    store.register(types)
    return store


EMPTY_PLACEHOLDER = "structure_needs_at_least_one_member"
"""The member rosidl (and rosbags) put into an empty structure, e.g. MemoryStats' request."""


def fields(typestore, typename: str) -> dict[str, str]:
    return {name: type_str(desc) for name, desc in typestore.fielddefs[typename][1] if name != EMPTY_PLACEHOLDER}


def constants(typestore, typename: str) -> list[tuple[str, str, Any]]:
    return list(typestore.fielddefs[typename][0])


def all_typenames() -> list[str]:
    names = [f"{PKG}/msg/{m}" for m in MESSAGES]
    for service in sorted(srv_name(s) for s in ALL_SERVICES):
        names += parts_of(service)
    return names


# ---------------------------------------------------------------------- interface files
def test_interface_files_are_exactly_the_contract() -> None:
    assert sorted(p.stem for p in (ROOT / "msg").glob("*.msg")) == sorted(MESSAGES)
    assert sorted(p.stem for p in (ROOT / "srv").glob("*.srv")) == sorted(srv_name(s) for s in ALL_SERVICES)


@pytest.mark.parametrize("typename", all_typenames())
def test_interface_parses_and_every_type_resolves(typestore, typename: str) -> None:
    # get_msgdef loads nested types too: an unknown or misspelled type raises here.
    msgdef = typestore.get_msgdef(typename)
    assert msgdef.name == typename


@pytest.mark.parametrize("service", sorted(ALL_SERVICES))
def test_request_fields_keep_the_tool_parameter_names(typestore, service: str) -> None:
    request, _ = parts_of(srv_name(service))
    assert tuple(fields(typestore, request)) == ALL_SERVICES[service]


@pytest.mark.parametrize("service", sorted(ALL_SERVICES))
def test_request_fields_follow_the_conventions(typestore, service: str) -> None:
    request, _ = parts_of(srv_name(service))
    for name, typ in fields(typestore, request).items():
        # Anything without a numeric or list convention is text, where empty means "any / not given".
        expected = REQUEST_TYPES.get(name, "string")
        assert typ == expected, f"{service}.{name} is {typ}, the convention says {expected}"


@pytest.mark.parametrize("service", sorted(ALL_SERVICES))
def test_response_is_success_message_results_text(typestore, service: str) -> None:
    _, response = parts_of(srv_name(service))
    got = fields(typestore, response)
    names = list(got)
    assert names[:2] == ["success", "message"] and names[-1] == "text", names
    assert (got["success"], got["message"], got["text"]) == ("bool", "string", "string")
    for name, typ in RESULT_LISTS[service].items():
        assert got.get(name) == typ, f"{service} response {name}: {got.get(name)!r}, expected {typ}"


def test_unset_conventions_have_defaults_where_ros_allows_them() -> None:
    # rosidl can default ints and bools (not NaN), so "not given" must be the default there.
    for service in ("EndEpisode", "RecordExperience", "FindExperiences"):
        request, _ = split_srv((ROOT / "srv" / f"{service}.srv").read_text())
        assert re.search(r"^int8 success -1\s*$", request, re.M), f"{service}: success must default to -1"
    request, _ = split_srv((ROOT / "srv" / "EndEpisode.srv").read_text())
    assert re.search(r"^bool consolidate true\s*$", request, re.M), "consolidate defaults to true, as the tool"


def test_message_fields(typestore) -> None:
    point, time = "geometry_msgs/msg/Point", "builtin_interfaces/msg/Time"
    assert fields(typestore, f"{PKG}/msg/MemoryHit") == {
        "id": "string", "kind": "string", "text": "string", "layer": "string", "source_type": "string",
        "position": point, "has_position": "bool", "frame_id": "string", "stamp": time, "score": "float64",
        "episode_id": "string", "count": "uint32", "metadata_json": "string"}
    assert fields(typestore, f"{PKG}/msg/Episode") == {
        "id": "string", "name": "string", "status": "string", "start": time, "end": time,
        "parent_id": "string", "previous_id": "string", "summary": "string", "goal": "string",
        "action": "string", "result": "string", "reflection": "string", "success": "int8",
        "observation_count": "uint32"}
    assert fields(typestore, f"{PKG}/msg/Entity") == {
        "id": "string", "name": "string", "entity_type": "string", "position": point, "frame_id": "string",
        "spread": "float64", "first_seen": time, "last_seen": time, "sightings": "uint32",
        "confidence": "float64", "layer": "string"}
    assert fields(typestore, f"{PKG}/msg/Gist") == {
        "id": "string", "text": "string", "centroid": point, "radius": "float64", "time_start": time,
        "time_end": time, "source_count": "uint32", "layers": "string[]", "episode_id": "string"}
    assert fields(typestore, f"{PKG}/msg/BodyReading") == {
        "layer": "string", "text": "string", "value": "float64", "stamp": time, "position": point,
        "has_position": "bool"}
    assert fields(typestore, f"{PKG}/msg/BodyCrossing") == {
        "layer": "string", "direction": "string", "threshold": "float64", "unit": "string",
        "has_before": "bool", "before": "BodyReading", "before_level": "float64", "after": "BodyReading",
        "after_level": "float64"}


def test_constants_match_the_core_vocabulary(typestore) -> None:
    kinds = {value for _, _, value in constants(typestore, f"{PKG}/msg/MemoryHit")}
    assert kinds == {"observation", "gist", "entity", "episode"}
    success = {name: value for name, _, value in constants(typestore, f"{PKG}/msg/Episode")}
    assert success == {"SUCCESS_UNKNOWN": -1, "SUCCESS_FALSE": 0, "SUCCESS_TRUE": 1}


@pytest.mark.parametrize("typename", all_typenames())
def test_names_are_valid_in_every_generated_language(typestore, typename: str) -> None:
    assert TYPE_NAME.match(typename.rsplit("/", 1)[1].split("_")[0])
    for name in fields(typestore, typename):
        assert FIELD_NAME.match(name), f"{typename}.{name} is not a valid rosidl field name"
        if name in KEYWORD_EXCEPTIONS:
            continue
        assert not keyword.iskeyword(name), f"{typename}.{name} is a Python keyword"
        assert name not in CPP_KEYWORDS, f"{typename}.{name} is a C/C++ keyword"
        assert name not in IDL_KEYWORDS, f"{typename}.{name} is an IDL keyword"
    for name, _, _ in constants(typestore, typename):
        assert CONSTANT_NAME.match(name), f"{typename}.{name} is not a valid constant name"


@pytest.mark.parametrize("path", sorted([*(ROOT / "msg").glob("*.msg"), *(ROOT / "srv").glob("*.srv")]),
                         ids=lambda p: p.name)
def test_every_field_is_documented(path: Path) -> None:
    """vision_msgs style: a comment block on top saying what it is for, a comment above each field.

    rosidl attaches a comment to the field right below it, except for the comments
    before the first blank line of a section, which describe the whole structure:
    so a response section opens with a blank line after `---`.
    """
    lines = path.read_text().splitlines()
    assert lines and lines[0].startswith("#"), f"{path.name} must open with a comment saying what it is for"
    previous = ""
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped == "---":
            assert number < len(lines) and not lines[number].strip(), f"{path.name}:{number} needs a blank line after ---"
        is_field = bool(stripped) and not stripped.startswith("#") and stripped != "---"
        if is_field and "=" not in stripped.split("#")[0]:  # constants are self-describing
            assert previous.startswith("#"), f"{path.name}:{number} '{stripped}' has no comment right above it"
        previous = stripped


# ---------------------------------------------------------------------- CMakeLists.txt
def cmake_text() -> str:
    text = (ROOT / "CMakeLists.txt").read_text()
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())  # comments may mention anything


def rosidl_block() -> tuple[list[str], list[str]]:
    match = re.search(r"rosidl_generate_interfaces\(\s*\$\{PROJECT_NAME\}(.*?)\)", cmake_text(), re.S)
    assert match, "CMakeLists.txt must call rosidl_generate_interfaces(${PROJECT_NAME} ...)"
    files_part, _, deps_part = match.group(1).partition("DEPENDENCIES")
    return re.findall(r'"?([\w/]+\.(?:msg|srv))"?', files_part), deps_part.split()


def test_cmake_lists_every_interface_file_and_nothing_else() -> None:
    listed, _ = rosidl_block()
    on_disk = sorted(f"{p.parent.name}/{p.name}" for p in [*(ROOT / "msg").glob("*.msg"), *(ROOT / "srv").glob("*.srv")])
    assert len(listed) == len(set(listed)), "an interface is listed twice"
    assert sorted(listed) == on_disk


def test_cmake_dependencies_cover_every_referenced_package(typestore) -> None:
    _, deps = rosidl_block()
    referenced = set()
    for typename in all_typenames():
        for typ in fields(typestore, typename).values():
            if "/" in typ:
                referenced.add(typ.split("/")[0])
    assert referenced <= set(deps), f"DEPENDENCIES {deps} misses {referenced - set(deps)}"
    assert set(deps) == {"builtin_interfaces", "geometry_msgs"}


def test_cmake_installs_python_sources_without_colliding_with_the_generator() -> None:
    text = cmake_text()
    assert "ament_python_install_package" not in text, "collides with the generated package (rosidl_python#141)"
    assert re.search(r"ament_get_python_install_dir\(\s*py_dir\s*\)", text)
    assert re.search(r"install\(\s*DIRECTORY\s+emem_ros/\s+DESTINATION\s+\"?\$\{py_dir\}/emem_ros\"?", text)
    assert re.search(r"PATTERN\s+\"?__pycache__\"?\s+EXCLUDE", text)
    programs = re.search(r"install\(\s*PROGRAMS\s+([^)]*?)\s+DESTINATION\s+lib/\$\{PROJECT_NAME\}", text)
    assert programs and set(programs.group(1).split()) == {f"scripts/{name}" for name in ENTRY_SCRIPTS}
    assert re.search(r"install\(\s*DIRECTORY\s+launch\s+config\s+DESTINATION\s+share/\$\{PROJECT_NAME\}", text)
    assert re.search(r"if\(BUILD_TESTING\).*ament_add_pytest_test\(\s*\w+\s+test\b", text, re.S)
    assert text.rstrip().endswith("ament_package()")


# ---------------------------------------------------------------------- package.xml
def test_package_xml_is_an_ament_cmake_interface_package() -> None:
    root = ET.parse(ROOT / "package.xml").getroot()
    assert root.tag == "package" and root.get("format") == "3"
    assert root.findtext("name") == PKG
    init = (ROOT / "emem_ros" / "__init__.py").read_text()
    version = re.search(r'^__version__ = "([^"]+)"', init, re.M)
    assert version and root.findtext("version") == version.group(1), "package.xml and emem_ros disagree on version"
    assert root.findtext("export/build_type") == "ament_cmake"
    assert root.findtext("member_of_group") == "rosidl_interface_packages"

    def names(*tags: str) -> set[str]:
        return {e.text for tag in tags for e in root.findall(tag)}

    assert {"ament_cmake", "ament_cmake_python", "rosidl_default_generators"} <= names("buildtool_depend")
    interfaces = {"builtin_interfaces", "geometry_msgs", "std_msgs", "sensor_msgs", "nav_msgs", "vision_msgs",
                  "visualization_msgs", "diagnostic_msgs", "lifecycle_msgs"}
    assert interfaces <= names("depend", "build_depend")
    assert interfaces | {"rclpy", "launch", "launch_ros", "rosidl_default_runtime", "python3-numpy",
                         "python3-yaml", "python3-scipy"} <= names("depend", "exec_depend")
    assert {"ament_cmake_pytest", "launch_testing", "launch_testing_ros", "python3-pytest"} <= names("test_depend")


def test_package_xml_passes_catkin_pkg_validation() -> None:
    package = pytest.importorskip("catkin_pkg.package")
    parsed = package.parse_package(str(ROOT / "package.xml"))  # validates; raises InvalidPackage
    warnings: list[str] = []
    parsed.validate(warnings=warnings)
    assert warnings == []
    assert parsed.name == PKG and parsed.get_build_type() == "ament_cmake"


# ---------------------------------------------------------------------- launch file and entry script
def launch_tree() -> ast.Module:
    path = ROOT / "launch" / "memory.launch.py"
    source = path.read_text()
    compile(source, str(path), "exec")
    return ast.parse(source)


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    def called(node: ast.Call) -> str:
        func = node.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")

    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and called(n) == name]


def test_launch_file_compiles_and_defines_generate_launch_description() -> None:
    tree = launch_tree()
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)


def test_launch_file_declares_its_arguments() -> None:
    declared = {c.args[0].value for c in calls(launch_tree(), "DeclareLaunchArgument")
                if c.args and isinstance(c.args[0], ast.Constant)}
    assert declared == {"node_name", "namespace", "params_file", "log_level", "use_sim_time", "autostart",
                        "malloc_arena_max"}


def test_launch_file_starts_a_lifecycle_node_humble_can_run() -> None:
    tree = launch_tree()
    (node,) = calls(tree, "LifecycleNode")
    keywords = {k.arg: k.value for k in node.keywords}
    # Humble's LifecycleNode has `namespace` as a required keyword-only argument.
    assert {"package", "executable", "name", "namespace", "parameters", "ros_arguments"} <= set(keywords)
    assert keywords["package"].value == PKG and keywords["executable"].value == "memory_node"
    transitions = {ast.unparse(k.value) for c in calls(tree, "ChangeState") for k in c.keywords
                   if k.arg == "transition_id"}
    assert transitions == {"lifecycle_msgs.msg.Transition.TRANSITION_CONFIGURE",
                           "lifecycle_msgs.msg.Transition.TRANSITION_ACTIVATE"}
    (handler,) = calls(tree, "OnStateTransition")
    states = {k.arg: getattr(k.value, "value", None) for k in handler.keywords}
    assert states.get("goal_state") == "inactive"


ENTRY_SCRIPTS = {"memory_node": "emem_ros.ros.node", "example_planner": "emem_ros.ros.planner"}
"""`ros2 run emem_ros <script>` -> the module whose main() it calls."""


@pytest.mark.parametrize("script", sorted(ENTRY_SCRIPTS))
def test_entry_script_is_executable_and_calls_the_node_main(script: str) -> None:
    path = ROOT / "scripts" / script
    assert os.access(path, os.X_OK), f"scripts/{script} must be executable (chmod +x)"
    source = path.read_text()
    assert source.startswith("#!/usr/bin/env python3\n")
    tree = ast.parse(source)
    compile(source, str(path), "exec")
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == ENTRY_SCRIPTS[script]]
    assert imports and any(alias.name == "main" for alias in imports[0].names)
    assert calls(tree, "main")


# ---------------------------------------------------------------------- the declarations and the .srv files agree
JSON_TO_ROS = {"string": {"string"}, "number": {"float64"}, "integer": {"uint32"}, "boolean": {"int8", "bool"},
               "array": {"string[]"}, "object": {"string"}}


def test_every_declared_tool_with_a_service_matches_its_srv(typestore) -> None:
    """A ToolDef and its .srv cannot drift: same parameters in the same order, compatible types."""
    from emem_ros.agent.tools import AGENT_TOOLS
    from emem_ros.tools.specs import TOOL_SPECS

    declared = [t for t in (*TOOL_SPECS, *AGENT_TOOLS) if t.srv]
    assert {t.srv for t in declared} | {"CallTool", "ListTools"} == {p.stem for p in (ROOT / "srv").glob("*.srv")}
    for tool in declared:
        assert tool.srv == srv_name(tool.name), tool.name
        assert set(tool.srv_omits) <= set(tool.properties), f"{tool.name}: srv_omits names unknown parameters"
        request, _ = parts_of(tool.srv)
        got = fields(typestore, request)
        expected = [name + "_json" if schema.get("type") == "object" else name
                    for name, schema in tool.properties.items() if name not in tool.srv_omits]
        assert list(got) == expected, f"{tool.name}: declared {expected} vs {tool.srv}.srv {list(got)}"
        for name, schema in tool.properties.items():
            if name in tool.srv_omits:
                continue
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            field = name + "_json" if kinds == ["object"] else name
            allowed = set().union(*(JSON_TO_ROS[k] for k in kinds)) if "string" not in kinds else {"string"}
            assert got[field] in allowed, f"{tool.name}.{name}: {kinds} cannot travel as {got[field]}"
