"""Memory configuration: eMEM / EmbodiedAgents parameter names plus our own.

Names shared with the peer ``emem`` keep their meaning so that a params file
written for it works here; ``validate()`` turns a bad value into one sentence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from emem_ros.core.errors import InvalidInputError, TimeExpressionError
from emem_ros.core.numbers import is_finite_number
from emem_ros.core.timeexpr import time_zone


@dataclass
class MemoryConfig:
    # Storage
    db_path: str = "memory.db"
    """SQLite file; derived index files sit beside it (``<db>.idx/``)."""
    index_save_interval: float = 60.0
    """Seconds between periodic saves of the derived indexes (0 = only on close)."""

    # Working memory
    working_memory_size: int = 10_000
    """Observations held in RAM before `add` flushes synchronously (back-pressure)."""
    flush_interval: float = 1.0
    """Seconds between timer flushes of the working memory (0 = no timer thread)."""
    flush_batch_size: int = 256
    """Buffered observations that trigger a flush."""

    # Text limits
    max_text_length: int = 4096
    """Longer texts are rejected with a clear error (not truncated silently)."""

    # Embeddings
    embedding_model: str = "all-MiniLM-L6-v2"
    embedding_cache_size: int = 100_000
    """Distinct texts whose ids are kept in RAM; the texts table is the durable cache."""
    rebuild_on_model_change: bool = False
    """Re-embed everything when the file was built with another model, instead of failing."""

    # Consolidation
    consolidation_window: float = 1800.0
    consolidation_spatial_eps: float = 3.0
    consolidation_min_samples: int = 3
    consolidation_time_gap: float = 120.0
    """Seconds without an observation that split a cluster in time."""
    consolidation_max_extent: float = 15.0
    """Metres: a cluster wider than this is split, so one gist never swallows a floor."""
    consolidation_max_size: int = 5_000
    consolidation_per_layer: bool = False
    consolidation_min_dwell: float = 5.0
    """Seconds the robot must stay away from a place before a new place starts (ignores glances)."""
    consolidation_close_timeout: float = 10.0
    """Seconds close() lets queued consolidation finish; the rest resumes on the next open."""
    consolidation_gc_pause: float = 30.0
    """Seconds at most that Python's automatic garbage collection stays off while a consolidation job runs
    (its full collections stall every thread 100+ ms; see core/collector.py). 0 = never turned off."""
    maintenance_process: bool = True
    """Maintenance reads and plans (entity sightings, gist drafts, archival batches) in a child process
    (consolidation/offload.py), so its interpreter time does not stretch questions and flushes; every write
    stays here. False (or a failing child) does it all in this process; with an LLM, entities and gists do."""
    maintenance_interval: float = 0.0
    """Seconds between automatic maintenance runs on the consolidation worker (0 = only on call)."""
    llm_timeout: float = 120.0
    """Wall-clock seconds one LLM summary (all its calls) may take before the plain summary is used."""

    # Archival
    archive_after_seconds: float = 3600.0
    """Seconds after promotion to long_term before raw text is archived."""
    archive_retention: str = "keep"
    """'keep' moves archived raw text to the cold store; 'drop' deletes it."""
    archive_batch_size: int = 5_000
    """Observations archived per transaction (keeps the writer lock short)."""

    # Forgetting (emem_ros/forgetting)
    allow_llm_forget: bool = False
    """Offer the ``forget`` tool to LLM tool calling (off: only Python, the CLI and the ROS service)."""
    retention_max_age: dict[str, float] = field(default_factory=dict)
    """Seconds an observation of a layer is kept (by its stamp), e.g. {'scene': 86400}; applied by maintenance."""
    retention_rules: list[dict[str, Any]] = field(default_factory=list)
    """[{'match': 'person|man|woman|child', 'max_age': 86400, 'layer': optional}]: observations whose text holds
    one of the words (exact, any case) are forgotten after ``max_age`` seconds; applied by maintenance."""

    # Entities
    entity_similarity_threshold: float = 0.85
    entity_spatial_radius: float = 5.0

    # Retrieval
    recency_weight: float = 0.0
    recency_halflife: float = 3600.0
    similarity_floor: float = 0.2

    # Query cache (emem_ros/tools/query_cache.py)
    query_cache_enabled: bool = True
    """Answer a repeated question from cache while nothing it depends on was written."""
    query_cache_threshold: float = 0.95
    """Cosine of the query embeddings from which two questions count as the same (with the same keywords)."""
    query_cache_size: int = 256
    """Answers kept (least recently used dropped first)."""
    query_cache_ttl: float = 300.0
    """Seconds (wall clock) an answer may be served from cache at most."""

    # HNSW
    hnsw_ef_construction: int = 100
    """hnswlib ef_construction. 100 inserts about twice as fast as 200 with the same recall@10 on held-out
    queries (0.996 vs 0.997 with the hashing embedder at 50k, 1.000 vs 0.9998 with MiniLM at 20k)."""
    hnsw_m: int = 16
    hnsw_ef_search: int = 64
    hnsw_max_elements: int = 10_000
    """Initial capacity; the index grows by doubling."""
    gist_graph_hours: float = 48.0
    """Gists that ended more than this many hours before the newest gist leave the gists' vector graph, whose
    RAM then stops growing with the history (0 = keep every gist in it). They stay in SQLite: a time or place
    filter scores them exactly from there, and keywords find them."""

    # Operation log (the source of truth every index can be rebuilt from)
    log_enabled: bool = True
    """Append every write transaction to ``<db>.log/`` before SQLite commits it."""
    log_segment_bytes: int = 64 * 1024 * 1024
    """Segment size; whole old segments are pruned only behind a checkpoint."""
    log_keep_segments: int = 0
    """Retention: keep this many segments behind a checkpoint (0 = keep the whole log)."""

    # Default frame for positions given without one.
    frame_id: str = "map"

    # Time words ('today', 'this morning', 'since 9:00') and ISO times without an offset are read in this zone.
    timezone: str = "UTC"
    """'UTC', an IANA name ('Europe/Berlin') or a fixed offset ('+01:00')."""

    def validate(self) -> "MemoryConfig":
        positive = (
            "working_memory_size", "flush_batch_size", "max_text_length",
            "consolidation_window", "consolidation_spatial_eps", "consolidation_min_samples",
            "consolidation_time_gap", "consolidation_max_extent", "consolidation_max_size",
            "entity_spatial_radius", "recency_halflife", "hnsw_ef_construction", "hnsw_m",
            "hnsw_ef_search", "hnsw_max_elements", "embedding_cache_size", "log_segment_bytes",
            "query_cache_size", "query_cache_ttl", "llm_timeout",
        )
        non_negative = ("flush_interval", "index_save_interval", "archive_after_seconds", "recency_weight",
                        "log_keep_segments", "consolidation_gc_pause", "gist_graph_hours")
        for name in positive:
            value = getattr(self, name)
            if not is_finite_number(value) or value <= 0:
                raise InvalidInputError(f"{name} must be a positive number, got {value!r}")
        for name in non_negative:
            value = getattr(self, name)
            if not is_finite_number(value) or value < 0:
                raise InvalidInputError(f"{name} must be zero or a positive number, got {value!r}")
        for name in ("entity_similarity_threshold", "similarity_floor", "query_cache_threshold"):
            value = getattr(self, name)
            if not is_finite_number(value) or not -1.0 <= value <= 1.0:
                raise InvalidInputError(f"{name} must be a cosine similarity in [-1, 1], got {value!r}")
        if self.flush_batch_size > self.working_memory_size:
            raise InvalidInputError(
                f"flush_batch_size ({self.flush_batch_size}) must not exceed "
                f"working_memory_size ({self.working_memory_size})"
            )
        if not isinstance(self.maintenance_process, bool):
            raise InvalidInputError(f"maintenance_process must be true or false, got {self.maintenance_process!r}")
        if self.archive_retention not in ("keep", "drop"):
            raise InvalidInputError(f"archive_retention must be 'keep' or 'drop', got {self.archive_retention!r}")
        try:
            time_zone(self.timezone)
        except TimeExpressionError as exc:
            raise InvalidInputError(f"timezone: {exc}") from None
        if not self.db_path:
            raise InvalidInputError("db_path must not be empty")
        self._validate_retention()
        return self

    def _validate_retention(self) -> None:
        if not isinstance(self.retention_max_age, dict):
            raise InvalidInputError("retention_max_age must map layer names to seconds, e.g. {'scene': 86400}")
        for layer, age in self.retention_max_age.items():
            if not isinstance(layer, str) or not layer or not is_finite_number(age) or age <= 0:
                raise InvalidInputError(f"retention_max_age[{layer!r}] must be a positive number of seconds,"
                                        f" got {age!r}")
        if not isinstance(self.retention_rules, list):
            raise InvalidInputError("retention_rules must be a list of {match, max_age} rules")
        for n, rule in enumerate(self.retention_rules):
            if not isinstance(rule, dict) or set(rule) - {"match", "max_age", "layer"}:
                raise InvalidInputError(f"retention_rules[{n}] must be {{match, max_age[, layer]}}, got {rule!r}")
            words = rule.get("match")
            if not isinstance(words, str) or not any(part.strip() for part in words.split("|")):
                raise InvalidInputError(f"retention_rules[{n}].match must be words, alternatives split by '|'")
            rule_age: Any = rule.get("max_age")
            if not is_finite_number(rule_age) or rule_age <= 0:
                raise InvalidInputError(f"retention_rules[{n}].max_age must be positive seconds, got {rule_age!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "MemoryConfig":
        """Build from a mapping; unknown keys are an error, not silently ignored."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidInputError(f"unknown memory parameter(s): {', '.join(unknown)}")
        return cls(**values).validate()


