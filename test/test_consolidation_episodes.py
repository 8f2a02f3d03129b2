"""Episode consolidation: in the background, once, with the planner's experience fields."""

from __future__ import annotations

import threading

from test.support.patrol import age_past_window, gist_rows, open_memory


def _visit(memory, t0: float, x: float, labels=("red mug", "table"), n: int = 40, layer: str = "detections"):
    for i in range(n):
        memory.add(labels[i % len(labels)], x=x, y=1.0, timestamp=t0 + i, layer_name=layer,
                   source_type="perception", metadata={"class_id": labels[i % len(labels)]})


class GatedSummaries:
    """An LLM stand-in (``complete``) that answers only when the test opens its gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.threads: set[str] = set()
        self.answered = 0

    def complete(self, prompt: str, *, system=None) -> str:
        self.threads.add(threading.current_thread().name)
        self.gate.wait(10.0)
        self.answered += 1
        return "The robot saw a red mug on a table."


def test_end_episode_returns_at_once_and_consolidates_in_the_background(tmp_path, clock):
    llm = GatedSummaries()
    memory = open_memory(tmp_path / "m.db", clock, llm=llm)
    episode = memory.start_episode("fetch mug", goal="bring the red mug")
    _visit(memory, clock.now, 1.0)
    _visit(memory, clock.now + 100, 9.0, labels=("sofa",))
    clock.now += 200
    assert memory.end_episode(result="mug delivered", reflection="the kitchen was dark", success=True) == episode
    assert llm.answered == 0, "end_episode returned before the LLM answered: it does not wait for it"
    llm.gate.set()
    assert memory.wait_for_consolidation(10.0)
    # on the worker, or on the helper it waits on with a deadline (llm.py), never on a caller's thread
    assert {name.split("/")[0] for name in llm.threads} == {"emem-consolidation"}, "LLM calls run on the worker only"

    stored = memory.store.get_episode(int(episode.split("-")[1]))
    assert (stored.goal, stored.result, stored.reflection, stored.success) == (
        "bring the red mug", "mug delivered", "the kitchen was dark", True)
    assert stored.summary == "The robot saw a red mug on a table."
    rows = gist_rows(memory)
    assert len(rows) == 2 and all(r[6] == int(episode.split("-")[1]) for r in rows)  # one per place
    assert sum(r[2] for r in rows) == 80
    consolidated = memory.store.reader().execute(
        "SELECT consolidated FROM episodes WHERE id = ?", (int(episode.split("-")[1]),)).fetchone()[0]
    assert consolidated == 1 and memory.consolidation_status["pending_episodes"] == []


def test_the_fallback_episode_summary_names_places_and_outcome(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    memory.start_episode("patrol", goal="check the kitchen")
    _visit(memory, clock.now, 1.0)
    clock.now += 60
    episode = memory.end_episode(result="all clear", success=False)
    assert memory.wait_for_consolidation(10.0)
    summary = memory.store.get_episode(int(episode.split("-")[1])).summary
    assert summary.startswith("patrol, ") and "goal: check the kitchen" in summary
    assert "40 observations in 1 place" in summary and "red mug ×20, table ×20" in summary
    assert "result: all clear" in summary and "success: no" in summary


def test_the_active_episode_is_never_consolidated_twice(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    t0 = clock.now
    _visit(memory, t0 - 5000, 20.0, labels=("chair",))  # before the episode
    episode = memory.start_episode("long task")
    _visit(memory, t0, 1.0)
    memory.flush()
    age_past_window(memory, clock)
    window = memory.consolidate_time_window()
    assert window.gists == 1  # the chair visit only: the active episode is left alone
    episode_obs = memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations WHERE episode_id = ? AND gist_id IS NULL",
        (int(episode.split("-")[1]),)).fetchone()[0]
    assert episode_obs == 40

    memory.end_episode()
    assert memory.wait_for_consolidation(10.0)
    assert memory.consolidate_time_window().gists == 0
    memory.consolidate_episode(episode).result(10.0)  # asking again changes nothing
    counts = memory.store.reader().execute(
        "SELECT COUNT(*), SUM(source_count) FROM gists").fetchone()
    assert counts == (2, 80), "every observation is summarised exactly once"
    per_obs = memory.store.reader().execute("SELECT COUNT(*) FROM observations WHERE gist_id IS NULL").fetchone()[0]
    assert per_obs == 0


def test_an_episode_ended_without_consolidation_is_left_to_the_time_window(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    memory.start_episode("quick look")
    _visit(memory, clock.now, 1.0)
    memory.flush()
    age_past_window(memory, clock)
    assert memory.consolidate_time_window().gists == 0  # still active: skipped, and the mark moves on
    memory.end_episode(consolidate=False)
    assert memory.wait_for_consolidation(5.0)
    report = memory.consolidate_time_window()
    assert (report.gists, report.observations) == (1, 40)
    episode_row = memory.store.reader().execute("SELECT consolidated, summary FROM episodes").fetchone()
    assert episode_row == (0, "")
    assert memory.consolidation_status["pending_episodes"] == []


def test_nested_episodes_each_consolidate_their_own_observations(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    memory.start_episode("clean house")
    _visit(memory, clock.now, 1.0, labels=("sofa",))
    memory.start_episode("wipe table", parent_episode_id=memory.active_episode_id)
    _visit(memory, clock.now + 100, 1.0, labels=("table",))
    clock.now += 200
    memory.end_episode(success=True)
    memory.end_episode()
    assert memory.wait_for_consolidation(10.0)
    episodes = memory.store.reader().execute("SELECT name, summary FROM episodes ORDER BY id").fetchall()
    assert "sofa ×40" in episodes[0][1] and "subtasks: wipe table (succeeded)" in episodes[0][1]
    assert "table ×40" in episodes[1][1] and "sofa" not in episodes[1][1]
