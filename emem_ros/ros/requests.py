"""A typed ROS request as tool arguments, derived from the tool's declaration (``ToolDef``).

Each request field is the tool parameter of the same name (an ``object``
parameter travels as ``<name>_json`` text). ROS cannot leave a field unset,
so the ``.srv`` comments fix what a fresh request's values mean, by type:

- string: empty = not given (a required one is passed as is: the tool says it is missing);
- float64: NaN = not given; 0 = the tool's default where the parameter has one (or must be > 0);
- uint32: 0 = the tool's default;
- int8 for a boolean: -1 = not given, 0 = false, 1 = true; bool: as is;
- string[]: empty = not given.

And by name, because a fresh request holds 0.0 everywhere: ``near_x`` =
``near_y`` = 0 with no ``spatial_radius`` means no place filter; an
all-zero position (``x``, ``y``, ``z`` of a tool without ``radius``) means
no position; ``below`` = ``above`` = 0 means no threshold search, and a 0
beside a given level is unset.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from emem_ros.tools.spec import ToolDef


class ServiceError(Exception):
    """A request that cannot run as given; the message is the answer the caller gets."""


def text(value: Any) -> Optional[str]:
    """Empty string = any / not given."""
    if value is None:
        return None
    out = str(value).strip()
    return out or None


def given(value: Any) -> Optional[float]:
    """NaN = not given; anything else is passed on (the tool rejects infinities in words)."""
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


def or_default(value: Any) -> Optional[float]:
    """0 (a fresh request) or NaN = the tool's default."""
    number = given(value)
    return None if number is None or number == 0.0 else number


def count(value: Any) -> Optional[int]:
    """0 = the tool's default."""
    number = int(value)
    return None if number == 0 else number


def success_flag(value: Any, field: str = "success") -> Optional[bool]:
    """-1 = not given, 0 = false, 1 = true."""
    number = int(value)
    if number == -1:
        return None
    if number in (0, 1):
        return bool(number)
    raise ServiceError(f"{field} must be -1 (not given), 0 (failed) or 1 (succeeded), got {number}")


def json_object(raw: Any, field: str) -> Optional[dict[str, Any]]:
    """Empty = none; otherwise a JSON object."""
    value_text = text(raw)
    if value_text is None:
        return None
    try:
        value = json.loads(value_text)
    except ValueError as exc:
        raise ServiceError(f"{field} is not valid JSON ({exc}); send an object such as "
                           '{"source": "operator"}') from None
    if not isinstance(value, dict):
        raise ServiceError(f"{field} must be a JSON object such as {{\"source\": \"operator\"}}, "
                           f"not {type(value).__name__}")
    return value


def strings(values: Any) -> Optional[list[str]]:
    items = [str(v).strip() for v in (values or []) if str(v).strip()]
    return items or None


def place(near_x: Any, near_y: Any, radius: Any) -> dict[str, Any]:
    """near_x/near_y/spatial_radius as tool arguments (see the module docstring)."""
    x, y, r = given(near_x), given(near_y), or_default(radius)
    if x == 0.0 and y == 0.0 and r is None:
        x = y = None
    return {"near_x": x, "near_y": y, "spatial_radius": r if (x is not None or y is not None) else None}


def thresholds(below: Any, above: Any) -> tuple[Optional[float], Optional[float]]:
    """NaN = not given; 0 in both (a fresh request) = no crossing search; 0 next to NaN is a real 0."""
    low, high = given(below), given(above)
    if low == 0.0 and high == 0.0:
        return None, None
    if low == 0.0 and high is not None:
        low = None  # a fresh 0 beside a given 'above'
    if high == 0.0 and low is not None:
        high = None
    return low, high


def _kinds(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type", "string")
    return list(kind) if isinstance(kind, (list, tuple)) else [kind]


def _field(tool: ToolDef, request: Any, name: str, schema: dict[str, Any]) -> Any:
    kinds = _kinds(schema)
    if "object" in kinds:
        return json_object(getattr(request, f"{name}_json"), f"{name}_json")
    raw = getattr(request, name)
    if "array" in kinds:
        return strings(raw)
    if "boolean" in kinds:
        return bool(raw) if isinstance(raw, bool) else success_flag(raw, name)
    if "integer" in kinds:
        return count(raw)
    if "number" in kinds and "string" not in kinds:
        has_default = "default" in schema or "exclusiveMinimum" in schema
        return or_default(raw) if has_default else given(raw)
    return raw if name in tool.required else text(raw)


def read_request(tool: ToolDef, request: Any) -> dict[str, Any]:
    """The keyword arguments of ``tool`` a ROS request gives (unset ones left out: the tool's defaults apply)."""
    properties = tool.properties
    args: dict[str, Any] = {}
    for name, schema in properties.items():
        if name not in tool.srv_omits:
            args[name] = _field(tool, request, name, schema)
    if "near_x" in args and "near_y" in args:
        args.update(place(request.near_x, request.near_y, getattr(request, "spatial_radius", 0.0)))
    if "below" in args and "above" in args:
        args["below"], args["above"] = thresholds(request.below, request.above)
    if {"x", "y", "z"} <= set(args) and "radius" not in properties:
        x, y, z = args["x"], args["y"], args["z"]
        if x == 0.0 and y == 0.0 and not z:  # a fresh request: no position was given
            args["x"] = args["y"] = None
        args["z"] = z if z else None
    missing = [name for name in tool.required if args.get(name) is None and name not in tool.srv_omits]
    if missing:
        described = "; ".join(f"{name} ({properties[name].get('description', '').rstrip('.')})" for name in missing)
        raise ServiceError(f"{tool.name} needs {described}")
    return {name: value for name, value in args.items() if value is not None}
