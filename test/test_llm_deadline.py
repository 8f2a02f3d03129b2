"""A wall-clock deadline per LLM summary: a server that trickles bytes cannot hold consolidation.

The ollama client's timeout is per read; a server that sends a byte every
0.1 s never trips it. The summarizer stops waiting at its deadline, the
gist falls back to the plain summary, and the abandoned call's connection is
closed so no helper thread (and no server handler) stays behind.
"""

from __future__ import annotations

import socket
import threading

import pytest

from emem_ros.consolidation.llm import OllamaLLMClient, Summarizer
from emem_ros.core.errors import EmemError, InvalidInputError
from test.support.fake_ollama import FakeOllama, wait_until
from test.support.patrol import age_past_window, open_memory, patrol_into


def _llm_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("/llm-call") and t.is_alive()]


def test_a_trickling_server_gets_the_fallback_and_leaves_nothing_running(tmp_path, clock):
    fake = FakeOllama(mode="trickle", trickle_interval=0.05).start()
    try:
        llm = OllamaLLMClient("fake-chat", host=fake.host, timeout=0.5)
        memory = open_memory(tmp_path / "m.db", clock, llm=llm, llm_timeout=0.5)
        summarizer = memory._consolidation.summarizer
        assert summarizer.max_seconds == 0.5
        info = patrol_into(memory, clock, 1500)
        age_past_window(memory, clock)
        report = memory.consolidate_time_window(timeout=60.0)  # without the deadline: never returns
        assert len(report.gist_ids) == info.visits  # nothing lost
        assert report.llm_summaries == 0 and report.fallback_summaries == info.visits
        assert 1 <= len(fake.chat_requests) <= 3  # the writer pauses the LLM after three failures in a run
        entities = memory.extract_entities(timeout=60.0)
        assert entities.llm_calls >= 1  # scene descriptions were sent, abandoned, and skipped
        memory.close()
        assert wait_until(lambda: summarizer.calls_running == 0 and not _llm_threads(), 30.0)
        # The server's handlers ended because the client closed their connections, not because they finished.
        assert fake.running and wait_until(lambda: fake.active_handlers == 0, 30.0)
    finally:
        fake.stop()


class _LateHelper(threading.Thread):
    """A thread whose LLM helpers run only once ``go`` is set: a helper the OS scheduled after the deadline."""

    go = threading.Event()

    def run(self) -> None:
        if self.name.endswith("/llm-call"):
            self.go.wait(30.0)
        super().run()


def test_a_helper_that_starts_after_the_deadline_sends_nothing(monkeypatch):
    fake = FakeOllama(mode="trickle", trickle_interval=0.05).start()
    _LateHelper.go.clear()
    monkeypatch.setattr(threading, "Thread", _LateHelper)
    try:
        summarizer = Summarizer(OllamaLLMClient("fake-chat", host=fake.host, timeout=0.5), max_seconds=0.15)
        assert summarizer.summarize(["red mug", "chair"]) is None
        assert summarizer.calls_running == 1
        _LateHelper.go.set()  # after the abort: without a check it would start a request nothing ends
        assert wait_until(lambda: summarizer.calls_running == 0, 30.0)
        assert fake.chat_requests == [] and fake.active_handlers == 0
    finally:
        _LateHelper.go.set()
        fake.stop()


def test_a_call_aborted_while_it_connects_ends_once_connected(monkeypatch):
    fake = FakeOllama(mode="trickle", trickle_interval=0.05).start()
    connected = socket.create_connection
    go = threading.Event()

    def late_connect(*args, **kwargs):  # the helper descheduled inside its TCP connect until after the abort
        go.wait(30.0)
        return connected(*args, **kwargs)

    try:
        summarizer = Summarizer(OllamaLLMClient("fake-chat", host=fake.host, timeout=0.5), max_seconds=0.15)
        monkeypatch.setattr(socket, "create_connection", late_connect)
        assert summarizer.summarize(["red mug", "chair"]) is None
        go.set()  # the connection opens after the client was closed: the request goes out, then is cut
        assert wait_until(lambda: summarizer.calls_running == 0, 30.0)
        assert len(fake.chat_requests) == 1 and wait_until(lambda: fake.active_handlers == 0, 30.0)
    finally:
        go.set()
        fake.stop()


class StuckClient:
    """``complete`` blocks until ``abort`` (like a connection closed under a read)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.aborted = 0

    def complete(self, prompt: str, *, system=None) -> str:
        self.release.wait(30.0)
        raise EmemError("connection closed")

    def abort(self) -> None:
        self.aborted += 1
        self.release.set()


def test_the_deadline_abandons_the_call_and_aborts_a_client_that_can_be():
    client = StuckClient()
    summarizer = Summarizer(client, max_seconds=0.2)
    assert summarizer.summarize(["red mug", "red mug", "chair"]) is None
    assert client.aborted == 1
    assert wait_until(lambda: summarizer.calls_running == 0, 30.0)
    client.release.clear()
    assert summarizer.extract_entities(["a kitchen with a red mug"]) is None
    assert client.aborted == 2 and wait_until(lambda: summarizer.calls_running == 0, 30.0)


def test_a_client_without_abort_is_abandoned_and_its_late_reply_ignored():
    release = threading.Event()

    def slow(prompt: str) -> str:
        release.wait(30.0)
        return "The robot saw a red mug."

    summarizer = Summarizer(slow, max_seconds=1.0)  # room for the helper to reach ``slow`` on a loaded machine
    assert summarizer.summarize(["red mug"]) is None
    assert summarizer.calls_running == 1  # still inside the user's function: nothing can stop it
    release.set()
    assert wait_until(lambda: summarizer.calls_running == 0, 30.0)
    summarizer.max_seconds = 30.0  # "in time" whatever the load: the answer comes at once
    assert summarizer.summarize(["red mug"]) == "The robot saw a red mug."  # answers in time are used


def test_llm_timeout_is_the_summary_deadline_and_is_validated(tmp_path, clock):
    memory = open_memory(tmp_path / "a.db", clock, llm=lambda prompt: "ok.")
    assert memory._consolidation.summarizer.max_seconds == memory.config.llm_timeout == 120.0
    memory.close()
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError, match="llm_timeout"):
            open_memory(tmp_path / "b.db", clock, llm=lambda prompt: "ok.", llm_timeout=bad)
    with pytest.raises(InvalidInputError, match="max_seconds"):
        Summarizer(lambda prompt: "ok.", max_seconds=0)
