"""run_ollama_chat: the tool loop with a scripted client and with the real ollama client over HTTP."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from emem_ros.tools import run_ollama_chat


def _call(name, arguments):
    return {"function": {"name": name, "arguments": arguments}}


class ScriptedClient:
    """Answers chat() with prepared messages and remembers what it was sent."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []

    def chat(self, model, messages, tools=None, **options):
        self.requests.append({"model": model, "messages": list(messages), "tools": tools, "options": options})
        return {"message": self.replies.pop(0)}


@pytest.fixture
def memory(make_memory):
    memory = make_memory()
    memory.add("red chair", x=2.0, y=3.0, source_type="perception", layer_name="detections")
    memory.add_body_state("battery 54%", "battery", value=0.54)
    return memory


def test_tool_calls_are_run_and_answered(memory):
    client = ScriptedClient([
        {"role": "assistant", "content": "", "tool_calls": [
            _call("locate", {"concept": "red chair"}), _call("body_status", "{}")]},
        {"role": "assistant", "content": "The red chair is at (2, 3); battery 54%."},
    ])
    outcome = run_ollama_chat(memory, client, "qwen3", [{"role": "user", "content": "where is the chair?"}])
    assert str(outcome) == "The red chair is at (2, 3); battery 54%." and outcome.rounds == 2
    assert [r.name for r in outcome.tool_calls] == ["locate", "body_status"]
    tool_messages = [m for m in outcome.messages if m["role"] == "tool"]
    assert tool_messages[0]["tool_name"] == "locate" and "(2.0, 3.0)" in tool_messages[0]["content"]
    assert tool_messages[1]["content"].startswith("Body status:")
    assert client.requests[0]["tools"] == memory.get_tool_definitions()
    assert client.requests[1]["messages"][-1] == tool_messages[1]
    assert not outcome.hit_round_limit


def test_a_bad_call_is_answered_with_an_error_the_model_can_fix(memory):
    client = ScriptedClient([
        {"role": "assistant", "content": "", "tool_calls": [_call("semantic_serch", {"query": "chair"})]},
        {"role": "assistant", "content": "", "tool_calls": [_call("semantic_search", {"query": "chair"})]},
        {"role": "assistant", "content": "I found the red chair."},
    ])
    outcome = run_ollama_chat(memory, client, "m", [{"role": "user", "content": "chair?"}])
    assert outcome.tool_calls[0].result.startswith("Error: there is no tool named 'semantic_serch'")
    assert '"red chair"' in outcome.tool_calls[1].result
    assert outcome.content == "I found the red chair." and outcome.rounds == 3


def test_the_round_limit_forces_an_answer(memory):
    looping = {"role": "assistant", "content": "", "tool_calls": [_call("body_status", {})]}
    client = ScriptedClient([looping, looping, {"role": "assistant", "content": "Battery is fine."}])
    outcome = run_ollama_chat(memory, client, "m", [{"role": "user", "content": "battery?"}], max_rounds=2)
    assert outcome.hit_round_limit and outcome.content == "Battery is fine." and len(outcome.tool_calls) == 2
    assert client.requests[-1]["tools"] is None
    with pytest.raises(ValueError):
        run_ollama_chat(memory, client, "m", [], max_rounds=0)


class _FakeOllama(BaseHTTPRequestHandler):
    replies: list = []
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body))
        reply = {"model": body["model"], "created_at": "2025-11-22T10:00:00Z", "done": True,
                 "done_reason": "stop", "message": type(self).replies.pop(0)}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_the_real_ollama_client_over_http(memory):
    ollama = pytest.importorskip("ollama")
    _FakeOllama.replies = [
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "semantic_search", "arguments": {"query": "red chair", "n_results": 2}}}]},
        {"role": "assistant", "content": "There is a red chair at (2, 3)."},
    ]
    _FakeOllama.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOllama)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = ollama.Client(host=f"http://127.0.0.1:{server.server_address[1]}")
        outcome = run_ollama_chat(memory, client, "llama3.2", [{"role": "user", "content": "any chairs?"}])
    finally:
        server.shutdown()
        server.server_close()
    assert outcome.content == "There is a red chair at (2, 3)."
    (path1, first), (path2, second) = _FakeOllama.seen
    assert path1 == path2 == "/api/chat"
    assert [t["function"]["name"] for t in first["tools"]][:10] == [
        "semantic_search", "spatial_query", "temporal_query", "episode_summary", "get_current_context",
        "search_gists", "entity_query", "locate", "recall", "body_status"]
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_name"] == "semantic_search"
    assert '"red chair"' in tool_message["content"]
    assert second["messages"][1]["tool_calls"][0]["function"]["name"] == "semantic_search"
