"""The worker: queries keep answering during consolidation; shutdown finishes or safely abandons."""

from __future__ import annotations

import sqlite3
import threading
import time

from emem_ros.consolidation.worker import ConsolidationWorker, WorkerClosedError
from test.test_consolidation_support import age_past_window, gist_rows, open_memory, patrol_into


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


def test_queries_keep_answering_while_a_big_consolidation_runs(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock, llm=PacedLLM(0.01))
    info = patrol_into(memory, clock, 12_000)
    age_past_window(memory, clock)
    stop = threading.Event()
    latencies: list[float] = []
    errors: list[BaseException] = []
    query = memory.embed_query("red mug on the table")

    def reader() -> None:
        store = memory.store
        while not stop.is_set():
            started = time.perf_counter()
            try:
                store.vectors["texts"].search(query, 5)
                store.vectors["gists"].search(query, 5)
                store.places_within((2.5, 2.5, 0.0), 2.0)
                store.query_observations("o.stamp >= ?", (info.start,), "o.stamp DESC", 20)
                store.reader().execute("SELECT COUNT(*) FROM gists").fetchone()
            except BaseException as exc:  # noqa: BLE001 - the test collects every failure
                errors.append(exc)
            latencies.append(time.perf_counter() - started)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        started = time.perf_counter()
        report = memory.maintenance(timeout=60.0)
        consolidation_seconds = time.perf_counter() - started
    finally:
        stop.set()
        thread.join()
    assert report.consolidation.gists == info.visits
    assert not errors
    assert len(latencies) > 50 and consolidation_seconds > 0.5
    latencies.sort()
    print(f"queries {len(latencies)} during {consolidation_seconds:.2f} s; median {latencies[len(latencies) // 2] * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms")
    assert latencies[len(latencies) // 2] < 0.05 and latencies[-1] < 0.5, latencies[-5:]
    memory.close()


def test_close_with_pending_work_abandons_it_safely_and_resumes_on_open(tmp_path, clock):
    path = tmp_path / "m.db"
    gate = threading.Event()
    memory = open_memory(path, clock, llm=PacedLLM(gate=gate), consolidation_close_timeout=0.2)
    patrol_into(memory, clock, 2000)
    memory.start_episode("errand")
    for i in range(30):
        memory.add("red mug", x=1.0, y=1.0, timestamp=clock.now + i, layer_name="detections")
    clock.now += 30
    age_past_window(memory, clock)
    blocked = memory.submit_maintenance()  # its first LLM call waits on the gate
    assert memory.submit_maintenance() is blocked  # timer ticks coalesce while it waits
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
