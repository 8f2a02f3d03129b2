"""The real ``ollama`` client against our fake server: embeddings, chat, and every way it can fail."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

ollama = pytest.importorskip("ollama")

from emem_ros.consolidation.llm import (  # noqa: E402
    SUMMARY_SYSTEM,
    LLMClient,
    OllamaLLMClient,
    Summarizer,
    as_llm_client,
    clean_summary,
    dedupe_with_counts,
    estimate_tokens,
    parse_name_list,
    strip_think,
)
from emem_ros.core.errors import EmemError, InvalidInputError  # noqa: E402
from emem_ros.embeddings import EmbeddingProvider  # noqa: E402
from emem_ros.embeddings.ollama_provider import OllamaEmbeddingProvider  # noqa: E402
from test.support.fake_ollama import FakeOllama, closed_port_host, fake_embedding  # noqa: E402

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
def server():
    with FakeOllama(dim=16) as fake:
        yield fake


def prompt_tokens(request) -> int:
    """What our budget counts: the system and user messages of a recorded chat request."""
    return sum(estimate_tokens(m["content"]) for m in request.body["messages"])


def user_prompt(request) -> str:
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"][-1]


# -- the fake server itself ------------------------------------------------------------------------


def test_fake_server_speaks_what_the_real_client_expects(server):
    client = ollama.Client(host=server.host, timeout=5)
    assert [m.model for m in client.list().models] == ["fake-embed", "fake-chat"]
    with urllib.request.urlopen(server.host + "/api/version", timeout=5) as answer:
        assert json.loads(answer.read())["version"] == server.version
    generated = client.generate(model="fake-chat", prompt="red mug on the kitchen table", stream=False)
    assert generated.done and generated.response == "The robot observed red, mug, kitchen, table."
    streamed = "".join(
        part.message.content for part in client.chat(
            model="fake-chat", messages=[{"role": "user", "content": "blue door"}], stream=True)
    )
    assert streamed == "The robot observed blue, door."
    single = client.embed(model="fake-embed", input="one text")  # str input, not a list
    assert len(single.embeddings) == 1 and len(single.embeddings[0]) == 16
    assert [r.path for r in server.requests] == [
        "/api/tags", "/api/version", "/api/generate", "/api/chat", "/api/embed"]
    assert server.requests[2].body["stream"] is False and server.requests[3].body["stream"] is True


def test_modules_do_not_import_ollama_until_used():
    code = ("import sys, emem_ros.embeddings.ollama_provider, emem_ros.consolidation.llm; "
            "print('ollama' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- embeddings ------------------------------------------------------------------------------------


def test_provider_discovers_dim_from_its_first_call_and_returns_unit_rows(server):
    provider = OllamaEmbeddingProvider("fake-embed", host=server.host)
    assert provider.model_name == "ollama:fake-embed"
    assert server.requests == []  # nothing is asked before it is needed
    vectors = provider.embed(["red mug", "table", "red mug"])
    assert vectors.shape == (3, 16) and vectors.dtype == np.float32
    assert provider.dim == 16
    assert len(server.requests_to("/api/embed")) == 1  # the first call doubled as the probe
    assert isinstance(provider, EmbeddingProvider)  # (before 3.12 this reads .dim, hence not earlier)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors[0], vectors[2]) and not np.allclose(vectors[0], vectors[1])
    assert np.allclose(vectors[1], fake_embedding("table", 16, "fake-embed"), atol=1e-6)


def test_dim_property_probes_once_and_given_dim_never_probes(server):
    server.dim = 24
    lazy = OllamaEmbeddingProvider("fake-embed", host=server.host)
    assert lazy.dim == 24 and lazy.dim == 24
    assert len(server.requests_to("/api/embed")) == 1
    assert lazy.embed([]).shape == (0, 24)
    given = OllamaEmbeddingProvider("fake-embed", host=server.host, dim=24)
    assert given.dim == 24
    assert len(server.requests_to("/api/embed")) == 1


def test_provider_batches_large_inputs_and_keeps_order(server):
    texts = [f"object number {i}" for i in range(11)]
    batched = OllamaEmbeddingProvider("fake-embed", host=server.host, batch_size=4).embed(texts)
    sizes = [len(r.body["input"]) for r in server.requests_to("/api/embed")]
    assert sizes == [4, 4, 3]
    whole = OllamaEmbeddingProvider("fake-embed", host=server.host, batch_size=100).embed(texts)
    assert np.allclose(batched, whole)


def test_provider_error_names_host_and_model_on_http_500(server):
    server.mode = "error"
    provider = OllamaEmbeddingProvider("fake-embed", host=server.host, dim=16)
    with pytest.raises(EmemError) as caught:
        provider.embed(["red mug"])
    message = str(caught.value)
    assert server.host in message and "fake-embed" in message
    assert "HTTP 500" in message and "simulated model runner failure" in message


def test_provider_error_names_host_on_a_closed_port():
    host = closed_port_host()
    provider = OllamaEmbeddingProvider("fake-embed", host=host, timeout=2)
    started = time.monotonic()
    with pytest.raises(EmemError, match="cannot connect") as caught:
        _ = provider.dim
    assert host in str(caught.value) and "fake-embed" in str(caught.value)
    assert time.monotonic() - started < 2


def test_provider_unknown_model_suggests_pulling_it(server):
    server.strict_models = True
    with pytest.raises(EmemError, match="ollama pull nomic-embed-text") as caught:
        OllamaEmbeddingProvider("nomic-embed-text", host=server.host).embed(["x"])
    assert "HTTP 404" in str(caught.value)


@pytest.mark.parametrize(
    "answer, expected",
    [
        (lambda texts: [[0.1] * 16], "returned 1 embeddings"),                  # a row missing
        (lambda texts: [[0.1] * 16, [0.1] * 15], "returned 2 embeddings"),      # ragged
        (lambda texts: [[0.1] * 8, [0.1] * 8], "expected length 16"),          # not the given dim
        (lambda texts: "not a list", "could not be read"),                      # not a matrix
    ],
)
def test_provider_rejects_answers_of_the_wrong_shape(server, answer, expected):
    server.embed_responder = answer
    provider = OllamaEmbeddingProvider("fake-embed", host=server.host, dim=16)
    with pytest.raises(EmemError, match=expected) as caught:
        provider.embed(["a", "b"])
    assert server.host in str(caught.value)


def test_provider_rejects_bad_arguments():
    with pytest.raises(InvalidInputError):
        OllamaEmbeddingProvider("")
    with pytest.raises(InvalidInputError):
        OllamaEmbeddingProvider("m", batch_size=0)
    with pytest.raises(InvalidInputError):
        OllamaEmbeddingProvider("m", dim=-3)


# -- the chat client -------------------------------------------------------------------------------


def test_chat_completion_strips_think_and_sends_a_non_streaming_request(server):
    server.responder = lambda prompt: f"<think>the user wants {prompt}</think>\nA red mug."
    llm = OllamaLLMClient("fake-chat", host=server.host, options={"temperature": 0.1})
    assert isinstance(llm, LLMClient)
    assert llm.complete("describe", system="be brief") == "A red mug."
    body = server.chat_requests[0].body
    assert body["stream"] is False and body["think"] is False
    assert body["options"]["temperature"] == 0.1
    assert body["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "describe"}]


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("<think>hmm</think>answer", "answer"),
        ("<THINK>a\nb</THINK> one <think>x</think>two", "one two"),
        ("<think>ran out of tokens while thinking", ""),
        ("reasoning the template opened</think>\nthe answer", "the answer"),
        ("plain answer", "plain answer"),
        ("", ""),
    ],
)
def test_strip_think(raw, clean):
    assert strip_think(raw) == clean


@pytest.mark.timeout(10)
def test_chat_client_times_out_with_host_and_model_in_the_error():
    with FakeOllama(mode="hang") as fake:
        llm = OllamaLLMClient("fake-chat", host=fake.host, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(EmemError, match="did not answer within 0.3 s") as caught:
            llm.complete("hello")
        assert time.monotonic() - started < 3
        assert fake.host in str(caught.value) and "fake-chat" in str(caught.value)


def test_as_llm_client_wraps_the_shapes_robots_already_have(server):
    seen = []

    def fn(prompt):
        seen.append(prompt)
        return "<think>x</think>from a function"

    class Inference:
        def inference(self, request):
            return {"output": "from inference " + request["query"][-1]["content"]}

    assert as_llm_client(fn).complete("hi", system="sys") == "from a function"
    assert seen == ["sys\n\nhi"]
    assert as_llm_client(Inference()).complete("q") == "from inference q"
    raw_client = ollama.Client(host=server.host, timeout=5)  # ollama-style .chat
    wrapped = as_llm_client(raw_client, model="fake-chat")
    assert wrapped.complete("green plant") == "The robot observed green, plant."
    llm = OllamaLLMClient("fake-chat", host=server.host)
    assert as_llm_client(llm) is llm
    with pytest.raises(InvalidInputError, match="cannot use a int"):
        as_llm_client(42)


# -- the summarizer --------------------------------------------------------------------------------


def test_summary_prompt_counts_repeats_instead_of_repeating_them(server):
    summarizer = Summarizer(OllamaLLMClient("fake-chat", host=server.host))
    texts = ["red mug"] * 12 + ["Table  "] * 2 + ["table"] + ["door"]
    summary = summarizer.summarize(texts, context="kitchen patrol, 10:00-10:05")
    assert summary == "The robot observed kitchen, patrol, red, mug, table, door."
    [request] = server.chat_requests
    prompt = user_prompt(request)
    assert "- red mug (x12)" in prompt and "- Table (x3)" in prompt
    assert "- door\n" in prompt + "\n" and "door (x1)" not in prompt
    assert prompt.count("red mug") == 1
    assert request.body["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM}


def test_dedupe_with_counts_keeps_first_spelling_and_order():
    assert dedupe_with_counts(["b", "A", "a ", "", "  ", "b", "c"]) == [("b", 2), ("A", 2), ("c", 1)]


def test_map_reduce_keeps_every_prompt_within_the_budget(server):
    budget = 400
    texts = [f"observation {i}: a {c} box on shelf {i % 7} near the loading bay door"
             for i, c in enumerate(["red", "blue", "green", "grey"] * 15)]
    assert sum(estimate_tokens(t) for t in texts) > budget  # really too big for one prompt
    summarizer = Summarizer(OllamaLLMClient("fake-chat", host=server.host), max_prompt_tokens=budget)
    summary = summarizer.summarize(texts, context="warehouse")
    requests = server.chat_requests
    assert summary is not None and len(requests) > 2
    assert all(prompt_tokens(r) <= budget for r in requests)
    assert "This is part 1 of" in user_prompt(requests[0])
    final = user_prompt(requests[-1])
    assert "Summaries of consecutive parts" in final
    assert all(f"observation {i}:" in "".join(user_prompt(r) for r in requests[:-1]) for i in range(60))


def test_map_step_is_bounded_and_keeps_the_frequent_texts(server):
    texts = [f"distinct rare thing number {i} seen once in a corner" for i in range(200)]
    texts += ["charging dock"] * 50
    summarizer = Summarizer(OllamaLLMClient("fake-chat", host=server.host),
                            max_prompt_tokens=300, max_chunks=2)
    assert summarizer.summarize(texts) is not None
    requests = server.chat_requests
    assert len(requests) == 3  # two parts, one reduce
    mapped = "".join(user_prompt(r) for r in requests[:2])
    assert "- charging dock (x50)" in mapped
    assert 10 < mapped.count("rare thing number") < 200  # the rarest were left out, not all
    assert all(prompt_tokens(r) <= 300 for r in requests)


@pytest.mark.timeout(10)
def test_hang_returns_none_promptly_and_leaves_no_thread_stuck(caplog):
    fake = FakeOllama(mode="hang", hang_seconds=60).start()
    try:
        summarizer = Summarizer(OllamaLLMClient("fake-chat", host=fake.host, timeout=0.5))
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="emem_ros.consolidation.llm"):
            assert summarizer.summarize(["red mug"] * 3, context="kitchen") is None
        assert time.monotonic() - started < 3
        assert len(fake.chat_requests) == 1  # the first failure ends the attempt
        assert fake.active_handlers == 1  # the server is still holding the abandoned request
        assert any(fake.host in r.getMessage() and "did not answer" in r.getMessage()
                   for r in caplog.records)
    finally:
        stopping = time.monotonic()
        fake.stop()
        assert time.monotonic() - stopping < 2
    assert not fake.running and fake.active_handlers == 0


@pytest.mark.parametrize("mode", ["garbage", "error"])
def test_bad_server_answers_give_none_and_a_warning(mode, caplog):
    with FakeOllama(mode=mode) as fake:
        summarizer = Summarizer(OllamaLLMClient("fake-chat", host=fake.host, timeout=5))
        with caplog.at_level(logging.WARNING, logger="emem_ros.consolidation.llm"):
            assert summarizer.summarize(["red mug"]) is None
            assert summarizer.extract_entities(["a red mug"]) is None
        assert len(fake.chat_requests) == 2
        assert sum(fake.host in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize("reply", ["", "   ", "<think>only thinking</think>", "...!!! 123", "{}"])
def test_empty_or_wordless_replies_give_none(server, reply):
    server.responder = lambda prompt: reply
    assert Summarizer(OllamaLLMClient("fake-chat", host=server.host)).summarize(["red mug"]) is None


def test_a_failing_part_fails_the_whole_summary(server):
    calls = []

    def flaky(prompt):
        calls.append(prompt)
        if len(calls) == 2:
            raise RuntimeError("runner crashed")
        return "fine part."

    server.responder = flaky
    texts = [f"pallet {i} stacked in aisle {i}" * 3 for i in range(80)]
    summarizer = Summarizer(OllamaLLMClient("fake-chat", host=server.host), max_prompt_tokens=300)
    assert summarizer.summarize(texts) is None
    assert len(calls) == 2  # no more calls after the failure


def test_replies_are_cleaned_and_clipped(server):
    long = "Here is a short summary: " + " ".join(["The robot saw a red mug by the sink."] * 30)
    server.responder = lambda prompt: long
    summary = Summarizer(OllamaLLMClient("fake-chat", host=server.host),
                         max_reply_chars=120).summarize(["red mug"])
    assert summary is not None and len(summary) <= 120
    assert summary.startswith("The robot saw a red mug") and summary.endswith(".")
    assert clean_summary("x" * 10 + " word" * 100, 50).endswith("…")


def test_summarizer_never_raises_on_odd_input():
    def broken(prompt):
        raise ValueError("boom")

    summarizer = Summarizer(broken)
    assert summarizer.summarize([]) is None  # nothing to say
    assert summarizer.summarize(["a", "b"]) is None
    assert summarizer.summarize(None) is None  # type: ignore[arg-type]


def test_summary_time_limit_spans_all_calls():
    def slow(prompt):
        time.sleep(0.2)
        return "ok then."

    texts = [f"crate {i} on rack {i}" * 4 for i in range(100)]
    summarizer = Summarizer(slow, max_prompt_tokens=300, max_seconds=0.3)
    started = time.monotonic()
    assert summarizer.summarize(texts) is None
    assert time.monotonic() - started < 1.5


def test_summarizer_rejects_a_budget_too_small_for_its_instructions():
    with pytest.raises(InvalidInputError, match="max_prompt_tokens"):
        Summarizer(lambda p: "x", max_prompt_tokens=50)


# -- entities --------------------------------------------------------------------------------------


def test_extract_entities_reads_a_fenced_json_array(server):
    server.responder = lambda prompt: (
        'Sure! Here they are:\n```json\n["Red Mug", "table", {"name": "sofa"}, "table", 3]\n```'
    )
    summarizer = Summarizer(OllamaLLMClient("fake-chat", host=server.host))
    names = summarizer.extract_entities(["a red mug on the table", "a sofa", "a red mug on the table"])
    assert names == ["red mug", "table", "sofa"]
    prompt = user_prompt(server.chat_requests[0])
    assert "JSON array" in prompt and prompt.count("a red mug on the table") == 1


def test_extract_entities_without_an_array_is_none(server):
    server.responder = lambda prompt: "I see a mug and a table."
    assert Summarizer(OllamaLLMClient("fake-chat", host=server.host)).extract_entities(["x"]) is None


@pytest.mark.parametrize(
    "reply, names",
    [
        ("[]", []),
        ('prose [not json] then ["door"]', ["door"]),
        ('<think>["wrong"]</think>["chair"]', ["chair"]),
        ('{"objects": ["a"]}', ["a"]),
        ("no list here", None),
    ],
)
def test_parse_name_list(reply, names):
    assert parse_name_list(reply) == names


def test_estimate_tokens_is_ceil_of_chars_over_four():
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5)] == [0, 1, 1, 2]
    assert estimate_tokens("y" * 4001) == math.ceil(4001 / 4)
