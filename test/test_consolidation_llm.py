"""LLM summaries through the real ``ollama`` client against our fake server, failures included."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("ollama")

from emem_ros.consolidation.llm import OllamaLLMClient
from test.support.fake_ollama import FakeOllama, default_responder, wait_until
from test.support.patrol import age_past_window, gist_rows, open_memory, patrol_into


def responder(prompt: str) -> str:
    if "JSON array" in prompt:
        return '["red mug", "table"]' if "red mug" in prompt.split("Descriptions:")[-1] else "[]"
    return default_responder(prompt)


def _consolidated_everything(memory, report) -> None:
    left = memory.store.reader().execute(
        "SELECT COUNT(*) FROM observations WHERE tier = 'short_term'").fetchone()[0]
    assert left == report.noise, "a failing LLM must not cost a single observation"


def test_gists_and_entities_through_a_working_llm(tmp_path, clock):
    with FakeOllama(responder=responder) as server:
        llm = OllamaLLMClient("fake-chat", host=server.host, timeout=5.0)
        memory = open_memory(tmp_path / "m.db", clock, llm=llm)
        info = patrol_into(memory, clock, 1500)
        age_past_window(memory, clock)
        report = memory.maintenance()
        assert report.consolidation.gists == info.visits
        assert report.consolidation.llm_summaries == info.visits and report.consolidation.fallback_summaries == 0
        first = memory.store.get_gists([gist_rows(memory)[0][0]])[0]
        assert first.text.startswith("kitchen area (") and "The robot observed" in first.text
        assert first.metadata["summary"] == "llm"
        prompts = [r.body["messages"][-1]["content"] for r in server.chat_requests]
        prompt = next(p for p in prompts if "JSON array" not in p)
        assert "red mug" in prompt and "×" in prompt  # the LLM reads the counted digest, not raw texts
        names = {r[0] for r in memory.store.reader().execute("SELECT name FROM entities")}
        assert {"red mug", "table", "sofa"} <= names  # detections directly; "table" only from the scenes
        memory.close()


@pytest.mark.parametrize("mode", ["error", "hang", "garbage"])
def test_a_failing_llm_falls_back_and_nothing_is_lost_or_stuck(tmp_path, clock, mode):
    before = set(threading.enumerate())
    with FakeOllama(mode=mode, hang_seconds=30.0) as server:
        llm = OllamaLLMClient("fake-chat", host=server.host, timeout=0.5)
        memory = open_memory(tmp_path / "m.db", clock, llm=llm)
        info = patrol_into(memory, clock, 1500)
        age_past_window(memory, clock)
        started = time.perf_counter()
        report = memory.consolidate_time_window(timeout=20.0)
        elapsed = time.perf_counter() - started
        assert report.gists == info.visits and report.llm_summaries == 0
        assert report.fallback_summaries == info.visits
        _consolidated_everything(memory, report)
        texts = [r[1] for r in gist_rows(memory)]
        assert all("×" in t and " | " not in t for t in texts)
        assert len(server.chat_requests) == 3, "after three failures in a row the run stops asking"
        assert elapsed < 3 * 0.5 + 5.0
        memory.start_episode("errand")
        memory.add("red mug", x=1.0, y=1.0, layer_name="detections")
        memory.end_episode()
        assert memory.wait_for_consolidation(10.0)
        assert memory.store.list_episodes(last_n=1)[0].summary.startswith("errand, ")
        memory.close()
    assert server.active_handlers == 0
    assert wait_until(lambda: not [t for t in set(threading.enumerate()) - before if t.is_alive()], 3.0)
