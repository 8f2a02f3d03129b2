"""Per-layer intake policy: which drafts of a stream are worth storing.

A camera at 30 Hz that sees the same mug for a minute would otherwise write
1,800 identical observations. In ``sampled`` mode a draft is kept when at least
``min_period`` seconds (message time, so replay at any speed behaves the same)
have passed since the last kept draft of the same *track*, and, with
``change_only``, when it says something new or the track has been silent for
``max_silence`` seconds (a steady state is still recorded now and then).

A track is ``(layer, subject)``: the subject is ``draft.metadata["subject"]``
when an adapter sets one (the class of a detection, the name of a diagnostic
status), else the layer alone. Sampling per track keeps the chair that is seen
in the same frame as the mug; counters are kept per layer.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.numbers import finite_or_none, is_finite_number
from emem_ros.ingest.drafts import ObservationDraft

SUBJECT_KEY = "subject"
"""Metadata key an adapter sets to sample one message's items independently."""

MODES = ("all", "sampled")

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_EPSILON = 1e-6  # float stamps of a 30 Hz stream: 30 frames must make a full second


@dataclass(frozen=True)
class IntakeConfig:
    """How one layer's stream is thinned; ``validate`` names the bad field."""

    mode: str = "all"
    """'all' keeps every draft; 'sampled' applies min_period / change_only / max_silence."""
    min_period: float = 1.0
    """Seconds between kept drafts of one track (sampled mode)."""
    change_only: bool = False
    """Keep a draft only when its text (or value, beyond value_tolerance) changed."""
    value_tolerance: float = 0.0
    """A numeric draft counts as changed when its value moves by more than this."""
    max_silence: float = 60.0
    """With change_only, keep an unchanged draft after this many seconds (0 = never)."""

    def validate(self, prefix: str = "intake") -> "IntakeConfig":
        if self.mode not in MODES:
            raise InvalidInputError(f"{prefix}.mode must be 'all' or 'sampled', got {self.mode!r}")
        for name in ("min_period", "value_tolerance", "max_silence"):
            value = getattr(self, name)
            if not is_finite_number(value) or value < 0:
                raise InvalidInputError(f"{prefix}.{name} must be zero or a positive number, got {value!r}")
        if not isinstance(self.change_only, bool):
            raise InvalidInputError(f"{prefix}.change_only must be true or false, got {self.change_only!r}")
        if self.change_only and self.mode != "sampled":
            raise InvalidInputError(
                f"{prefix}.change_only only works with {prefix}.mode 'sampled' (mode 'all' keeps every draft)"
            )
        return self


@dataclass
class IntakeCounts:
    accepted: int = 0
    dropped: int = 0


@dataclass
class _Track:
    stamp: float
    text: str
    shape: str  # the text with its numbers masked: "battery #% (# V, charging)"
    value: Optional[float]


class IntakePolicy:
    """Stateful filter for one or more layers; thread-safe (callbacks run concurrently)."""

    def __init__(
        self,
        mode: str = "all",
        min_period: float = 1.0,
        change_only: bool = False,
        value_tolerance: float = 0.0,
        max_silence: float = 60.0,
        *,
        max_tracks: int = 4096,
    ) -> None:
        self.config = IntakeConfig(mode, min_period, change_only, value_tolerance, max_silence).validate()
        if not isinstance(max_tracks, int) or max_tracks < 1:
            raise InvalidInputError(f"max_tracks must be a positive integer, got {max_tracks!r}")
        self._max_tracks = max_tracks
        self._tracks: OrderedDict[tuple[str, str], _Track] = OrderedDict()
        self._counts: dict[str, IntakeCounts] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: IntakeConfig, **kwargs: Any) -> "IntakePolicy":
        return cls(config.mode, config.min_period, config.change_only, config.value_tolerance,
                   config.max_silence, **kwargs)

    def accept(self, draft: ObservationDraft) -> bool:
        """Decide on one draft and remember it when kept."""
        with self._lock:
            counts = self._counts.setdefault(draft.layer, IntakeCounts())
            keep = self._decide(draft)
            if keep:
                counts.accepted += 1
            else:
                counts.dropped += 1
            return keep

    def counts(self) -> dict[str, IntakeCounts]:
        """Accepted / dropped drafts per layer (a snapshot)."""
        with self._lock:
            return {layer: IntakeCounts(c.accepted, c.dropped) for layer, c in self._counts.items()}

    def reset(self) -> None:
        """Forget every track (e.g. after a clock jump); counters are kept."""
        with self._lock:
            self._tracks.clear()

    # ------------------------------------------------------------------ internals
    def _decide(self, draft: ObservationDraft) -> bool:
        cfg = self.config
        if cfg.mode == "all":
            return True
        key = (draft.layer, str(draft.metadata.get(SUBJECT_KEY, "")))
        track = self._tracks.get(key)
        if track is not None:
            elapsed = draft.stamp - track.stamp
            jumped_back = elapsed < -max(1.0, cfg.min_period)  # bag loop, sim clock reset
            if not jumped_back:
                if elapsed + _EPSILON < cfg.min_period:
                    return False
                if cfg.change_only and not _changed(track, draft, cfg.value_tolerance):
                    silent_long = cfg.max_silence > 0 and elapsed + _EPSILON >= cfg.max_silence
                    if not silent_long:
                        return False
        self._tracks[key] = _Track(draft.stamp, draft.text, _shape(draft.text), finite_or_none(draft.value))
        self._tracks.move_to_end(key)
        while len(self._tracks) > self._max_tracks:
            self._tracks.popitem(last=False)
        return True


def _changed(track: _Track, draft: ObservationDraft, tolerance: float) -> bool:
    value = finite_or_none(draft.value)
    if value is not None and track.value is not None:
        # Numbers move a little all the time: compare the value with a tolerance
        # and the words around it exactly ("discharging" -> "charging" is news).
        return abs(value - track.value) > tolerance or _shape(draft.text) != track.shape
    return draft.text != track.text


def _shape(text: str) -> str:
    return _NUMBER.sub("#", text)


