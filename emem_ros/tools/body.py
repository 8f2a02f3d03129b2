"""body_status: the latest reading of each interoception layer, with its age and trend.

This is the only tool that returns body readings. The (layer, stamp) index
makes "latest of a layer" and "earliest in the last ten minutes" one index
probe each, however long the robot has been running.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.types import NodeKind, SourceType, make_id
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.results import BodyReading, BodyStatusResult

TREND_WINDOW = 600.0
"""Seconds back to compare the latest reading with."""
_BODY = SourceType.INTEROCEPTION.value
_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)\s*(%|°\s?[CF]|[a-zA-Z]{1,3}\b)?")


def body_status(env: ToolEnv, layers: Any = None) -> BodyStatusResult:
    now = env.prepare()
    wanted = _layer_list(layers)
    known = env.catalog.body_layers
    notes: list[str] = []
    if wanted is None:
        chosen = known
    else:
        chosen = [l for l in wanted if l in known]
        missing = [l for l in wanted if l not in known]
        if missing:
            notes.append(f"no body readings in {', '.join(repr(m) for m in missing)}; body layers: "
                         + (", ".join(known) if known else "none yet"))
    readings = [r for r in (_latest(env, layer) for layer in chosen) if r is not None]
    return BodyStatusResult(readings, now, notes)


def _layer_list(layers: Any) -> Optional[list[str]]:
    if layers is None or layers == "" or layers == []:
        return None
    if isinstance(layers, str):
        return [l.strip() for l in layers.split(",") if l.strip()]
    if isinstance(layers, (list, tuple)) and all(isinstance(l, str) for l in layers):
        return [l.strip() for l in layers if l.strip()]
    raise InvalidInputError(f"layers must be a list of layer names, got {layers!r}")


def _latest(env: ToolEnv, layer: str) -> Optional[BodyReading]:
    conn = env.store.reader()
    row = conn.execute(
        "SELECT o.id, t.text, o.stamp, o.value FROM observations o JOIN texts t ON t.id = o.text_id"
        " WHERE o.layer = ? AND o.source_type = ? ORDER BY o.stamp DESC LIMIT 1", (layer, _BODY)).fetchone()
    if row is None:
        return None
    obs_id, text, stamp, value = row
    earlier = conn.execute(
        "SELECT t.text, o.stamp, o.value FROM observations o JOIN texts t ON t.id = o.text_id"
        " WHERE o.layer = ? AND o.source_type = ? AND o.stamp >= ? AND o.stamp < ? ORDER BY o.stamp LIMIT 1",
        (layer, _BODY, stamp - TREND_WINDOW, stamp)).fetchone()
    trend = _trend((text, value), earlier[::2] if earlier else None, stamp - earlier[1] if earlier else 0.0)
    return BodyReading(layer, text, value, stamp, make_id(NodeKind.OBSERVATION, obs_id), trend)


def _reading(text: str, value: Optional[float]) -> tuple[Optional[float], str]:
    """The number a person reads in the text ('battery 54%' -> 54, '%'), else the raw value."""
    match = _NUMBER.search(text)
    if match:
        return float(match.group(1)), (match.group(2) or "").replace(" ", "")
    return (value, "") if value is not None else (None, "")


def _trend(latest: tuple[str, Optional[float]], earlier: Optional[tuple[str, Optional[float]]],
           span: float) -> Optional[str]:
    if earlier is None or span <= 0:
        return None
    now_value, unit = _reading(*latest)
    then_value, then_unit = _reading(*earlier)
    if now_value is None or then_value is None or unit != then_unit:
        return None
    delta = now_value - then_value
    minutes = span / 60.0
    over = f"over {minutes:.0f} min" if minutes >= 1 else f"over {span:.0f} s"
    if abs(delta) < 1e-9:
        return f"steady {over}"
    return f"{delta:+.3g}{unit} {over}"
