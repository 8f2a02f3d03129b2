"""After a forget, an episode's summary is written again from what remains, by end_episode's summariser.

With an LLM (the real ``ollama`` client against test/support/fake_ollama.py)
the new summary comes from the LLM, which is never shown what was forgotten;
without one, from the plain digest. Either way nothing forgotten is left in it.
"""

from __future__ import annotations

import re

import pytest

from emem_ros.consolidation.llm import OllamaLLMClient
from test.support.fake_ollama import FakeOllama
from test.support.patrol import open_memory

CANARY = "a man in a red jacket qzxepisode7 waits at the door"
UNIQUE = "qzxepisode7"


def quoting(prompt: str) -> str:
    """An LLM that quotes everything it is given (so it would repeat anything forgotten it saw)."""
    return "LLM recap: " + " ".join(prompt.split()[-80:])


def _patrol(memory, clock) -> int:
    """An episode: the canary seen 3 times at the door, a blue chair 5 times by the window; consolidated."""
    episode = memory.start_episode("watch the door", goal="see who comes in")
    t0 = clock.now
    for i in range(3):
        memory.add(CANARY, x=2.0, y=2.0, timestamp=t0 + i, layer_name="scene")
    for i in range(5):
        memory.add("a blue chair by the window", x=6.0, y=6.0, timestamp=t0 + 10 + i, layer_name="scene")
    clock.advance(30)
    memory.end_episode(result=f"saw {CANARY}", success=True)
    assert memory.wait_for_consolidation(30.0)
    return int(episode.split("-")[1])


def _summary(memory, number: int) -> str:
    return memory.store.get_episode(number).summary


def test_without_an_llm_the_summary_is_the_digest_of_what_remains(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    try:
        number = _patrol(memory, clock)
        before = _summary(memory, number)
        assert UNIQUE in before and "8 observations in 2 places" in before
        report = memory.forget(match="red jacket")
        assert report.episodes_resummarised == 1 and report.episodes_scrubbed == 1
        after = _summary(memory, number)
        assert UNIQUE not in after and "red jacket" not in after.lower()
        assert "5 observations in 1 place" in after and "blue chair" in after  # from what remains
        assert "result: saw [forgotten]" in after  # the episode's own result, scrubbed
        answer = memory.episode_summary()
        assert UNIQUE not in answer and "blue chair" in answer
    finally:
        memory.close()


def test_with_an_llm_the_new_summary_comes_from_it_and_it_never_sees_the_forgotten(tmp_path, clock):
    with FakeOllama(responder=quoting) as server:
        llm = OllamaLLMClient("fake-chat", host=server.host, timeout=5.0)
        memory = open_memory(tmp_path / "m.db", clock, llm=llm)
        try:
            number = _patrol(memory, clock)
            before = _summary(memory, number)
            assert before.startswith("LLM recap:") and UNIQUE in before  # the LLM quotes what it is shown
            asked = len(server.chat_requests)
            report = memory.forget(match="red jacket", reason="asked")
            assert report.episodes_resummarised == 1
            prompts = [r.body["messages"][-1]["content"] for r in server.chat_requests[asked:]]
            assert prompts, "the episode was summarised again through the LLM"
            assert not any(UNIQUE in p or re.search("red jacket", p, re.IGNORECASE) for p in prompts), prompts
            after = _summary(memory, number)
            assert after.startswith("LLM recap:") and UNIQUE not in after and "blue chair" in after
            assert "red jacket" not in after.lower()
        finally:
            memory.close()


@pytest.mark.parametrize("mode", ["error"])
def test_a_failing_llm_leaves_the_digest_and_nothing_forgotten(tmp_path, clock, mode):
    with FakeOllama(responder=quoting) as server:
        memory = open_memory(tmp_path / "m.db", clock,
                             llm=OllamaLLMClient("fake-chat", host=server.host, timeout=5.0))
        try:
            number = _patrol(memory, clock)
            server.mode = mode
            assert memory.forget(match="red jacket").episodes_resummarised == 1
            after = _summary(memory, number)
            assert not after.startswith("LLM recap:") and UNIQUE not in after
            assert "5 observations in 1 place" in after
        finally:
            memory.close()


def test_a_forget_by_id_re_summarises_the_episodes_that_lost_observations(tmp_path, clock):
    memory = open_memory(tmp_path / "m.db", clock)
    try:
        number = _patrol(memory, clock)
        chair = [r[0] for r in memory.store.reader().execute(
            "SELECT o.id FROM observations o JOIN texts t ON t.id = o.text_id WHERE t.text LIKE 'a blue chair%'")]
        report = memory.forget(ids=[f"obs-{i}" for i in chair[:2]])
        assert report.episodes_resummarised == 1 and report.episodes_scrubbed == 0  # the chair text stays
        assert "6 observations in 2 places" in _summary(memory, number)
    finally:
        memory.close()
