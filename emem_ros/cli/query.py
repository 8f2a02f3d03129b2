"""``emem query DB TOOL key=value ...``: ask a memory file what a planner would ask it.

Arguments are the tool's own (``emem query memory.db locate concept="red mug"``);
a value is read as JSON when it parses (``n_results=5``, ``layers='["battery"]'``),
else as text (``time_after=-10m``). Relative times resolve against ``--now``:
by default the newest observation's time, so a replayed bag answers "the last
10 minutes" in bag time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import textwrap
from typing import Any, Sequence

from emem_ros.cli.common import NOW_CHOICES
from emem_ros.core.errors import EmemError, InvalidInputError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "query", help="run one memory tool on a memory file and print the answer",
        description="Run TOOL (semantic_search, spatial_query, temporal_query, locate, recall, entity_query, "
                    "search_gists, episode_summary, get_current_context, body_status, ...) with key=value "
                    "arguments, exactly as an LLM's tool call would.")
    parser.add_argument("db", nargs="?", help="memory file (.db); leave out with --fleet")
    parser.add_argument("tool", nargs="?", help="tool name; leave out (or --list) to list the tools")
    parser.add_argument("arguments", nargs="*", metavar="key=value",
                        help="tool arguments; values are JSON when they parse, text otherwise")
    parser.add_argument("--json", action="store_true", help="print the typed result as JSON")
    parser.add_argument("--now", default="latest", help=f"the memory's clock: {NOW_CHOICES} (default: latest)")
    parser.add_argument("--list", action="store_true", help="list the tools and their arguments")
    parser.add_argument("--ollama-host", default=None, help="Ollama server for a memory built with an Ollama embedder")
    parser.add_argument("--fleet", metavar="URL", default=None,
                        help="ask a fleet store (postgresql://...) instead of a memory file: "
                             "emem query --fleet URL locate concept=\"pallet 4711\" robots='[\"robot2\"]'")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from emem_ros.cli.common import open_memory

    if args.fleet is not None:
        return _fleet(args)
    if not args.db:
        raise InvalidInputError("give a memory file (emem query DB TOOL ...) or a fleet store (--fleet URL)")
    arguments = parse_arguments(args.arguments)
    memory = open_memory(args.db, now=args.now, ollama_host=args.ollama_host)
    try:
        if args.list or not args.tool:
            print(tool_list(memory))
            return 0
        return _answer(memory, args.tool, arguments, args.json)
    finally:
        memory.close()


def _fleet(args: argparse.Namespace) -> int:
    """``--fleet URL``: the positionals are TOOL key=value ... (there is no memory file)."""
    from emem_ros.fleet.memory import FleetMemory

    words = [w for w in (args.db, args.tool, *args.arguments) if w is not None]
    tool, arguments = (words[0], parse_arguments(words[1:])) if words else (None, {})
    now: Any = None if args.now == "wall" else args.now
    if isinstance(now, str) and now != "latest":
        try:
            now = float(now)
        except ValueError:
            raise InvalidInputError(f"--now with --fleet is 'latest', 'wall' or epoch seconds, got {now!r}") from None
    fleet = FleetMemory(args.fleet, now=now, ollama_host=args.ollama_host)
    try:
        if args.list or not tool:
            print(tool_list(fleet))
            return 0
        return _answer(fleet, tool, arguments, args.json)
    finally:
        fleet.close()


def _answer(target: Any, tool: str, arguments: dict[str, Any], as_json: bool) -> int:
    """Run one tool on a memory or a fleet and print its answer (errors to stderr, exit code 1)."""
    if as_json:
        return _print_json(target, tool, arguments)
    answer = target.dispatch_tool_call(tool, arguments)
    if answer.startswith("Error:"):
        print(answer, file=sys.stderr)
        return 1
    print(answer)
    return 0


def parse_arguments(items: Sequence[str]) -> dict[str, Any]:
    """['concept=red mug', 'n_results=3'] -> {'concept': 'red mug', 'n_results': 3}."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidInputError(f"tool arguments are key=value, got {item!r} "
                                    "(quote values with spaces: concept=\"red mug\")")
        if key in out:
            raise InvalidInputError(f"argument {key!r} is given twice")
        out[key] = parse_value(raw)
    return out


def parse_value(raw: str) -> Any:
    """JSON when it parses (numbers, true/false, null, lists, objects), else the text itself."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(value, float) and not math.isfinite(value):
        return raw  # 'NaN' / 'Infinity' stay text; the tool rejects them in plain words
    return value


def _registry(memory: Any) -> Any:
    return memory.registry if hasattr(memory, "registry") else memory.tools.registry


def tool_list(memory: Any) -> str:
    registry = _registry(memory)
    lines = ["Tools (arguments with ? are optional):"]
    for name in registry.names:
        spec = registry.get(name)
        lines.append(f"  {spec.usage()}  [{spec.kind}]\n      {textwrap.shorten(spec.description, 110)}")
    return "\n".join(lines)


def _print_json(memory: Any, tool: str, arguments: dict[str, Any]) -> int:
    """The typed result: the same checks as a tool call, then the handler's dataclass as JSON."""
    from emem_ros.tools.registry import ToolCallError

    registry = _registry(memory)
    try:
        spec = registry._find(tool)
        kwargs = registry.check(spec, arguments)
        result = spec.handler(**kwargs)
    except ToolCallError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except (EmemError, ValueError, KeyError, TypeError) as exc:
        print(f"Error: {spec.name} could not run: {exc}", file=sys.stderr)
        return 1
    payload: dict[str, Any] = {"tool": spec.name, "arguments": kwargs}
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        payload["result"] = dataclasses.asdict(result)
    else:
        payload["result"] = result if isinstance(result, (dict, list, int, float, str, bool)) else str(result)
    payload["text"] = str(result)
    print(json.dumps(payload, indent=1, default=_jsonable))
    return 0


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
