"""A scripted Ollama on 127.0.0.1 for EmbodiedAgents' OllamaClient (Cortex's planner), per test.

Built on ../shared/ros2/emos-example/fake_ollama.py (the subset of Ollama's API
that ollama-python uses: ``GET /``, ``/api/pull``, ``/api/show``,
``/api/generate``, ``/api/chat``), in the test's own process: a test sets
``server.planner`` to a function of the chat request that returns the
assistant message, and reads every chat request back from ``server.chats``
(the planning prompt Cortex sent, the tool results it fed back).

Cortex asks the model twice kinds of questions: planning (its planning prompt
as the system message, with tools) and confirmation of each plan step (a
"Respond EXECUTE, SKIP, ABORT, or CONTINUE" user message); ``is_confirmation``
tells them apart. The server listens on a free port and stops with ``stop()``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

Planner = Callable[[dict[str, Any]], dict[str, Any]]


def is_confirmation(request: dict[str, Any]) -> bool:
    messages = request.get("messages") or []
    return bool(messages) and "Respond EXECUTE, SKIP, ABORT, or CONTINUE" in str(messages[-1].get("content", ""))


def tool_results(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content", "")) for m in request.get("messages") or [] if m.get("role") == "tool"]


def called(request: dict[str, Any]) -> list[str]:
    """Names of the tools the conversation has called so far."""
    return [tc.get("function", {}).get("name", "") for m in request.get("messages") or []
            for tc in m.get("tool_calls") or []]


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}


def plan(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": args}} for name, args in calls]}


def text(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def _default(request: dict[str, Any]) -> dict[str, Any]:
    return text("EXECUTE" if is_confirmation(request) else "(scripted ollama) no script for this request")


class ScriptedOllama:
    def __init__(self) -> None:
        self.planner: Planner = _default
        self.chats: list[dict[str, Any]] = []
        """Every /api/chat request, in order."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-ollama", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> "ScriptedOllama":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def script(self, planner: Optional[Planner]) -> None:
        with self._lock:
            self.planner = planner or _default
            self.chats.clear()

    def planning_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [c for c in self.chats if c.get("tools") and not is_confirmation(c)]

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.chats.append(request)
            planner = self.planner
        message = planner(request)
        return {"model": request.get("model", "fake"), "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "message": message, "done": True, "done_reason": "stop", "total_duration": 1, "eval_count": 1}


def _handler(owner: ScriptedOllama) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            if self.path in ("/", ""):
                return self._send(200, "Ollama is running", "text/plain; charset=utf-8")
            if self.path == "/api/version":
                return self._send(200, {"version": "0.0.0-scripted"})
            if self.path == "/api/tags":
                return self._send(200, {"models": []})
            self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            try:
                request = json.loads(self.rfile.read(size) or b"{}")
            except ValueError:
                return self._send(400, {"error": "not JSON"})
            if self.path == "/api/chat":
                answer = owner.reply(request)
                if request.get("stream") is True:
                    return self._send(200, json.dumps(answer) + "\n", "application/x-ndjson")
                return self._send(200, answer)
            if self.path == "/api/pull":
                return self._send(200, {"status": "success"})
            if self.path == "/api/show":
                return self._send(200, {"modified_at": "2024-01-01T00:00:00Z", "capabilities": ["completion", "tools"],
                                        "details": {"family": "fake", "parameter_size": "0B"}})
            if self.path == "/api/generate":
                return self._send(200, {"model": request.get("model", "fake"), "response": "", "done": True,
                                        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                        "done_reason": "load" if request.get("keep_alive") else "unload"})
            self._send(404, {"error": f"unsupported path {self.path}"})

    return Handler
