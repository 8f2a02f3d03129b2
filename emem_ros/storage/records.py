"""The records the store writes and reads on the ingest path (re-exported by ``store``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from emem_ros.core.types import Position, SourceType
from emem_ros.storage import codec

EmbedFn = Callable[[list[str]], np.ndarray]
_INTEROCEPTION = SourceType.INTEROCEPTION.value  # a plain str: read per observation on ingest


@dataclass
class NewObservation:
    """An observation accepted by `Memory.add`, waiting in working memory."""

    id: int
    text: str
    stamp: float
    layer: str
    source_type: str
    position: Optional[Position]
    frame_id: Optional[str]
    confidence: float = 1.0
    episode_id: Optional[int] = None
    value: Optional[float] = None
    metadata: codec.Metadata = None
    """A dict (imports), or None when ``metadata_json`` holds it."""
    embedding: Optional[np.ndarray] = None
    tier: Optional[str] = None
    """None for a new observation (short_term); an import keeps the tier it had."""
    tier_since: Optional[float] = None
    gist_id: Optional[int] = None
    """SUMMARIZES link kept by an import (new observations have none)."""
    metadata_json: Optional[str] = None
    """``metadata`` as stored (``codec.dumps``), when the caller encoded it already.

    ``Memory.add`` encodes once, strictly, at add time and keeps only this text,
    so a caller mutating its dict later changes nothing and the flush cannot
    fail on metadata."""

    @property
    def wants_vector(self) -> bool:
        """Body readings are found by layer and time, never by meaning."""
        return self.source_type != _INTEROCEPTION


@dataclass(frozen=True)
class Place:
    """One text seen in one grid cell: how often, when, and where on average."""

    id: int
    text_id: int
    text: str
    layer: str
    count: int
    centroid: Position
    first_stamp: float
    last_stamp: float
    last_obs_id: int


@dataclass
class WriteReport:
    observations: int = 0
    new_texts: int = 0
    embedded: int = 0
    new_places: int = 0
    deferred_vectors: int = 0
    """Texts stored without the vector they need (embedder down); see ``backfill_vectors``."""
    skipped: int = 0
    """Observations of the batch that were already stored (a retried batch)."""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

