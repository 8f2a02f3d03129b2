"""body_status: the robot's own readings — now, as of a past time, or when they crossed a level.

This is the only tool that returns body (interoception) readings. Three questions:

- *now* (no extra argument): the latest reading of each body layer, its age
  and its trend over the ten minutes before it;
- *as of* ``at_time``: the last reading at or before that time, with the
  trend before it ("what was the battery at 10:05?");
- *when* ``below`` / ``above``: each time a layer's readings crossed a level,
  given in the units body_status shows (30 means 30 %), with the last reading
  on the near side and the first past it ("when did the battery fall below
  30 %?"); newest first, within an optional ``time_after``/``time_before``
  window.

Every question is answered from the (layer, stamp) index: latest / as-of
are one probe per layer; a crossing search walks the layer's rows in the
window newest first, stops once it has ``n_results`` crossings, and never
goes further back than ``SCAN_LIMIT`` rows (saying so in a note), so a
year-long memory costs what a short window costs. Levels come from the
stored values when they map exactly onto the shown numbers (battery: value
x 100 = the percent in the text); the walk is then a few index seeks inside
SQLite (about 20 ms for 50,000 rows on this machine). Layers whose numbers
live only in their texts are read in Python chunks. Archived readings (text
moved to the cold store) still count through their stored value.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Optional, Sequence

from emem_ros.consolidation.readings import display_scale, fmt_level, reading_key, reading_level, same_quantity
from emem_ros.core.errors import InvalidInputError
from emem_ros.core.numbers import finite_or_none
from emem_ros.core.types import NodeKind, SourceType, make_id
from emem_ros.tools.reads import ToolContext
from emem_ros.tools.results import BodyCrossing, BodyReading, BodyStatusResult

TREND_WINDOW = 600.0
"""Seconds back to compare a reading with."""
DEFAULT_CROSSINGS = 5
MAX_CROSSINGS = 20
"""Crossings reported per layer, newest first."""
SCAN_LIMIT = 50_000
"""Rows of one layer a crossing search reads at most (newest first)."""
SCAN_CHUNK = 2_000
SCALE_SAMPLES = 16
"""Newest readings of a layer that decide how its raw values map to shown units."""
SEED_ROWS = 8
"""Readings before a window looked at for the last one with a level."""

_BODY = SourceType.INTEROCEPTION.value
_LAYER = "o.layer = ? AND o.source_type = ?"


@dataclass(frozen=True)
class _Row:
    id: int
    stamp: float
    value: Optional[float]
    text_id: Optional[int]


class LayerLevels:
    """How to read one layer's level in shown units: from raw values times a scale, or from the texts.

    Values are preferred when they map exactly onto what the texts show
    (``display_scale``): they are not rounded, and archived rows keep them.
    """

    def __init__(self, layer: str, scale: Optional[float], unit: str, comparable: bool = True,
                 mixed: Sequence[str] = ()) -> None:
        self.layer = layer
        self.scale = scale
        self.unit = unit
        self.comparable = comparable
        """False when no single number can be compared: none at all ('OK lidar'), or ``mixed``."""
        self.mixed = tuple(mixed)
        """The different quantities the texts' numbers measure, when they disagree (diagnostics)."""

    @classmethod
    def of(cls, env: ToolContext, layer: str) -> "LayerLevels":
        rows = env.reads.body
        samples = rows.samples(layer, SCALE_SAMPLES)
        if not samples:  # every text archived: archival remembered how the values read
            stored = rows.stored_scales().get(layer)
            if stored is not None:
                return cls(layer, float(stored["scale"]), stored["unit"])
        return _levels_of_samples(layer, tuple(samples))

    @classmethod
    def from_samples(cls, layer: str, samples: Sequence[tuple[Optional[str], Optional[float]]]) -> "LayerLevels":
        """How a layer reads, decided from its newest (text, value) readings."""
        units = Counter(level[1] for level in (reading_level(text) for text, _ in samples) if level is not None)
        unit = units.most_common(1)[0][0] if units else ""
        scale = display_scale(samples)
        if scale is None and not units and any(finite_or_none(v) is not None for _, v in samples):
            scale = 1.0  # numbers only in the values ('ok' texts): the value is what there is to compare
        if scale is None and not same_quantity(text for text, _ in samples):
            keys = sorted({k for k in (reading_key(text) for text, _ in samples) if k})
            return cls(layer, None, unit, comparable=False, mixed=keys)
        return cls(layer, scale, unit, comparable=scale is not None or bool(units))

    def level(self, text: Optional[str], value: Optional[float]) -> Optional[float]:
        number = finite_or_none(value)
        if self.scale is not None and number is not None:
            return number * self.scale
        parsed = reading_level(text)
        if parsed is not None and parsed[1] == self.unit:
            return parsed[0]
        return None

    def shown(self, level: float) -> str:
        return fmt_level(level, self.unit)


@lru_cache(maxsize=256)
def _levels_of_samples(layer: str, samples: tuple[tuple[str, Optional[float]], ...]) -> "LayerLevels":
    """``LayerLevels.from_samples``, memoised on the exact samples: between two readings of a layer every
    body_status call sees the same newest readings, and parsing them is most of a call."""
    return LayerLevels.from_samples(layer, samples)


# ---------------------------------------------------------------------- the tool
def body_status(env: ToolContext, layers: Any = None, at_time: Any = None, below: Any = None, above: Any = None,
                time_after: Any = None, time_before: Any = None, n_results: Any = None) -> BodyStatusResult:
    now = env.prepare()
    wanted = _layer_list(layers)
    at = env.time("at_time", at_time)
    low, high = _threshold(below, "below"), _threshold(above, "above")
    after, before = env.time("time_after", time_after), env.time("time_before", time_before)
    search = low is not None or high is not None
    if low is not None and high is not None:
        raise InvalidInputError("give either below or above, not both: one search per call "
                                "(e.g. below=30 for 'when did the battery fall below 30 %?')")
    if search and at is not None:
        raise InvalidInputError("at_time cannot be combined with below/above; to search up to a time, "
                                "give time_before instead")
    if not search and (after is not None or before is not None):
        raise InvalidInputError("time_after/time_before only bound a below/above search; for the readings "
                                "at one moment give at_time (e.g. at_time='-1h')")
    if after is not None and before is not None and after > before:
        raise InvalidInputError(f"time_after ({env.fmt(after)}) is later than time_before ({env.fmt(before)});"
                                " swap them")
    count = min(env.count(n_results, default=DEFAULT_CROSSINGS), MAX_CROSSINGS)

    known = env.reads.body.layers()
    notes: list[str] = []
    if wanted is None:
        chosen = known
    else:
        chosen = [name for name in wanted if name in known]
        missing = [name for name in wanted if name not in known]
        if missing:
            notes.append(f"no body readings in {', '.join(repr(m) for m in missing)}; body layers: "
                         + (", ".join(known) if known else "none yet"))

    if search:
        direction = "below" if low is not None else "above"
        threshold = low if low is not None else high
        assert threshold is not None
        crossings: list[BodyCrossing] = []
        units: set[str] = set()
        for layer in chosen:
            levels = LayerLevels.of(env, layer)
            if levels.comparable:
                units.add(levels.unit)
            found, layer_notes = _crossings(env, levels, direction, threshold, after, before, count,
                                            wanted is not None)
            crossings += found
            notes += layer_notes
        crossings.sort(key=lambda c: c.after.stamp, reverse=True)
        shown = fmt_level(threshold, units.pop() if len(units) == 1 else "")
        words = f"{direction} {shown}{_window_words(env, after, before)}"
        return BodyStatusResult([], now, notes, crossings=crossings, search=words)

    if at is not None and at >= now:
        at = None  # 'now' or later: the latest readings are the answer
    readings: list[BodyReading] = []
    for layer in chosen:
        reading, note = _as_of(env, layer, at)
        if reading is not None:
            readings.append(reading)
        if note:
            notes.append(note)
    return BodyStatusResult(readings, now, notes, at_time=at)


# ---------------------------------------------------------------------- arguments
def _layer_list(layers: Any) -> Optional[list[str]]:
    if layers is None or layers == "" or layers == []:
        return None
    if isinstance(layers, str):
        return [name.strip() for name in layers.split(",") if name.strip()]
    if isinstance(layers, (list, tuple)) and all(isinstance(name, str) for name in layers):
        return [name.strip() for name in layers if name.strip()]
    raise InvalidInputError(f"layers must be a list of layer names, got {layers!r}")


def _threshold(value: Any, name: str) -> Optional[float]:
    if value is None:
        return None
    number: Any = value
    if isinstance(value, str):
        text = value.strip().rstrip("%").strip()
        try:
            number = float(text)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        raise InvalidInputError(f"{name} must be a number in the units body_status shows (e.g. {name}=30 for "
                                f"30 %, {name}=70 for 70 °C), got {value!r}")
    return float(number)




def _window_words(env: ToolContext, after: Optional[float], before: Optional[float]) -> str:
    if after is not None and before is not None:
        return f" between {env.fmt(after)} and {env.fmt(before)}"
    if after is not None:
        return f" after {env.fmt(after)}"
    if before is not None:
        return f" before {env.fmt(before)}"
    return ""


# ---------------------------------------------------------------------- readings
def _texts(env: ToolContext, ids: Sequence[Optional[int]]) -> dict[int, str]:
    return env.reads.body.texts([i for i in ids if i is not None])


def _reading(row: _Row, layer: str, text: Optional[str], levels: LayerLevels,
             trend: Optional[str] = None) -> BodyReading:
    if text is None:  # archived: the raw text is in the cold store; the value still says the level
        level = levels.level(None, row.value)
        text = f"{layer} {levels.shown(level)} (archived)" if level is not None else f"{layer} (archived)"
    return BodyReading(layer, text, row.value, row.stamp, make_id(NodeKind.OBSERVATION, row.id), trend)


def _rows(env: ToolContext, where: str, params: Sequence[Any], order: str, limit: int) -> list[_Row]:
    return [_Row(*r) for r in env.reads.body.rows(where, params, order, limit)]


def _as_of(env: ToolContext, layer: str, at: Optional[float]) -> tuple[Optional[BodyReading], Optional[str]]:
    """The last reading at or before ``at`` (None: the latest), with its trend; or a note why none."""
    if at is None:
        found = _rows(env, _LAYER, (layer, _BODY), "o.stamp DESC, o.id DESC", 1)
    else:
        found = _rows(env, f"{_LAYER} AND o.stamp <= ?", (layer, _BODY, at), "o.stamp DESC, o.id DESC", 1)
    if not found:
        if at is None:
            return None, None
        first = _rows(env, f"{_LAYER} AND o.stamp > ?", (layer, _BODY, at), "o.stamp, o.id", 1)
        if not first:
            return None, None
        text = _texts(env, [first[0].text_id]).get(first[0].text_id) if first[0].text_id is not None else None
        shown = text or f"{layer} (archived)"
        return None, (f"no {layer} reading at or before {env.fmt(at)}; the first is "
                      f"'{shown}' at {env.fmt(first[0].stamp)}")
    row = found[0]
    earlier = _rows(env, f"{_LAYER} AND o.stamp >= ? AND o.stamp < ?",
                    (layer, _BODY, row.stamp - TREND_WINDOW, row.stamp), "o.stamp, o.id", 1)
    texts = _texts(env, [row.text_id, *(e.text_id for e in earlier)])
    levels = LayerLevels.of(env, layer)
    trend = None
    if earlier:
        trend = _trend(row, earlier[0], texts, levels)
    reading = _reading(row, layer, texts.get(row.text_id) if row.text_id is not None else None, levels, trend)
    note = None
    if at is not None and at - row.stamp > TREND_WINDOW:
        note = (f"{layer}: the last reading at or before {env.fmt(at)} was taken "
                f"{(at - row.stamp) / 60:.0f} min earlier")
    return reading, note


def _trend(latest: _Row, earlier: _Row, texts: dict[int, str], levels: LayerLevels) -> Optional[str]:
    """The change a person reads in the texts ('+12% over 4 min'); from values when a text is archived."""
    span = latest.stamp - earlier.stamp
    if span <= 0:
        return None
    now_level = reading_level(texts.get(latest.text_id) if latest.text_id is not None else None)
    then_level = reading_level(texts.get(earlier.text_id) if earlier.text_id is not None else None)
    if now_level is not None and then_level is not None:
        if now_level[1] != then_level[1]:
            return None
        delta, unit = now_level[0] - then_level[0], now_level[1]
    else:
        now_value = levels.level(None, latest.value) if now_level is None else now_level[0]
        then_value = levels.level(None, earlier.value) if then_level is None else then_level[0]
        if now_value is None or then_value is None:
            return None
        delta, unit = now_value - then_value, levels.unit
    minutes = span / 60.0
    over = f"over {minutes:.0f} min" if minutes >= 1 else f"over {span:.0f} s"
    if abs(delta) < 1e-9:
        return f"steady {over}"
    return f"{delta:+.3g}{unit} {over}"


# ---------------------------------------------------------------------- crossings
Level = tuple[_Row, float]


@dataclass
class _Search:
    """What one layer's crossing search saw, newest first."""

    found: list[tuple[Level, Level]] = field(default_factory=list)
    """(last reading on the near side, first reading past the level)."""
    reached_start: bool = False
    """The search got back to the start of the window (or the layer's first reading)."""
    oldest_past: Optional[Level] = None
    """With ``reached_start``: the window's oldest reading, when it (and all up to the first crossing) is past."""
    saw_past: bool = False
    """Some reading searched was past the level."""
    extreme: Optional[Level] = None
    """Lowest (below) / highest (above) reading seen; looked for only when none was past the level."""
    rows_read: int = 0
    back_to: Optional[float] = None
    """Stamp of the oldest row read, when the scan stopped at ``SCAN_LIMIT``."""


def _crossings(env: ToolContext, levels: LayerLevels, direction: str, threshold: float, after: Optional[float],
               before: Optional[float], count: int, asked: bool) -> tuple[list[BodyCrossing], list[str]]:
    """The newest ``count`` crossings of one layer in the window, and notes on what was (not) found."""
    layer = levels.layer
    past: Callable[[float], bool] = (lambda v: v < threshold) if direction == "below" else (lambda v: v > threshold)
    limit = levels.shown(threshold)
    notes: list[str] = []
    if not levels.comparable:
        if asked and levels.mixed:
            notes.append(f"{layer} readings measure several things ({', '.join(levels.mixed)}); there is no "
                         f"single level to compare with {limit}")
        elif asked:
            notes.append(f"{layer} readings carry no number to compare with {limit}")
        return [], notes
    if levels.unit == "%" and 0 < abs(threshold) <= 1:
        notes.append(f"{layer} is shown in %: {direction}={fmt_level(threshold)} means {limit}; "
                     f"for {fmt_level(threshold * 100, '%')} give {direction}={fmt_level(threshold * 100)}")

    texts: dict[int, str] = {}
    if levels.scale is not None:
        search = _seek_values(env, levels, direction, threshold, after, before, count)
    else:
        search = _scan_texts(env, levels, past, direction, _window(layer, after, before), count, texts)
    found: list[tuple[Optional[Level], Level]] = list(search.found)

    if search.reached_start and len(found) < count and search.oldest_past is not None:
        oldest = search.oldest_past
        seed = _seed(env, layer, after, levels, texts) if after is not None else None
        if seed is None:
            found.append((None, oldest))  # past the level from the layer's very first reading
        elif not past(seed[1]):
            found.append((seed, oldest))  # crossed right at the start of the window
        else:
            notes.append(f"{layer} was already {direction} {limit} when the window began "
                         f"({levels.shown(seed[1])} at {env.fmt(seed[0].stamp)})")
    if not found and not search.saw_past and search.extreme is not None:
        word = "lowest" if direction == "below" else "highest"
        notes.append(f"{layer} never went {direction} {limit} in the readings searched "
                     f"({word} {levels.shown(search.extreme[1])} at {env.fmt(search.extreme[0].stamp)})")
    elif not found and search.saw_past and not search.reached_start:
        notes.append(f"{layer} was {direction} {limit} in the readings searched, but got there before them")
    elif not found and not search.saw_past and asked:
        notes.append(f"no {layer} readings in the window")
    if len(found) >= count:
        notes.append(f"showing the newest {count} {layer} crossings; older ones may exist "
                     "(raise n_results or give time_before to look further back)")
    elif search.back_to is not None:
        notes.append(f"searched only the newest {search.rows_read:,} {layer} readings (back to "
                     f"{env.fmt(search.back_to)}); give time_after/time_before to search another period")

    needed = [r.text_id for pair in found for r in (pair[0][0] if pair[0] else None, pair[1][0])
              if r is not None and r.text_id is not None and r.text_id not in texts]
    texts.update(_texts(env, needed))

    def reading(row: _Row) -> BodyReading:
        return _reading(row, layer, texts.get(row.text_id) if row.text_id is not None else None, levels)

    crossings = [BodyCrossing(layer=layer, direction=direction, threshold=threshold, unit=levels.unit,
                              after=reading(then[0]), after_level=then[1],
                              before=reading(was[0]) if was is not None else None,
                              before_level=was[1] if was is not None else None)
                 for was, then in found]
    return crossings, notes


def _window(layer: str, after: Optional[float], before: Optional[float],
            source: bool = True) -> tuple[str, list[object]]:
    """SQL condition and parameters for a layer's rows in a time window (on the (layer, stamp) index)."""
    where = ["o.layer = ? AND o.source_type = ?"] if source else ["o.layer = ?"]
    params: list[object] = [layer, _BODY] if source else [layer]
    if after is not None:
        where.append("o.stamp >= ?")
        params.append(after)
    if before is not None:
        where.append("o.stamp <= ?")
        params.append(before)
    return " AND ".join(where), params


def _seek_values(env: ToolContext, levels: LayerLevels, direction: str, threshold: float, after: Optional[float],
                 before: Optional[float], count: int) -> _Search:
    """Crossings from the stored values, found by alternating index seeks inside SQLite.

    Newest first: the newest reading past the level, then the newest one
    older than it on the near side; the reading right after that one is the
    crossing. Each seek walks the (layer, stamp) index in C until a row
    matches, so the rows between crossings are passed over without reaching
    Python; a floor at the ``SCAN_LIMIT``-th newest row bounds the walk.
    Readings without a value are passed over.
    """
    base, params = _window(levels.layer, after, before)
    scale = float(levels.scale or 1.0)
    level_sql = "o.value * ?"
    past_sql, near_sql = (f"{level_sql} < ?", f"{level_sql} >= ?") if direction == "below" else \
        (f"{level_sql} > ?", f"{level_sql} <= ?")
    out = _Search()
    index_only, index_params = _window(levels.layer, after, before, source=False)
    # the index alone: the stamp SCAN_LIMIT rows back, if the window holds more
    floor_stamp = env.reads.body.stamp_at(index_only, index_params, SCAN_LIMIT)
    if floor_stamp is not None:
        base += " AND o.stamp > ?"
        params = [*params, floor_stamp]
        out.back_to, out.rows_read = float(floor_stamp), SCAN_LIMIT
    newest = "o.stamp DESC, o.id DESC"

    def one(condition: str, values: list[float], order: str = newest) -> Optional[_Row]:
        rows = _rows(env, f"{base} AND {condition}", [*params, *values], order, 1)
        return rows[0] if rows else None

    def level(row: _Row) -> Level:
        return row, float(row.value or 0.0) * scale  # rows of a crossing search all have a value (SQL)

    upper: Optional[_Row] = None  # search strictly older than this row
    older = "(o.stamp, o.id) < (?, ?)"
    while len(out.found) < count:
        bound = ([older], [upper.stamp, upper.id]) if upper is not None else ([], [])
        gone = one(" AND ".join([*bound[0], past_sql]), [*bound[1], scale, threshold])
        if gone is None:
            break
        out.saw_past = True
        was = one(f"{older} AND {near_sql}", [gone.stamp, gone.id, scale, threshold])
        if was is None:  # past all the way back to the floor
            first = one(f"o.value IS NOT NULL AND {older.replace('<', '<=')}", [gone.stamp, gone.id],
                        order="o.stamp, o.id")
            out.oldest_past = level(first) if first is not None else level(gone)
            break
        then = one("o.value IS NOT NULL AND (o.stamp, o.id) > (?, ?)", [was.stamp, was.id], order="o.stamp, o.id")
        assert then is not None  # 'gone' itself lies after 'was'
        out.found.append((level(was), level(then)))
        upper = was
    else:
        return out  # count reached
    out.reached_start = out.back_to is None
    if not out.saw_past:
        row = env.reads.body.extreme(base, params, lowest=direction == "below")
        if row is not None:
            out.extreme = level(_Row(*row))
    return out


def _scan_texts(env: ToolContext, levels: LayerLevels, past: Callable[[float], bool], direction: str,
                window: tuple[str, list[object]], count: int, texts: dict[int, str]) -> _Search:
    """Crossings from the numbers in the texts: the layer's rows read newest first, in chunks, in Python."""
    base, params = window
    out = _Search()
    newer: Optional[Level] = None  # the reading just after the one being looked at
    cursor: Optional[_Row] = None
    while len(out.found) < count and out.rows_read < SCAN_LIMIT:
        size = min(SCAN_CHUNK, SCAN_LIMIT - out.rows_read)
        if cursor is None:
            rows = _rows(env, base, params, "o.stamp DESC, o.id DESC", size)
        else:
            rows = _rows(env, f"{base} AND (o.stamp, o.id) < (?, ?)", [*params, cursor.stamp, cursor.id],
                         "o.stamp DESC, o.id DESC", size)
        out.rows_read += len(rows)
        texts.update(_texts(env, [r.text_id for r in rows if r.text_id not in texts]))
        for row in rows:
            level = levels.level(texts.get(row.text_id) if row.text_id is not None else None, row.value)
            if level is None:
                continue
            if out.extreme is None or (level < out.extreme[1] if direction == "below" else level > out.extreme[1]):
                out.extreme = (row, level)
            out.saw_past = out.saw_past or past(level)
            if newer is not None and past(newer[1]) and not past(level):
                out.found.append(((row, level), newer))
                if len(out.found) >= count:
                    return out
            newer = (row, level)
        if len(rows) < size:
            out.reached_start = True
            if newer is not None and past(newer[1]):
                out.oldest_past = newer
            return out
        cursor = rows[-1]
    if len(out.found) < count and cursor is not None:
        out.back_to = cursor.stamp
    return out


def _seed(env: ToolContext, layer: str, after: float, levels: LayerLevels,
          texts: dict[int, str]) -> Optional[tuple[_Row, float]]:
    """The last reading with a level before the window: what the first reading in it is compared with."""
    rows = _rows(env, f"{_LAYER} AND o.stamp < ?", (layer, _BODY, after), "o.stamp DESC, o.id DESC", SEED_ROWS)
    texts.update(_texts(env, [r.text_id for r in rows if r.text_id not in texts]))
    for row in rows:
        level = levels.level(texts.get(row.text_id) if row.text_id is not None else None, row.value)
        if level is not None:
            return row, level
    return None

