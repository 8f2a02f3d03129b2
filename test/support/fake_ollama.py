"""A small Ollama REST server on 127.0.0.1, so tests can drive the real ``ollama`` client.

There is no Ollama on test machines. This server speaks enough of the API
(``/api/embed``, ``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/version``)
for ``ollama.Client``, answers deterministically, records every request, and can
misbehave on purpose (``mode``):

- ``normal``: well-formed answers;
- ``error``: HTTP 500 with ``{"error": ...}``, like a crashed model runner;
- ``hang``: holds the request far longer than any client timeout, yet releases it
  at once when the server stops, so a test never leaves a stuck thread behind;
- ``garbage``: HTTP 200 whose body is not JSON;
- ``trickle``: HTTP 200, then one byte every ``trickle_interval`` seconds and never
  the end of the body: a client's per-read timeout never fires. It stops when the
  client closes the connection or the server stops.

Use it as a context manager::

    with FakeOllama(dim=16) as server:
        client = ollama.Client(host=server.host, timeout=1.0)
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

MODES = ("normal", "error", "hang", "garbage", "trickle")
Responder = Callable[[str], Optional[str]]

_WORD = re.compile(r"[A-Za-z][A-Za-z-]{2,}")
_STOPWORDS = frozenset(
    "the and with for are was were has have had this that from into onto near next "
    "its his her their our you your not but all any part parts context observations "
    "observation summaries summary robot seen times".split()
)


def default_responder(prompt: str) -> str:
    """A short, deterministic "summary" that echoes the prompt's first key words."""
    words: list[str] = []
    for word in _WORD.findall(prompt):
        lowered = word.lower()
        if lowered not in _STOPWORDS and lowered not in words:
            words.append(lowered)
        if len(words) == 6:
            break
    return f"The robot observed {', '.join(words) or 'nothing'}."


def fake_embedding(text: str, dim: int, model: str = "") -> list[float]:
    """A unit vector seeded by a hash of (model, text): equal texts, equal vectors."""
    seed = int.from_bytes(hashlib.sha256(f"{model}\0{text}".encode("utf-8")).digest()[:8], "big")
    rng = random.Random(seed)
    vector = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    body: Any  # the decoded JSON body, None for GET, the raw text if it was not JSON


def closed_port_host() -> str:
    """A 127.0.0.1 URL where nothing listens (the OS picked the port, then it was released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class FakeOllama:
    """The server; attributes ``mode``, ``dim`` and ``responder`` may be changed while it runs."""

    def __init__(
        self,
        *,
        dim: int = 16,
        mode: str = "normal",
        responder: Optional[Responder] = None,
        models: tuple[str, ...] = ("fake-embed", "fake-chat"),
        strict_models: bool = False,
        hang_seconds: float = 60.0,
        trickle_interval: float = 0.1,
        version: str = "0.12.0",
        embed_responder: Optional[Callable[[list[str]], Any]] = None,
        chat_responder: Optional[Callable[[dict], dict]] = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.dim = dim
        self.mode = mode
        self.responder: Responder = responder or default_responder
        self.chat_replies: list[dict[str, Any]] = []
        """Scripted assistant messages (e.g. with ``tool_calls``) /api/chat answers first, in order."""
        self.models = tuple(models)
        self.strict_models = strict_models  # unknown model -> 404, as a real server does
        self.hang_seconds = hang_seconds
        self.trickle_interval = trickle_interval
        self.version = version
        self.embed_responder = embed_responder  # if set, its return value is sent as "embeddings"
        # if set, chat(request body) -> the assistant message (content and/or tool_calls): a scripted model
        self.chat_responder = chat_responder
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._release = threading.Event()  # set on stop: every hanging handler returns
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the fake Ollama server is not running")
        return self._server.server_address[1]

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeOllama":
        if self._server is not None:
            return self
        self._release.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"fake-ollama-{server.server_address[1]}", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Release hanging handlers, stop serving and join every handler thread."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._release.set()
        server.shutdown()
        server.server_close()  # joins the (non-daemon) handler threads
        if thread is not None:
            thread.join(timeout)
        self._server = self._thread = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> "FakeOllama":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- assertions helpers ------------------------------------------------------------------

    def record(self, method: str, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append(RecordedRequest(method, path, body))

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return self.requests_to("/api/chat")

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def wait_released(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if the server is stopping. Used by ``hang``."""
        return self._release.wait(seconds)

    @property
    def active_handlers(self) -> int:
        """Handler threads still alive (a stuck one would show up here)."""
        server = self._server
        if server is None:
            return 0
        threads = getattr(server, "_threads", None)
        if not isinstance(threads, list):  # socketserver's _NoThreads: no request has come in yet
            return 0
        return sum(1 for t in list(threads) if t.is_alive())


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so server_close() joins the handlers and we can prove none is stuck
    block_on_close = True
    fake: FakeOllama

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout) closes its socket: expected, so quiet; anything else prints."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: nothing idles after a reply
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def fake(self) -> FakeOllama:
        return self.server.fake

    # -- plumbing ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch("GET", None)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            body: Any = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            self.fake.record("POST", self.path, raw)
            self._send_json(400, {"error": "invalid JSON in the request body"})
            return
        self._dispatch("POST", body)

    def _dispatch(self, method: str, body: Any) -> None:
        fake = self.fake
        fake.record(method, self.path, body)
        mode = fake.mode
        if mode == "hang":
            fake.wait_released(fake.hang_seconds)
            self._send_json(500, {"error": "fake ollama: released from hang"})
            return
        if mode == "error":
            self._send_json(500, {"error": "fake ollama: simulated model runner failure"})
            return
        if mode == "garbage":
            self._send_raw(200, b"<html>this is {not json", "application/json")
            return
        if mode == "trickle":
            self._trickle()
            return
        routes = {
            ("GET", "/api/version"): self._version,
            ("GET", "/api/tags"): self._tags,
            ("POST", "/api/embed"): self._embed,
            ("POST", "/api/chat"): self._chat,
            ("POST", "/api/generate"): self._generate,
        }
        handler = routes.get((method, self.path))
        if handler is None:
            self._send_json(404, {"error": f"404 page not found: {method} {self.path}"})
            return
        if method == "POST" and not isinstance(body, dict):
            self._send_json(400, {"error": "the request body must be a JSON object"})
            return
        try:
            handler(body)
        except _HTTPFailure as failure:
            self._send_json(failure.status, {"error": failure.message})
        except Exception as exc:  # a test responder raised: behave like a failing runner
            self._send_json(500, {"error": f"fake ollama responder failed: {exc}"})

    def _send_raw(self, status: int, data: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left

    def _trickle(self) -> None:
        """A 200 whose body never ends: a space every ``trickle_interval`` (whitespace before JSON)."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.flush()
            while not self.fake.wait_released(self.fake.trickle_interval):
                self.wfile.write(b" ")
                self.wfile.flush()
        except OSError:
            pass  # the client gave up and closed the connection: what a good client does

    def _send_json(self, status: int, payload: Any) -> None:
        self._send_raw(status, json.dumps(payload).encode("utf-8"), "application/json")

    def _model(self, body: dict) -> str:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _HTTPFailure(400, "model is required")
        if self.fake.strict_models and model not in self.fake.models:
            raise _HTTPFailure(404, f"model '{model}' not found")
        return model

    # -- endpoints ---------------------------------------------------------------------------

    def _version(self, _body: Any) -> None:
        self._send_json(200, {"version": self.fake.version})

    def _tags(self, _body: Any) -> None:
        models = [
            {
                "name": name, "model": name, "modified_at": _now(), "size": 1000 + i,
                "digest": hashlib.sha256(name.encode()).hexdigest(),
                "details": {"format": "gguf", "family": "fake", "parameter_size": "1M",
                            "quantization_level": "Q4_0"},
            }
            for i, name in enumerate(self.fake.models)
        ]
        self._send_json(200, {"models": models})

    def _embed(self, body: dict) -> None:
        model = self._model(body)
        texts = body.get("input", "")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise _HTTPFailure(400, "input must be a string or a list of strings")
        dim = body.get("dimensions") or self.fake.dim
        override = self.fake.embed_responder
        vectors = override(texts) if override else [fake_embedding(t, dim, model) for t in texts]
        self._send_json(200, {
            "model": model,
            "embeddings": vectors,
            "total_duration": 1000, "load_duration": 100,
            "prompt_eval_count": sum(len(t.split()) for t in texts),
        })

    def _chat(self, body: dict) -> None:
        model = self._model(body)
        if self.fake.chat_responder is not None:
            message = {"role": "assistant", "content": "", **self.fake.chat_responder(body)}
            self._send_json(200, {"model": model, "created_at": _now(), "done": True, "done_reason": "stop",
                                  "message": message, "eval_count": 1})
            return
        messages = body.get("messages") or []
        if self.fake.chat_replies:
            message = self.fake.chat_replies.pop(0)
            self._send_json(200, {"model": model, "created_at": _now(), "done": True, "done_reason": "stop",
                                  "message": message})
            return
        user = [m.get("content") or "" for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        text = self.fake.responder(user[-1] if user else "") or ""
        self._reply(body, model, text, lambda part: {"message": {"role": "assistant", "content": part}})

    def _generate(self, body: dict) -> None:
        model = self._model(body)
        text = self.fake.responder(str(body.get("prompt") or "")) or ""
        self._reply(body, model, text, lambda part: {"response": part})

    def _reply(self, body: dict, model: str, text: str, shape: Callable[[str], dict]) -> None:
        """One JSON object for ``stream: false``; NDJSON chunks otherwise (Ollama's default)."""
        final = {"model": model, "created_at": _now(), "done": True, "done_reason": "stop",
                 "total_duration": 1000, "load_duration": 100, "prompt_eval_count": 10,
                 "eval_count": max(1, len(text.split()))}
        if body.get("stream") is False:
            self._send_json(200, {**final, **shape(text)})
            return
        half = len(text) // 2
        lines = [
            {"model": model, "created_at": _now(), "done": False, **shape(text[:half])},
            {"model": model, "created_at": _now(), "done": False, **shape(text[half:])},
            {**final, **shape("")},
        ]
        data = "".join(json.dumps(line) + "\n" for line in lines).encode("utf-8")
        self._send_raw(200, data, "application/x-ndjson")


class _HTTPFailure(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def wait_until(predicate: Callable[[], bool], seconds: float = 2.0) -> bool:
    """Poll ``predicate`` until true or ``seconds`` pass (for thread-state assertions)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def tool_then_answer(tool: Callable[[list[str]], str], arguments: dict, prefix: str = "Answer: ") -> Callable[[dict], dict]:
    """A scripted tool-calling model for ``chat_responder``.

    First turn (no tool result in the conversation yet): call ``tool(offered names)``
    with ``arguments``. Once a tool result is in the conversation: answer with
    ``prefix`` followed by that result's first line, so the answer carries what
    the tool really returned.
    """

    def respond(body: dict) -> dict:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        results = [m.get("content") or "" for m in messages if m.get("role") == "tool"]
        if results:
            return {"content": prefix + (results[-1].splitlines() or [""])[0]}
        offered = [t["function"]["name"] for t in body.get("tools") or []]
        return {"content": "", "tool_calls": [{"function": {"name": tool(offered), "arguments": arguments}}]}

    return respond
