"""Summaries without an LLM: deduplicated, counted, ordered; and the LLM hand-off.

A gist of 400 detections should read like a person's note, not a log:
``kitchen area (3.1, 4.2), 10:00–10:20: red mug ×4, chair ×2, refrigerator;
scene: a kitchen with a red mug on the table ×3; battery 95%→80%``.
Labels are counted across detection layers, free texts are deduplicated and
counted, numbers become ranges. The same compact lines are what an LLM gets
when one is configured (cheaper and better than hundreds of raw texts); when
it fails the fallback text is used and the failure is counted.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Optional, Protocol, Sequence, TypeGuard

from emem_ros.consolidation.readings import fmt_level, reading_level, same_quantity
from emem_ros.consolidation.rows import LayerKind, ObsRow, labels_of
from emem_ros.core.types import Position

log = logging.getLogger(__name__)

MAX_LABELS = 10
MAX_TEXTS = 3
MAX_TEXT_CHARS = 120
MAX_SUMMARY_CHARS = 900
LLM_FAILURES_BEFORE_PAUSE = 3
"""Consecutive LLM failures after which a run stops asking (a hung server costs one timeout each)."""

ROOM_WORDS = (
    "living room", "dining room", "meeting room", "conference room", "storage room", "waiting room",
    "kitchen", "bedroom", "bathroom", "hallway", "corridor", "office", "garage", "lobby", "laundry",
    "workshop", "warehouse", "balcony", "garden", "cafeteria", "entrance", "staircase", "elevator",
    "lab", "laboratory", "pantry", "closet", "toilet room", "reception", "classroom", "library",
)
_ROOM_PATTERN = re.compile(r"\b(" + "|".join(re.escape(w) for w in ROOM_WORDS) + r")\b", re.IGNORECASE)
_NUMBER = re.compile(r"^(.*?)([+-]?\d+(?:\.\d+)?)(.*)$")
_LABEL_SOURCE = attrgetter("text", "metadata_json")


# ---------------------------------------------------------------------- small formatters
def format_clock(stamp: float) -> str:
    """HH:MM in UTC (deterministic on every machine; the planner sees stamps too)."""
    return time.strftime("%H:%M", time.gmtime(stamp))


def format_span(start: float, end: float) -> str:
    if time.gmtime(start)[:3] != time.gmtime(end)[:3]:
        return (f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(start))}–"
                f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(end))}")
    return f"{format_clock(start)}–{format_clock(end)}"


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def format_number(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def counted(items: Sequence[tuple[str, int]]) -> str:
    return ", ".join(name if n == 1 else f"{name} ×{n}" for name, n in items)


def _ordered_counts(values: Sequence[str]) -> list[tuple[str, int]]:
    """Most frequent first; ties keep first-seen order (Counter preserves insertion)."""
    counts = Counter(values)
    first = {v: i for i, v in reversed(list(enumerate(values)))}
    return sorted(counts.items(), key=lambda kv: (-kv[1], first[kv[0]]))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# ---------------------------------------------------------------------- parts of a digest
def place_name(texts: Sequence[str]) -> Optional[str]:
    """The room word the free texts of a place mention most ("kitchen"), if any."""
    counts: dict[str, int] = {}  # room words in first-seen order; each distinct text is searched once
    for text, n in Counter(texts).items():
        for match in _ROOM_PATTERN.finditer(text):
            word = match.group(1).lower()
            counts[word] = counts.get(word, 0) + n
    return max(counts.items(), key=lambda kv: kv[1])[0] if counts else None


def label_line(rows: Sequence[ObsRow]) -> Optional[str]:
    """Labels counted over the rows, most frequent first (ties: first seen).

    Rows are counted per distinct (text, metadata) first, in C: a robot sends
    the same few detections over and over, so the labels are read once per kind.
    """
    counts: dict[str, int] = {}  # labels in first-seen order
    for (text, metadata_json), n in Counter(map(_LABEL_SOURCE, rows)).items():
        for label in labels_of(text, metadata_json):
            counts[label] = counts.get(label, 0) + n
    if not counts:
        return None
    ordered = sorted(counts.items(), key=lambda kv: -kv[1])  # stable: ties keep first-seen order
    line = counted(ordered[:MAX_LABELS])
    if len(ordered) > MAX_LABELS:
        line += f" and {len(ordered) - MAX_LABELS} more"
    return line


def text_line(layer: str, rows: Sequence[ObsRow]) -> Optional[str]:
    texts = [row.text for row in rows if row.text]
    if not texts:
        return None
    ranged = numeric_ranges(texts)
    if ranged:
        return f"{layer}: {ranged}"
    ordered = _ordered_counts(texts)
    parts = [(_clip(t, MAX_TEXT_CHARS), n) for t, n in ordered[:MAX_TEXTS]]
    line = " / ".join(t if n == 1 else f"{t} ×{n}" for t, n in parts)
    if len(ordered) > MAX_TEXTS:
        line += f" (+{len(ordered) - MAX_TEXTS} other)"
    return f"{layer}: {line}"


def numeric_ranges(texts: Sequence[str]) -> Optional[str]:
    """"battery 95%", …, "battery 80%" -> "battery 95%→80%"; None unless most texts share a template."""
    groups: dict[tuple[str, str], list[float]] = {}
    raw: dict[tuple[str, str], list[str]] = {}
    others: list[str] = []
    for text in texts:
        match = _NUMBER.match(text.strip())
        if not match:
            others.append(text)
            continue
        key = (match.group(1), match.group(3))
        groups.setdefault(key, []).append(float(match.group(2)))
        raw.setdefault(key, []).append(match.group(2))
    numeric = sum(len(v) for v in groups.values())
    if not groups or numeric < 0.8 * len(texts):
        return None
    parts = []
    for (prefix, suffix), values in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        parts.append(prefix + _range(values, raw[(prefix, suffix)], suffix))
    if others:
        parts.append(counted(_ordered_counts(others)[:MAX_TEXTS]))
    return ", ".join(parts)


def _range(values: Sequence[float], raw: Sequence[str], suffix: str = "") -> str:
    if len(values) == 1 or min(values) == max(values):
        return f"{raw[0]}{suffix}"
    text = f"{raw[0]}{suffix}→{raw[-1]}{suffix}"
    low, high = min(values), max(values)
    if low < min(values[0], values[-1]) or high > max(values[0], values[-1]):
        text += f" (range {format_number(low)}–{format_number(high)}{suffix})"
    return text


def reading_line(layer: str, rows: Sequence[ObsRow]) -> Optional[str]:
    """Body readings as a range, from their texts' numbers or their values."""
    texts = [row.text for row in rows if row.text]
    ranged = numeric_ranges(texts) if texts else None
    if ranged:
        return ranged if ranged.lower().startswith(layer.lower()) else f"{layer}: {ranged}"
    values = [row.value for row in rows if row.value is not None and math.isfinite(row.value)]
    if values:
        return f"{layer} " + _range(values, [format_number(v) for v in values])
    return text_line(layer, rows)


def body_digest(rows: Sequence[ObsRow]) -> dict[str, str]:
    """Body readings of a cluster, per layer, in a few words: ``{"battery": "54%→44%"}``.

    Kept in a gist's metadata (never in its text, layers or embedding, so
    perception answers never carry them) and used for an episode's body line.
    """
    by_layer: dict[str, list[ObsRow]] = {}
    for row in sorted(rows, key=lambda r: (r.stamp, r.id)):
        by_layer.setdefault(row.layer, []).append(row)
    return {layer: _body_line(items) for layer, items in sorted(by_layer.items())}


def _body_line(rows: Sequence[ObsRow]) -> str:
    levels = [reading_level(r.text) for r in rows]
    mixed = not same_quantity(r.text for r in rows)  # e.g. diagnostics: temperatures next to frequencies
    if mixed or sum(1 for level in levels if level is not None) < 0.8 * len(rows):
        values = [r.value for r in rows if r.value is not None and math.isfinite(r.value)]
        if not mixed and values and len(values) >= 0.8 * len(rows):  # 'ok' texts: the values are the numbers
            levels = [(v, "") for v in values]
        else:
            texts = _ordered_counts([_clip(r.text, 60) for r in rows if r.text])
            more = f" (+{len(texts) - MAX_TEXTS} other)" if len(texts) > MAX_TEXTS else ""
            return counted(texts[:MAX_TEXTS]) + more
    units = Counter(level[1] for level in levels if level is not None)
    unit = units.most_common(1)[0][0]
    numbers = [level[0] for level in levels if level is not None and level[1] == unit]
    first, last = numbers[0], numbers[-1]
    if first == last and min(numbers) == max(numbers):
        return fmt_level(first, unit)
    text = f"{fmt_level(first, unit)}→{fmt_level(last, unit)}"
    low, high = min(numbers), max(numbers)
    if low < min(first, last) or high > max(first, last):
        text += f" (range {fmt_level(low, unit)}–{fmt_level(high, unit)})"
    return text


def body_line(digest_by_layer: dict[str, str]) -> str:
    """``battery 80%→62%, cpu_temp 41 °C→48 °C``: the body digest as one line."""
    return ", ".join(f"{layer} {text}" for layer, text in digest_by_layer.items())


# ---------------------------------------------------------------------- the digest
@dataclass(frozen=True)
class Digest:
    """A place visit in a few lines: what the fallback prints and what an LLM reads."""

    header: str
    lines: tuple[str, ...]
    place: Optional[str] = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        body = "; ".join(self.lines) if self.lines else "nothing recorded"
        return _clip(f"{self.header}: {body}", MAX_SUMMARY_CHARS)


def digest(rows: Sequence[ObsRow], kinds: dict[str, LayerKind], centroid: Optional[Position],
           start: float, end: float) -> Digest:
    """Summarise one cluster of observations (any mix of layers) without an LLM."""
    by_layer: dict[str, list[ObsRow]] = {}
    for row in rows:
        by_layer.setdefault(row.layer, []).append(row)
    label_rows = [r for layer, items in by_layer.items() if kinds.get(layer) is LayerKind.LABELS for r in items]
    text_layers = sorted(layer for layer in by_layer if kinds.get(layer, LayerKind.TEXT) is LayerKind.TEXT)
    reading_layers = sorted(layer for layer in by_layer if kinds.get(layer) is LayerKind.READINGS)

    lines: list[str] = []
    labels = label_line(label_rows)
    if labels:
        lines.append(labels)
    free_texts: list[str] = []
    for layer in text_layers:
        line = text_line(layer, by_layer[layer])
        if line:
            lines.append(line)
        free_texts.extend(r.text for r in by_layer[layer] if r.text)
    for layer in reading_layers:
        line = reading_line(layer, by_layer[layer])
        if line:
            lines.append(line)
    room = place_name(free_texts)
    where = f"{room} area" if room else "area"
    if centroid is not None:
        where += f" ({centroid[0]:.1f}, {centroid[1]:.1f})"
    elif not room:
        where = "no position"
    header = f"{where}, {format_span(start, end)}"
    counts = {layer: len(items) for layer, items in by_layer.items()}
    return Digest(header=header, lines=tuple(lines), place=room, counts=counts)


# ---------------------------------------------------------------------- the LLM hand-off
@dataclass
class SummaryStats:
    llm: int = 0
    fallback: int = 0
    llm_failures: int = 0


class SummarizerLike(Protocol):
    """What consolidation asks of an LLM (``llm.Summarizer`` is one); both return None on failure."""

    def summarize(self, texts: list[str], context: str = "") -> Optional[str]: ...

    def extract_entities(self, texts: list[str]) -> Optional[list[str]]: ...


def is_summarizer(obj: object) -> TypeGuard[SummarizerLike]:
    """Has callable ``summarize`` and ``extract_entities`` (the duck test; signatures are not checked)."""
    return callable(getattr(obj, "summarize", None)) and callable(getattr(obj, "extract_entities", None))


class SummaryWriter:
    """Asks the LLM (if any) for a summary and falls back to the digest text.

    ``summarizer`` follows ``emem_ros.consolidation.llm.Summarizer``:
    ``summarize(texts, context) -> str | None``. It runs only on the
    consolidation worker. After ``LLM_FAILURES_BEFORE_PAUSE`` consecutive
    failures the writer stops asking until ``reset()`` (the next run), so a
    hung server costs a few timeouts, not one per gist.
    """

    def __init__(self, summarizer: Optional[SummarizerLike] = None) -> None:
        self.summarizer = summarizer
        self.stats = SummaryStats()
        self._consecutive_failures = 0

    def reset(self) -> None:
        self._consecutive_failures = 0

    @property
    def llm_available(self) -> bool:
        return self.summarizer is not None and self._consecutive_failures < LLM_FAILURES_BEFORE_PAUSE

    def write(self, lines: Sequence[str], context: str, fallback: str, prefix: str = "") -> tuple[str, str]:
        """(summary text, 'llm' | 'fallback')."""
        summarizer = self.summarizer
        if summarizer is not None and self.llm_available and lines:
            try:
                answer = summarizer.summarize(list(lines), context)
            except Exception as exc:  # the summarizer should not raise; never lose a gist if it does
                log.warning("LLM summarizer raised %s: %s; using the fallback summary", type(exc).__name__, exc)
                answer = None
            if isinstance(answer, str) and answer.strip():
                self._consecutive_failures = 0
                self.stats.llm += 1
                text = answer.strip()
                return _clip(f"{prefix}: {text}" if prefix else text, MAX_SUMMARY_CHARS * 2), "llm"
            self._consecutive_failures += 1
            self.stats.llm_failures += 1
            if self._consecutive_failures == LLM_FAILURES_BEFORE_PAUSE:
                log.warning("LLM summaries failed %d times in a row; using fallback summaries for the rest "
                            "of this run", LLM_FAILURES_BEFORE_PAUSE)
        self.stats.fallback += 1
        return fallback, "fallback"
