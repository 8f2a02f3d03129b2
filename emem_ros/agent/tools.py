"""The agent tools: record_experience, find_experiences, memory_stats, declared like the built-in ones.

They run on an ``AgentEnv``: the tools' environment plus the experience
ledger (created on first use) and the query cache's statistics. Typed
results: ``memory.tools.find_experiences(...)``; ROS services and the MCP
server call them by name; the names are part of the interface.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from emem_ros.agent.ledger import ExperienceLedger
from emem_ros.agent.results import ExperienceHit, ExperienceSearchResult, RecordResult
from emem_ros.agent.stats import MemoryStats, collect_stats
from emem_ros.core.errors import InvalidInputError, UnknownNodeError
from emem_ros.core.numbers import MAX_INTEGER, is_finite_number
from emem_ros.engine import Engine
from emem_ros.forgetting.tool import FORGET_TOOL
from emem_ros.tools import scopes as sc
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.query_cache import QueryCache
from emem_ros.tools.reads import ToolContext
from emem_ros.tools.results import fmt_time, quoted
from emem_ros.tools.spec import COORDINATE, DISTANCE, TIME, CachePolicy, ToolDef
from emem_ros.tools.spec import obj as _obj
from emem_ros.tools.spec import param as _p
from emem_ros.tools.sqlite_reads import SqliteReads

MAX_RESULTS = 100


class AgentEnv(ToolEnv):
    """The tools' environment plus what the agent tools need: the ledger and the cache's counters."""

    def __init__(self, engine: Engine, ledger: Callable[[], ExperienceLedger],
                 cache: Optional[QueryCache] = None) -> None:
        super().__init__(engine)
        self.reads = SqliteReads(self)
        context: ToolContext = self  # mypy holds the robot's env to the runners' interface here
        del context
        self._ledger = ledger
        self.cache = cache
        self.forget: Optional[Callable[..., Any]] = None
        """The facade's ``forget`` (the tool runs it on the consolidation worker); None: not offered."""
        self.forget_caller = "tool"
        """Who the audit trail names for forgets through the tool ('ros:<node>' on a robot)."""

    @property
    def ledger(self) -> ExperienceLedger:
        """The experience ledger (created on first use: most robots never need it)."""
        return self._ledger()


# ---------------------------------------------------------------------- the tools
def record_experience(env: AgentEnv, goal: Any, action: Any = "", result: Any = "", reflection: Any = "",
                      success: Any = None, tags: Any = (), metadata: Any = None, episode_id: Any = None,
                      x: Any = None, y: Any = None, corrects: Any = None) -> RecordResult:
    ledger = env.ledger
    if (x is None) != (y is None):
        raise InvalidInputError("give both x and y for a position, or neither")
    supersedes = _resolve_id(env, corrects) if corrects else None
    record_id = ledger.record(goal, action or "", result or "", reflection or "", success,
                              tags=tags if tags is not None else (), metadata=metadata,
                              episode_id=episode_id or None, x=x, y=y,
                              z=0.0 if x is not None else None, supersedes=supersedes)
    episode = episode_id or env.engine.active_episode_id
    return RecordResult(record_id, str(goal).strip(), success if success is None else bool(success),
                        str(episode) if episode else None)


def find_experiences(env: AgentEnv, query: Any = None, success: Any = None, tags: Any = (), time_after: Any = None,
                     time_before: Any = None, episode_id: Any = None, near_x: Any = None, near_y: Any = None,
                     spatial_radius: Any = None, n_results: Any = 10) -> ExperienceSearchResult:
    if query is not None and not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, got {query!r}")
    n = _count(n_results)
    if (near_x is None) != (near_y is None):
        raise InvalidInputError("give both near_x and near_y to search near a place, or neither")
    if spatial_radius is not None and (not is_finite_number(spatial_radius) or spatial_radius <= 0):
        raise InvalidInputError(f"spatial_radius must be a positive number of metres, got {spatial_radius!r}")
    after = env.engine.resolve_time(time_after)
    before = env.engine.resolve_time(time_before)
    if after is not None and before is not None and after > before:
        raise InvalidInputError("time_after is later than time_before; swap them")
    ledger = env.ledger
    found = ledger.find(
        query=query.strip() if query else None, success=success, tags=tags if tags is not None else (),
        time_after=after, time_before=before, episode_id=episode_id or None, near_x=near_x, near_y=near_y,
        radius=spatial_radius, n_results=n)
    now = env.now()
    hits = [ExperienceHit(e, round(score, 4) if query else None) for e, score in found]
    summary = _describe(query, success, tags, after, before, episode_id, near_x, near_y, spatial_radius, now)
    notes = []
    if not hits and ledger.count() == 0:
        notes.append("no experience has been recorded yet (record_experience writes them)")
    return ExperienceSearchResult(summary, hits, now, notes)


def memory_stats(env: AgentEnv, top_n: Any = 5, min_support: Any = 2) -> MemoryStats:
    top = _count(top_n, "top_n", 50)
    if not is_finite_number(min_support) or min_support <= 0:
        raise InvalidInputError(f"min_support must be a positive number, got {min_support!r}")
    env.engine.flush_for_query()  # best-effort: stats never fail because storing does
    store = env.store
    stats = collect_stats(store.reader(), store.path, top, float(min_support),
                          cache=env.cache.stats() if env.cache is not None else {"enabled": False})
    stats.indexes = {name: len(index) for name, index in store.vectors.items()}
    stats.indexes["places"] = len(store.places)
    return stats


def _resolve_id(env: AgentEnv, value: Any) -> str:
    """A full record id from an id or a unique prefix of at least 8 characters."""
    if not isinstance(value, str) or len(value.strip()) < 8 or not all(
            c in "0123456789abcdef" for c in value.strip().lower()):
        raise InvalidInputError(f"corrects must be an experience id (64 hex characters, or its first 12), "
                                f"got {value!r}")
    prefix = value.strip().lower()
    store = env.store
    store.apply_deferred()
    rows = store.reader().execute("SELECT id FROM experiences WHERE id >= ? AND id < ? LIMIT 2",
                                  (prefix, prefix + "g")).fetchall()
    if not rows:
        raise UnknownNodeError(f"no experience with id {prefix} in this memory")
    if len(rows) > 1:
        raise InvalidInputError(f"{prefix} matches several experiences; give more characters of the id")
    return str(rows[0][0])


AGENT_TOOLS: tuple[ToolDef, ...] = (
    ToolDef(
        name="record_experience",
        run=record_experience,
        srv="RecordExperience",
        srv_omits=("episode_id", "x", "y", "corrects"),
        kind="action",
        description=(
            "Write down what you just tried and what came of it, so it can be found next time: the goal, "
            "what you did, the result, whether it succeeded, and the lesson learned (e.g. goal 'fetch the red "
            "mug', result 'kitchen door was closed', reflection 'open the kitchen door first'). Records are "
            "permanent; to fix one, record a new one with 'corrects' set to the old id. Recording the same "
            "content twice returns the same id."),
        parameters=_obj({
            "goal": _p("string", "What you set out to do."),
            "action": _p("string", "What you actually did."),
            "result": _p("string", "What happened in the end."),
            "reflection": _p("string", "The lesson: what to do differently or remember next time."),
            "success": _p("boolean", "Whether the goal was reached (omit if unclear)."),
            "tags": _p("array", "Short labels to filter by later, e.g. ['kitchen', 'grasping'].",
                       items={"type": "string"}),
            "metadata": _p("object", "Optional extra fields (a JSON object)."),
            "episode_id": _p("string", "Episode it belongs to, e.g. 'ep-3' (default: the active episode)."),
            "x": _p("number", "X in metres where it happened (optional; needs y).", **COORDINATE),
            "y": _p("number", "Y in metres where it happened (optional; needs x).", **COORDINATE),
            "corrects": _p("string", "Id (or its first 12 characters) of an earlier experience this one "
                                     "corrects; the old one is then hidden from searches."),
        }, ("goal",)),
        time_params=(),
    ),
    ToolDef(
        name="find_experiences",
        run=find_experiences,
        cache=CachePolicy("query", lambda a: (sc.EXPERIENCES, sc.EPISODES)),
        srv="FindExperiences",
        srv_omits=("near_x", "near_y", "spatial_radius"),
        description=(
            "Find what was tried and learned before (the experience ledger written by record_experience): "
            "'what happened last time I fetched the mug?', 'which attempts at the garage door failed?'. With "
            "a query, records are ranked by meaning and keywords; without one, newest first. Filter by "
            "outcome, tags, time, episode or place. For what the robot perceived use semantic_search."),
        parameters=_obj({
            "query": _p("string", "What the experience was about, in words (optional)."),
            "success": _p("boolean", "Only successes (true) or only failures (false); omit for both."),
            "tags": _p("array", "Only records carrying all of these tags.", items={"type": "string"}),
            "time_after": _p(["string", "number"], f"Only records after this time. {TIME}"),
            "time_before": _p(["string", "number"], f"Only records before this time. {TIME}"),
            "episode_id": _p("string", "Only records of this episode, e.g. 'ep-3'."),
            "near_x": _p("number", "X of a point the experience happened near, metres. Needs near_y.",
                         **COORDINATE),
            "near_y": _p("number", "Y of that point, metres.", **COORDINATE),
            "spatial_radius": _p("number", "Radius around (near_x, near_y) in metres (default 5).", **DISTANCE),
            "n_results": _p("integer", "Maximum number of records (1-100).", default=10, minimum=1),
        }),
        time_params=("time_after", "time_before"),
    ),
    ToolDef(
        name="memory_stats",
        run=memory_stats,
        srv="MemoryStats",
        srv_omits=("top_n", "min_support"),
        description=(
            "Overview of the memory itself: how many observations per tier and layer, episodes, summaries, "
            "entities and experiences; the things seen most; which entities are often seen together; the "
            "success rate of recorded experiences; query-cache hit rate; disk use. Not for questions about "
            "the world: use the search tools."),
        parameters=_obj({
            "top_n": _p("integer", "How many most-seen items and patterns to list (1-50).", default=5, minimum=1),
            "min_support": _p("number", "Least number of visits two entities must share to count as a "
                                        "pattern.", default=2, exclusiveMinimum=0, maximum=MAX_INTEGER),
        }),
        time_params=(),
    ),
    FORGET_TOOL,
)


def _count(value: Any, name: str = "n_results", cap: int = MAX_RESULTS) -> int:
    if value is None:
        return 10 if name == "n_results" else 5
    if not is_finite_number(value) or int(value) != value or value < 1:
        raise InvalidInputError(f"{name} must be a whole number of at least 1, got {value!r}")
    return min(int(value), cap)


def _describe(query: Any, success: Any, tags: Any, after: Optional[float], before: Optional[float],
              episode_id: Any, near_x: Any, near_y: Any, radius: Any, now: float) -> str:
    parts = []
    if success is not None:
        parts.append("successes only" if success else "failures only")
    if tags:
        parts.append("tagged " + ", ".join(map(str, [tags] if isinstance(tags, str) else tags)))
    if after is not None:
        parts.append(f"after {fmt_time(after, now)}")
    if before is not None:
        parts.append(f"before {fmt_time(before, now)}")
    if episode_id:
        parts.append(f"in {episode_id}")
    if near_x is not None and near_y is not None:
        parts.append(f"within {radius if radius is not None else 5:g} m of ({near_x:.1f}, {near_y:.1f})")
    head = quoted(query) if query else "all experiences, newest first"
    return head + (f" ({'; '.join(parts)})" if parts else "")
