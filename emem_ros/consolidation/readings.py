"""How a body reading's number is read, shared by consolidation digests and body_status.

A body reading is stored as text a person reads ("battery 54% (11.9 V,
discharging)", "temperature 41.2 °C") and usually a raw ``value`` in the
sensor's own unit (0.537 for the battery). Questions are asked in the shown
units ("below 30" means 30 %), so the *level* of a reading is the number
its text shows. ``display_scale`` finds the power of ten that turns a
layer's raw values into shown units (100 for a battery fraction, 1 for
degrees), so levels stay exact where the text rounds (0.7995 is below 80 %
even though the text says "80%") and archived readings, whose text left the
hot tables, still have a level.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Iterable, Optional

# The parsers below are pure functions of one string and robots repeat their texts ("battery 54%"):
# body_status and the consolidation digests ask about the same few strings again and again, so they
# are memoised (bounded).
_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*(%|°\s?[CF]|[a-zA-Z]{1,3}\b)?")
"""A number not glued to a word ('motor2_temp: 45' reads 45), with an optional unit."""
_KEY = re.compile(r"([A-Za-z0-9_]+)\W*$")
SCALES = (1.0, 100.0, 10.0, 1000.0, 0.01, 0.1, 0.001)
"""Candidate raw-to-shown factors, most likely first."""


@lru_cache(maxsize=8192)
def reading_level(text: Optional[str]) -> Optional[tuple[float, str]]:
    """The first number of a reading's text and its unit: 'battery 54% (11.9 V)' -> (54.0, '%')."""
    if not text:
        return None
    match = _NUMBER.search(text)
    if match is None:
        return None
    return float(match.group(1)), (match.group(2) or "").replace(" ", "")


@lru_cache(maxsize=8192)
def reading_key(text: Optional[str]) -> Optional[str]:
    """What the first number measures: the word right before it ('temperature=68.0' -> 'temperature').

    A diagnostics layer mixes quantities ('motor_left: ok (temperature=44.0)',
    'lidar: ok (frequency=10.0)'); comparing their numbers with each other
    would be meaningless, so callers check that a layer's keys agree.
    """
    if not text:
        return None
    match = _NUMBER.search(text)
    if match is None:
        return None
    word = _KEY.search(text[:match.start()])
    return word.group(1).lower() if word else ""


def same_quantity(texts: Iterable[Optional[str]]) -> bool:
    """True when every text with a number measures the same thing (one key)."""
    return len({k for k in (reading_key(t) for t in texts) if k is not None}) <= 1


@lru_cache(maxsize=8192)
def _decimals(text: Optional[str]) -> int:
    match = _NUMBER.search(text or "")
    if match is None or "." not in match.group(1):
        return 0
    return len(match.group(1).split(".")[1])


def display_scale(samples: Iterable[tuple[Optional[str], Optional[float]]]) -> Optional[float]:
    """The factor s with level(text) == value * s (up to the text's rounding) for every sample.

    None when the values are not the shown quantity (a diagnostic's level
    next to a temperature in its text) or no sample has both: callers then
    read levels from the texts alone.
    """
    pairs = []
    for text, value in samples:
        level = reading_level(text)
        if level is None or value is None or not math.isfinite(value):
            continue
        pairs.append((level[0], float(value), 0.5 * 10.0 ** -_decimals(text) + 1e-9))
    if not pairs:
        return None
    for scale in SCALES:
        if all(abs(shown - value * scale) <= tolerance * 1.001 for shown, value, tolerance in pairs):
            return scale
    return None


def fmt_level(level: float, unit: str = "") -> str:
    """54.0, '%' -> '54%'; 41.23, '°C' -> '41.2 °C'; at most two decimals, no trailing zeros."""
    number = f"{level:.2f}".rstrip("0").rstrip(".")
    if number in ("-0", ""):
        number = "0"
    if not unit:
        return number
    return f"{number}{unit}" if unit == "%" else f"{number} {unit}"
