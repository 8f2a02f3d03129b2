"""The tool-calling surface: JSON-schema definitions, argument checks, dispatch by name.

An LLM's call arrives as a name and a JSON object (or its text). Every way
it can be wrong (unknown tool, unknown or missing argument, wrong type, bad
time expression, unknown id) is answered with a plain-words error string
that says how to fix the call; ``dispatch`` never raises. Other modules (the
experience ledger, a ROS node) add tools with ``register``.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import numbers
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

import numpy as np

from emem_ros.core.errors import EmemError
from emem_ros.core.numbers import MAX_INTEGER, storable_int

log = logging.getLogger(__name__)

Handler = Callable[..., Any]
TimeResolver = Callable[[Any], Optional[float]]

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


class ToolCallError(Exception):
    """A call that cannot run as given; the message is the answer the LLM gets."""


@dataclass(frozen=True)
class ToolSpec:
    """One callable tool: its schema for the LLM and the Python handler behind it."""

    name: str
    description: str
    parameters: dict[str, Any]
    """A JSON-schema object: {"type": "object", "properties": {...}, "required": [...]}."""
    handler: Handler
    time_params: frozenset[str] = frozenset()
    """Arguments holding times: checked by the memory's time parser before the call."""
    kind: str = "query"
    """'query' (reads) or 'action' (writes)."""

    def definition(self) -> dict[str, Any]:
        """The OpenAI / Ollama ``tools`` entry."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    @property
    def properties(self) -> dict[str, Any]:
        properties: dict[str, Any] = self.parameters.get("properties", {})
        return properties

    @property
    def required(self) -> list[str]:
        return list(self.parameters.get("required", []))

    def usage(self) -> str:
        args = [p if p in self.required else f"{p}?" for p in self.properties]
        return f"{self.name}({', '.join(args)})"


@dataclass
class ToolRegistry:
    resolve_time: Optional[TimeResolver] = None
    _specs: dict[str, ToolSpec] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ registration
    def register(self, spec: ToolSpec, replace: bool = False) -> None:
        _check_spec(spec)
        with self._lock:
            if spec.name in self._specs and not replace:
                raise ValueError(f"a tool named {spec.name!r} is already registered (pass replace=True)")
            self._specs[spec.name] = spec

    def unregister(self, name: str) -> None:
        with self._lock:
            self._specs.pop(name, None)

    def get(self, name: str) -> Optional[ToolSpec]:
        return self._specs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    @property
    def names(self) -> list[str]:
        return list(self._specs)

    def definitions(self, names: Optional[Iterable[str]] = None,
                    kinds: Optional[Iterable[str]] = None) -> list[dict[str, Any]]:
        wanted = set(names) if names is not None else None
        allowed = set(kinds) if kinds is not None else None
        return [s.definition() for s in list(self._specs.values())
                if (wanted is None or s.name in wanted) and (allowed is None or s.kind in allowed)]

    # ------------------------------------------------------------------ calling
    def dispatch(self, name: Any, arguments: Any = None) -> str:
        """Run a tool by name with JSON arguments; the answer (or the error) as text."""
        try:
            spec = self._find(name)
            kwargs = self.check(spec, arguments)
        except ToolCallError as exc:
            return f"Error: {exc}"
        try:
            return str(spec.handler(**kwargs))
        except (EmemError, ValueError, KeyError, TypeError) as exc:
            return f"Error: {spec.name} could not run: {_words(exc)}"
        except Exception as exc:  # an LLM must get an answer, whatever broke underneath
            log.exception("tool %s failed", spec.name)
            return f"Error: {spec.name} failed unexpectedly ({type(exc).__name__}: {_words(exc)})."

    def _find(self, name: Any) -> ToolSpec:
        if not isinstance(name, str) or not name.strip():
            raise ToolCallError(f"a tool call needs a tool name; available tools: {', '.join(self.names)}")
        spec = self._specs.get(name.strip())
        if spec is not None:
            return spec
        close = difflib.get_close_matches(name.strip(), self.names, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        raise ToolCallError(f"there is no tool named {name!r}.{hint} Available tools: {', '.join(self.names)}.")

    def check(self, spec: ToolSpec, arguments: Any) -> dict[str, Any]:
        """Validated keyword arguments for the handler (raises ToolCallError in plain words)."""
        args = _parse_arguments(spec, arguments)
        properties = spec.properties
        out: dict[str, Any] = {}
        for key, value in args.items():
            if key not in properties:
                close = difflib.get_close_matches(key, list(properties), n=1, cutoff=0.5)
                hint = f" Did you mean '{close[0]}'?" if close else ""
                listing = ", ".join(properties) or "none"
                raise ToolCallError(f"{spec.name} has no argument '{key}'.{hint} Its arguments are: {listing}.")
            if value is None:
                continue
            value = _coerce(spec.name, key, value, properties[key], key in spec.time_params)
            if key in spec.time_params and self.resolve_time is not None:
                try:
                    value = self.resolve_time(value)
                except EmemError as exc:
                    raise ToolCallError(f"{spec.name}: {key}: {_words(exc)}") from None
                if value is None:
                    continue
            out[key] = value
        missing = [r for r in spec.required if r not in out]
        if missing:
            described = "; ".join(f"'{m}' ({properties.get(m, {}).get('description', '').split('.')[0]})"
                                  for m in missing)
            raise ToolCallError(f"{spec.name} needs {described}. Usage: {spec.usage()}.")
        return out


# ---------------------------------------------------------------------- helpers
def _check_spec(spec: ToolSpec) -> None:
    if not spec.name or not spec.name.replace("_", "").isalnum():
        raise ValueError(f"tool name {spec.name!r} must be letters, digits and underscores")
    params = spec.parameters
    if params.get("type") != "object" or not isinstance(params.get("properties", {}), dict):
        raise ValueError(f"{spec.name}: parameters must be a JSON-schema object with properties")
    unknown = set(params.get("required", [])) - set(params.get("properties", {}))
    if unknown:
        raise ValueError(f"{spec.name}: required names unknown properties {sorted(unknown)}")
    if not callable(spec.handler):
        raise ValueError(f"{spec.name}: handler is not callable")


def _parse_arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    if arguments is None:
        return {}
    if isinstance(arguments, (str, bytes)):
        text = arguments.decode("utf-8", "replace") if isinstance(arguments, bytes) else arguments
        if not text.strip():
            return {}
        try:
            arguments = json.loads(text)
        except ValueError as exc:
            raise ToolCallError(f"the arguments of {spec.name} are not valid JSON ({exc}); send an object such as "
                                f"{_example(spec)}") from None
    if not isinstance(arguments, Mapping):
        raise ToolCallError(f"the arguments of {spec.name} must be a JSON object such as {_example(spec)}, "
                            f"not {type(arguments).__name__}")
    return {str(k): v for k, v in arguments.items()}


def _example(spec: ToolSpec) -> str:
    sample = {"string": "...", "number": 1.0, "integer": 10, "boolean": True, "array": ["..."], "object": {}}
    example = {}
    for name in spec.required or list(spec.properties)[:1]:
        kind = _types(spec.properties.get(name, {}))[0]
        example[name] = sample.get(kind, "...")
    return json.dumps(example)


def _types(schema: Mapping[str, Any]) -> list[str]:
    kind = schema.get("type", "string")
    return list(kind) if isinstance(kind, (list, tuple)) else [kind]


def checked_arguments(name: str, arguments: Mapping[str, Any], properties: Mapping[str, Any],
                      time_params: Iterable[str] = ()) -> dict[str, Any]:
    """Arguments checked against their JSON schemas: type (with an LLM's likely meaning), enum, range.

    The one check every call passes, typed Python calls and LLM JSON alike
    (``MemoryTools.call``): numbers must be finite and within the schema's
    bounds, integers within what SQLite holds; None means "not given".
    Raises ToolCallError in plain words.
    """
    times = set(time_params)
    out = dict(arguments)
    for key, value in arguments.items():
        schema = properties.get(key)
        if value is None or schema is None:
            continue
        out[key] = _coerce(name, key, value, schema, key in times)
    return out


def _coerce(tool: str, key: str, value: Any, schema: Mapping[str, Any], is_time: bool) -> Any:
    """Accept what an LLM plausibly means ('5' for 5, "true" for true, 'a' for ['a']); refuse the rest."""
    kinds = _types(schema)
    errors = []
    for kind in kinds:
        try:
            value_out = _as(kind, value, schema, is_time)
        except ValueError as exc:
            errors.append(str(exc))
            continue
        enum = schema.get("enum")
        if enum is not None:
            value_out = _in_enum(tool, key, value_out, enum)
        _check_range(tool, key, value_out, schema)
        return value_out
    expected = " or ".join(_NOUNS.get(k, k) for k in kinds)
    raise ToolCallError(f"{tool}: '{key}' must be {expected}, got {json.dumps(value, default=str)}"
                        + (f" ({errors[0]})" if errors and errors[0] else ""))


_NOUNS = {"string": "text", "number": "a number", "integer": "a whole number", "boolean": "true or false",
          "array": "a list", "object": "a JSON object"}


def _as(kind: str, value: Any, schema: Mapping[str, Any], is_time: bool) -> Any:
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value if is_time else _number_text(value)
        raise ValueError("")
    if kind in ("number", "integer"):
        number = _number(value)
        if kind == "integer":
            if not float(number).is_integer():
                raise ValueError("not a whole number")
            whole = int(number)
            if not storable_int(whole):
                raise ValueError(f"beyond what the memory can hold: ±{MAX_INTEGER}")
            return whole
        return number
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError("")
    if kind == "array":
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except ValueError:
                    raise ValueError("not a JSON list") from None
            else:
                value = [v.strip() for v in text.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError("")
        item_schema = schema.get("items", {})
        return [_as(_types(item_schema)[0], v, item_schema, False) for v in value] if item_schema else list(value)
    if kind == "object":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError("not a JSON object") from None
        if not isinstance(value, Mapping):
            raise ValueError("")
        return dict(value)
    raise ValueError(f"unsupported schema type {kind!r}")


def _number(value: Any) -> float:
    if isinstance(value, (bool, np.bool_)):
        raise ValueError("")
    if isinstance(value, (int, float)):
        number = value
    elif isinstance(value, numbers.Real):  # numpy scalars
        number = int(value) if isinstance(value, numbers.Integral) else float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ValueError("") from None
    else:
        raise ValueError("")
    if isinstance(number, int):
        if not storable_int(number):
            raise ValueError(f"beyond what the memory can hold: ±{MAX_INTEGER}")
    elif not math.isfinite(number):
        raise ValueError("not finite")
    return number


def _number_text(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _in_enum(tool: str, key: str, value: Any, enum: list[Any]) -> Any:
    if value in enum:
        return value
    if isinstance(value, str):
        for option in enum:
            if isinstance(option, str) and option.lower() == value.strip().lower():
                return option
    raise ToolCallError(f"{tool}: '{key}' must be one of {', '.join(map(str, enum))}; got {value!r}")


def _check_range(tool: str, key: str, value: Any, schema: Mapping[str, Any]) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and value < low:
        raise ToolCallError(f"{tool}: '{key}' must be at least {_shown(low)}; got {_shown(value)}")
    if high is not None and value > high:
        raise ToolCallError(f"{tool}: '{key}' must be at most {_shown(high)}; got {_shown(value)}")
    low_x = schema.get("exclusiveMinimum")
    if low_x is not None and value <= low_x:
        raise ToolCallError(f"{tool}: '{key}' must be more than {_shown(low_x)}; got {_shown(value)}")
    high_x = schema.get("exclusiveMaximum")
    if high_x is not None and value >= high_x:
        raise ToolCallError(f"{tool}: '{key}' must be less than {_shown(high_x)}; got {_shown(value)}")


def _shown(number: float) -> str:
    """A bound or a value as a person reads it: 1,000,000 rather than 1e+06; 1e+308 stays short."""
    if float(number).is_integer() and abs(number) < 1e15:
        return f"{int(number):,}"
    return f"{number:g}"


def _words(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return text or type(exc).__name__
