"""What to forget: a selector, checked once, and its description for the audit trail.

Every criterion given must hold (AND). ``match`` is exact words,
case-insensitive ("red jacket" matches "A man in a Red Jacket." but not
"red jackets" nor "bored jacket"); ``similar_to`` with ``min_similarity``
selects by meaning (cosine of the text's embedding). The audit trail keeps
the selector *without* its free text (``describe``): a log that repeated
"red jacket" would keep what was to be forgotten.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.numbers import is_finite_number
from emem_ros.core.types import NodeKind, parse_id

WITHHELD = "[withheld]"


@dataclass(frozen=True)
class Selector:
    ids: tuple[int, ...] = ()
    """Observation numbers (from 'obs-12' ids)."""
    match: Optional[str] = None
    similar_to: Optional[str] = None
    min_similarity: float = 0.8
    entity: Optional[str] = None
    """An entity id ('ent-3') or name: the entity and the observations that are its sightings."""
    x: Optional[float] = None
    y: Optional[float] = None
    radius: Optional[float] = None
    since: Optional[float] = None
    until: Optional[float] = None
    layer: Optional[str] = None
    pattern: Optional[re.Pattern[str]] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.match is not None:
            object.__setattr__(self, "pattern", words_pattern(self.match))

    @property
    def empty(self) -> bool:
        return not (self.ids or self.match or self.similar_to or self.entity or self.radius is not None
                    or self.since is not None or self.until is not None or self.layer)

    @property
    def by_content(self) -> bool:
        """It names content (words, meaning, an entity): the texts themselves are what must go."""
        return bool(self.match or self.similar_to or self.entity)

    @property
    def words_only(self) -> bool:
        """Only words (and maybe a time range): anything quoting them goes, not only what rows link."""
        return bool(self.match) and not (self.ids or self.similar_to or self.entity or self.radius is not None
                                         or self.layer)

    def matches(self, text: Optional[str]) -> bool:
        return bool(text) and self.pattern is not None and self.pattern.search(text or "") is not None

    def describe(self) -> dict[str, Any]:
        """The selector for the audit trail: free text withheld, everything else as given."""
        out: dict[str, Any] = {}
        if self.ids:
            out["ids"] = len(self.ids)
        if self.match:
            out["match"] = WITHHELD
        if self.similar_to:
            out["similar_to"] = WITHHELD
            out["min_similarity"] = self.min_similarity
        if self.entity:
            out["entity"] = self.entity if self.entity.startswith("ent-") else WITHHELD
        if self.radius is not None:
            out["region"] = [self.x, self.y, self.radius]
        if self.since is not None:
            out["since"] = self.since
        if self.until is not None:
            out["until"] = self.until
        if self.layer:
            out["layer"] = self.layer
        return out


def words_pattern(phrase: str) -> re.Pattern[str]:
    """Exact words, case-insensitive, any whitespace between them, not inside longer words."""
    words = phrase.split()
    if not words:
        raise InvalidInputError("match needs at least one word")
    return re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, words)) + r"(?!\w)", re.IGNORECASE)


def make_selector(ids: Sequence[str] | str | None = None, match: Optional[str] = None,
                  similar_to: Optional[str] = None, min_similarity: Optional[float] = None,
                  entity: Optional[str] = None, x: Optional[float] = None, y: Optional[float] = None,
                  radius: Optional[float] = None, since: Optional[float] = None, until: Optional[float] = None,
                  layer: Optional[str] = None) -> Selector:
    """Check the arguments in plain words; an empty selector is refused (it would forget everything)."""
    numbers: list[int] = []
    for node in [ids] if isinstance(ids, str) else (ids or ()):
        try:
            kind, number = parse_id(str(node).strip())
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        if kind is not NodeKind.OBSERVATION:
            raise InvalidInputError(f"forget takes observation ids ('obs-12'), got {node!r}")
        numbers.append(number)
    region = (x, y, radius)
    if any(v is not None for v in region):
        if not all(is_finite_number(v) for v in region):
            raise InvalidInputError("a region needs x, y and radius, all numbers")
        if float(radius) <= 0:  # type: ignore[arg-type]
            raise InvalidInputError(f"radius must be positive, got {radius!r}")
    for name, value in (("since", since), ("until", until)):
        if value is not None and not is_finite_number(value):
            raise InvalidInputError(f"{name} must be a time, got {value!r}")
    if since is not None and until is not None and float(since) > float(until):
        raise InvalidInputError("since is after until: that range is empty")
    threshold = 0.8 if min_similarity is None else min_similarity
    if not is_finite_number(threshold) or not 0.0 < float(threshold) <= 1.0:
        raise InvalidInputError(f"min_similarity must be in (0, 1], got {min_similarity!r}")
    for name, text in (("match", match), ("similar_to", similar_to), ("entity", entity), ("layer", layer)):
        if text is not None and not str(text).strip():
            raise InvalidInputError(f"{name} is empty")
    selector = Selector(
        ids=tuple(sorted(set(numbers))), match=match.strip() if match else None,
        similar_to=similar_to.strip() if similar_to else None, min_similarity=float(threshold),
        entity=entity.strip() if entity else None,
        x=float(x) if x is not None else None, y=float(y) if y is not None else None,
        radius=float(radius) if radius is not None else None,
        since=float(since) if since is not None else None, until=float(until) if until is not None else None,
        layer=layer.strip() if layer else None)
    if selector.empty:
        raise InvalidInputError("say what to forget: ids, match, similar_to, entity, a region, a time range "
                                "or a layer")
    return selector


def within(selector: Selector, x: Optional[float], y: Optional[float]) -> bool:
    if selector.radius is None:
        return True
    if x is None or y is None:
        return False
    assert selector.x is not None and selector.y is not None
    return math.hypot(x - selector.x, y - selector.y) <= selector.radius
