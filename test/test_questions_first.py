"""Questions never wait behind writes: bounded flushes, questions before other flushes, writers pause for them."""

from __future__ import annotations

import threading
import time

from emem_ros.engine.questions import QuestionGate
from emem_ros.ingest.working_memory import WorkingMemory
from emem_ros.storage.records import NewObservation


def obs(i: int) -> NewObservation:
    return NewObservation(id=i, text=f"t{i}", stamp=1000.0 + i, layer="default", source_type="manual",
                          position=None, frame_id="map", confidence=1.0)


def wait_until(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)


def test_a_flush_stores_what_was_buffered_when_it_began_not_what_writers_add_meanwhile():
    stored: list[int] = []
    buffer: WorkingMemory

    def sink(batch):  # a writer keeps adding while every chunk is being stored
        stored.extend(o.id for o in batch)
        for _ in range(len(batch)):
            buffer.add(obs(1000 + len(stored)))

    buffer = WorkingMemory(sink, capacity=100_000, batch_size=100_000, interval=0)
    for i in range(3000):  # more than one chunk
        buffer.add(obs(i))
    assert buffer.flush() == 3000
    assert stored == list(range(3000))
    assert len(buffer) == 3000  # what came in meanwhile waits for the next flush


def test_a_question_flushes_only_up_to_its_mark():
    stored: list[int] = []
    buffer = WorkingMemory(lambda b: stored.extend(o.id for o in b), capacity=1000, batch_size=1000, interval=0)
    for i in range(5):
        buffer.add(obs(i))
    mark = buffer.mark()
    for i in range(5, 8):
        buffer.add(obs(i))
    assert buffer.waiting_before(mark) == 5
    buffer.flush(upto=mark, question=True)
    assert stored == [0, 1, 2, 3, 4]
    assert buffer.waiting_before(mark) == 0
    assert len(buffer) == 3


def test_the_mark_survives_a_failed_flush():
    calls = {"n": 0}
    stored: list[int] = []

    def sink(batch):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("disk full")  # an outage: the batch goes back to the front
        stored.extend(o.id for o in batch)

    buffer = WorkingMemory(sink, capacity=1000, batch_size=1000, interval=0, transient=lambda exc: True)
    for i in range(4):
        buffer.add(obs(i))
    mark = buffer.mark()
    try:
        buffer.flush(upto=mark, question=True)
    except OSError:
        pass
    assert buffer.waiting_before(mark) == 4
    buffer.flush(upto=mark, question=True)
    assert stored == [0, 1, 2, 3] and buffer.waiting_before(mark) == 0


def test_a_waiting_question_goes_before_a_waiting_background_flush():
    order: list[str] = []
    release = threading.Event()

    def sink(batch):
        if batch[0].id == 0:
            release.wait(5)  # the flush in progress when both arrive
        order.append("question" if batch[0].id == 1 else "background" if batch[0].id == 2 else "first")

    buffer = WorkingMemory(sink, capacity=1000, batch_size=1000, interval=0)
    buffer.add(obs(0))
    first = threading.Thread(target=buffer.flush)
    first.start()
    wait_until(lambda: len(buffer) == 0)  # obs 0 is being stored
    buffer.add(obs(1))
    question = threading.Thread(target=lambda: buffer.flush(upto=buffer.mark(), question=True))
    question.start()
    wait_until(lambda: buffer._questions == 1)
    buffer.add(obs(2))
    background = threading.Thread(target=lambda: buffer.flush(give_way=True))
    background.start()
    time.sleep(0.05)  # the background flush is waiting too
    release.set()
    for t in (first, question, background):
        t.join(5)
    assert order[:2] == ["first", "question"]
    assert len(buffer) == 0


def test_writers_that_outrun_the_timer_store_themselves():
    stored: list[int] = []
    buffer = WorkingMemory(lambda b: stored.extend(o.id for o in b), capacity=10_000, batch_size=10,
                           interval=3600.0)  # a timer that never fires during the test
    try:
        for i in range(14):
            buffer.add(obs(i))
        assert stored == []  # a batch is due: the timer's job
        buffer.add(obs(14))
        assert stored == list(range(15))  # half a batch more and the timer has not come: the writer stored
    finally:
        buffer.stop()


def test_writers_wait_while_a_question_of_another_thread_runs():
    gate = QuestionGate(max_wait=5.0)
    finished = threading.Event()

    def writer():
        gate.writer_turn()
        finished.set()

    with gate.asking():
        gate.writer_turn()  # the asking thread itself never waits
        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(0.05)
        assert not finished.is_set()
    assert finished.wait(5)
    thread.join()
    assert gate.writer_waits == 1


def test_a_writer_waits_for_a_question_at_most_max_wait():
    gate = QuestionGate(max_wait=0.05)
    with gate.asking():
        done = threading.Event()
        thread = threading.Thread(target=lambda: (gate.writer_turn(), done.set()))
        thread.start()
        assert done.wait(5)  # although the question is still running
        thread.join()


def test_a_question_sees_everything_added_before_it_while_writers_keep_adding(make_memory):
    memory = make_memory(flush_interval=0.05, flush_batch_size=64)
    stop = threading.Event()

    def writer(k: int) -> None:
        i = 0
        while not stop.is_set():
            memory.add(f"writer {k} item {i}", x=float(k), y=0.0)
            i += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        for n in range(5):
            marker = memory.add(f"marker {n}", x=50.0, y=50.0)
            answer = memory.spatial_query(x=50.0, y=50.0, radius=1.0, n_results=20)
            assert f"marker {n}" in answer, (marker, answer)
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_consolidation_steps_wait_while_a_question_runs():
    from emem_ros.consolidation.worker import ConsolidationWorker

    gate = QuestionGate(max_wait=5.0)
    worker = ConsolidationWorker(pause=gate.writer_turn)
    steps: list[int] = []

    def job(stop):
        for i in range(3):
            if stop.is_set():  # where a job looks between its steps
                return
            steps.append(i)

    try:
        with gate.asking():
            future = worker.submit("job", job)
            time.sleep(0.1)
            assert steps == []  # held at its first step while the question runs
        future.result(5)
        assert steps == [0, 1, 2]
    finally:
        worker.close(5)
