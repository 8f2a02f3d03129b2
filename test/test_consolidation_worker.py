"""The worker: queries keep answering during consolidation; shutdown finishes or safely abandons."""

from __future__ import annotations

import math
import sqlite3
import threading
import time

from emem_ros.consolidation.worker import ConsolidationWorker, WorkerClosedError
from test.support.patrol import age_past_window, gist_rows, open_memory, patrol_into


class PacedLLM:
    """A slow but working LLM; ``gate`` (if given) holds every call until it is set."""

    def __init__(self, seconds: float = 0.0, gate: threading.Event | None = None) -> None:
        self.seconds = seconds
        self.gate = gate
        self.calls = 0

    def complete(self, prompt: str, *, system=None) -> str:
        self.calls += 1
        if self.gate is not None:
            self.gate.wait(30.0)
        time.sleep(self.seconds)
        return "[]" if "JSON array" in prompt else "The robot looked around."


class GatedLLM:
    """Answers at once while ``open`` is set; once cleared, every call waits inside the LLM (``inside`` set)."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.inside = threading.Event()

    def complete(self, prompt: str, *, system=None) -> str:
        if not self.open.is_set():
            self.inside.set()
            self.open.wait(60.0)
        return "[]" if "JSON array" in prompt else "The robot looked around the room."


def test_queries_and_ingest_complete_while_consolidation_is_held_inside_an_llm_call(tmp_path, clock):
    """No timing: consolidation is parked in an LLM call for the whole test body, so anything that
    completes meanwhile provably did not wait for it (a query that did would never return before
    the gate opens, and the checks after it would see consolidation finished)."""
    llm = GatedLLM()
    memory = open_memory(tmp_path / "m.db", clock, llm=llm)
    first = patrol_into(memory, clock, 2000)
    age_past_window(memory, clock)
    assert memory.maintenance(timeout=60.0).consolidation.gists == first.visits  # gists and entities to find
    second = patrol_into(memory, clock, 2000)
    age_past_window(memory, clock)

    llm.open.clear()
    running = memory.submit_maintenance()
    assert llm.inside.wait(60.0), "consolidation never reached its LLM call"
    try:
        tools = memory.tools
        assert tools.semantic_search("red mug").hits[0].text == "red mug"
        gists = tools.search_gists("the robot looked around the room").hits
        assert gists and all(h.kind == "gist" for h in gists)
        assert "red mug" in {h.text for h in tools.spatial_query(2.5, 2.0, radius=1.5, n_results=50).hits}
        assert tools.temporal_query(time_after=second.start, n_results=5).hits
        mug = tools.locate("red mug")
        assert mug.found and math.dist(mug.position[:2], (2.5, 2.0)) < 1.0
        assert [h.text for h in tools.entity_query(name="red mug").hits][:1] == ["red mug"]
        assert "sofa" in memory.dispatch_tool_call("semantic_search", {"query": "sofa", "n_results": 3})
        memory.add("a parcel left by the front door", x=12.0, y=2.0, timestamp=clock.now, layer_name="scene",
                   source_type="perception")
        memory.flush()
        assert tools.semantic_search("parcel by the front door").hits[0].text == "a parcel left by the front door"
        # All of the above returned while consolidation was still parked in its LLM call.
        assert not llm.open.is_set() and not running.done()
    finally:
        llm.open.set()
    report = running.result(60.0)
    assert report.consolidation.gists == second.visits and report.consolidation.llm_summaries == second.visits
    memory.close()


def test_close_with_pending_work_abandons_it_safely_and_resumes_on_open(tmp_path, clock):
    path = tmp_path / "m.db"
    gate = threading.Event()
    llm = PacedLLM(gate=gate)
    memory = open_memory(path, clock, llm=llm, consolidation_close_timeout=0.2)
    patrol_into(memory, clock, 2000)
    memory.start_episode("errand")
    for i in range(30):
        memory.add("red mug", x=1.0, y=1.0, timestamp=clock.now + i, layer_name="detections")
    clock.now += 30
    age_past_window(memory, clock)
    blocked = memory.submit_maintenance()  # its first LLM call waits on the gate
    deadline = time.monotonic() + 10.0
    while llm.calls == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert llm.calls >= 1 and blocked.running()
    queued = memory.submit_maintenance()  # the next tick queues behind the running job...
    assert queued is not blocked
    assert memory.submit_maintenance() is queued  # ...and later ticks coalesce with it while it waits
    episode = memory.end_episode()
    assert memory.consolidation_status["pending_episodes"] == [1]
    started = time.perf_counter()
    threading.Timer(0.5, gate.set).start()  # the "LLM" answers only after close gave up waiting
    memory.close()
    assert time.perf_counter() - started < 5.0
    assert blocked.done()

    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    dangling = conn.execute("SELECT COUNT(*) FROM observations o LEFT JOIN gists g ON g.id = o.gist_id"
                            " WHERE o.gist_id IS NOT NULL AND g.id IS NULL").fetchone()[0]
    mismatched = conn.execute("SELECT COUNT(*) FROM gists g WHERE source_count !="
                              " (SELECT COUNT(*) FROM observations o WHERE o.gist_id = g.id)").fetchone()[0]
    assert (dangling, mismatched) == (0, 0)
    conn.close()

    reopened = open_memory(path, clock)  # the episode request was durable
    assert reopened.wait_for_consolidation(10.0)
    number = int(episode.split("-")[1])
    assert reopened.store.get_episode(number).summary.startswith("errand, ")
    assert reopened.consolidation_status["pending_episodes"] == []
    reopened.maintenance()
    assert reopened.store.reader().execute(
        "SELECT COUNT(*) FROM observations WHERE tier = 'short_term'").fetchone()[0] < 5
    reopened.close()


def test_a_maintenance_timer_runs_on_the_worker(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, maintenance_interval=0.05)
    info = patrol_into(memory, clock, 1000)
    age_past_window(memory, clock)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and len(gist_rows(memory)) < info.visits:
        time.sleep(0.05)
    assert len(gist_rows(memory)) == info.visits
    memory.close()


def test_the_worker_runs_jobs_in_order_and_refuses_work_after_close():
    worker = ConsolidationWorker("test-worker")
    order: list[int] = []
    futures = [worker.submit(f"job {i}", lambda stop, i=i: order.append(i) or i) for i in range(5)]
    assert [f.result(5.0) for f in futures] == [0, 1, 2, 3, 4] == order
    failing = worker.submit("boom", lambda stop: 1 / 0)
    assert isinstance(failing.exception(5.0), ZeroDivisionError)
    assert worker.submit("after", lambda stop: "still alive").result(5.0) == "still alive"
    assert worker.close(1.0)
    try:
        worker.submit("late", lambda stop: None)
    except WorkerClosedError:
        pass
    else:
        raise AssertionError("a closed worker accepted work")
