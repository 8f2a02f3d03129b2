"""episode_summary: what a named stretch of work was, how it ended, what was seen in it."""

from __future__ import annotations

import heapq
from typing import Any

from emem_ros.core.errors import InvalidInputError
from emem_ros.core.types import Episode, parse_id
from emem_ros.tools.aggregate import texts_of
from emem_ros.tools.env import ToolEnv
from emem_ros.tools.ranking import gist_hit
from emem_ros.tools.reads import ToolContext
from emem_ros.tools.results import EpisodeReport, EpisodeSummaryResult

TOP_TEXTS = 5
GISTS_PER_EPISODE = 3
MAX_EPISODES = 20


def episode_summary(env: ToolContext, episode_id: Any = None, task_name: Any = None,
                    last_n: Any = 1) -> EpisodeSummaryResult:
    now = env.prepare()
    notes: list[str] = []
    if episode_id not in (None, ""):
        number = env.episode(episode_id)
        assert number is not None  # an id was given: env.episode returns its number or raises
        reports = env.reads.episode_reports(number, None, 1)
    else:
        n = min(env.count(last_n, "last_n", default=1), MAX_EPISODES)
        name = task_name.strip() if isinstance(task_name, str) and task_name.strip() else None
        if task_name is not None and not isinstance(task_name, str):
            raise InvalidInputError(f"task_name must be a string, got {task_name!r}")
        reports = env.reads.episode_reports(None, name, n)
        if not reports and name:
            latest = env.reads.recent_episodes(5)
            notes.append(f"no episode is named like '{name}'"
                         + ("; recent ones: " + ", ".join(f"{i} '{e}'" for i, e in latest) if latest else ""))
    return EpisodeSummaryResult(reports, now, notes)


def report(env: ToolEnv, episode: Episode) -> EpisodeReport:
    number = parse_id(episode.id)[1]
    items = env.catalog.slice_items(episode=number)
    observations = sum(stats.count for _, stats in items)
    top = heapq.nlargest(TOP_TEXTS, items, key=lambda item: item[1].count)
    names = texts_of(env.store, [t for t, _ in top])
    conn = env.store.reader()
    gist_ids = [r[0] for r in conn.execute(
        "SELECT id FROM gists WHERE episode_id = ? ORDER BY time_start LIMIT ?", (number, GISTS_PER_EPISODE))]
    subtasks = [f"{'ep-' + str(r[0])} '{r[1]}'" for r in conn.execute(
        "SELECT id, name FROM episodes WHERE parent_id = ? ORDER BY start, id", (number,))]
    return EpisodeReport(
        id=episode.id, name=episode.name, status=episode.status, start=episode.start, end=episode.end,
        parent_id=episode.parent_id, summary=episode.summary, goal=episode.goal, result=episode.result,
        reflection=episode.reflection, success=episode.success, observations=observations,
        top_texts=[(names.get(t, ""), stats.count) for t, stats in top],
        gists=[gist_hit(g) for g in env.store.get_gists(gist_ids)], subtasks=subtasks)
