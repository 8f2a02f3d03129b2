"""The LLM side of consolidation: clients, prompt budgeting and parsing, independent of the store.

An LLM is an optional nicety here: gists and entities have non-LLM fallbacks.
So ``Summarizer`` never raises; on any failure (error, timeout, empty or
unreadable reply) it logs a warning and returns ``None``, and the caller keeps
its plain summary. Clients, by contrast, raise ``EmemError`` naming host and
model, so a failure is explained once, where it is logged.

Time: a client's own timeout is per read, so a server that trickles a byte
now and then holds a call forever. With ``max_seconds`` set, every call runs
in a helper thread that the summarizer stops waiting for at the deadline
(a failure like any other); a client with ``abort()`` (``OllamaLLMClient``)
has its connection closed then, so the helper ends too instead of lingering.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, TypeGuard, runtime_checkable

from emem_ros.core.errors import EmemError, InvalidInputError
from emem_ros.embeddings.ollama_provider import ollama_client, ollama_failure, resolve_host

log = logging.getLogger(__name__)


@runtime_checkable
class LLMClient(Protocol):
    def complete(self, prompt: str, *, system: Optional[str] = None) -> str: ...


def _completes(obj: object) -> TypeGuard[LLMClient]:
    """Has a callable ``complete`` (its signature cannot be checked at run time; the duck test is this)."""
    return callable(getattr(obj, "complete", None))


# -- reply cleaning ------------------------------------------------------------------------------

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


def strip_think(text: str) -> str:
    """Drop reasoning blocks that reasoning models put in the content.

    Handles closed ``<think>…</think>`` blocks, an unterminated ``<think>`` (the
    model ran out of tokens while thinking: nothing after it is an answer), and an
    orphan ``</think>`` (the template opened the block in the prompt).
    """
    text = _THINK_BLOCK.sub("", text or "")
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text.strip()


def reply_text(reply: Any) -> str:
    """The text of a reply from any common client shape (str, ollama response, dict)."""
    if reply is None:
        return ""
    if isinstance(reply, str):
        return reply
    message = _field(reply, "message")
    if message is not None:
        return reply_text(_field(message, "content"))
    for key in ("output", "response", "content", "text"):
        value = _field(reply, key)
        if isinstance(value, str):
            return value
    raise EmemError(f"the LLM returned a {type(reply).__name__} with no text in it")


def _field(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _messages(prompt: str, system: Optional[str]) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    return messages


# -- clients -------------------------------------------------------------------------------------


_given_up = threading.local()
"""In a Summarizer's helper thread: ``event``, set once the call is abandoned (before the client's abort)."""


def _call_given_up() -> bool:
    event = getattr(_given_up, "event", None)
    return event is not None and event.is_set()


def _abortable_client(host: str, timeout: float) -> Any:
    """An ``ollama.Client`` whose ``close`` also ends a request still opening its connection.

    Closing an httpx client closes the connections it holds, but a call that
    was still connecting gets its connection after that and would then read a
    trickling reply for ever; its transport checks, once the response head is
    in, whether it was closed meanwhile.
    """
    import httpx

    class Transport(httpx.HTTPTransport):
        closed = False

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            response = super().handle_request(request)
            if self.closed:  # set before the pool closes: a close after this check reaches the connection
                response.close()
                raise httpx.ReadError("the call was aborted while it connected", request=request)
            return response

        def close(self) -> None:
            self.closed = True
            super().close()

    return ollama_client(host, timeout, transport=Transport())


class OllamaLLMClient:
    """``LLMClient`` over ``ollama.Client.chat`` (non-streaming); raises EmemError naming host/model."""

    def __init__(
        self,
        model: str,
        host: Optional[str] = None,
        timeout: float = 60.0,
        options: Optional[dict[str, Any]] = None,
        think: bool = False,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidInputError("OllamaLLMClient needs a model name, e.g. 'qwen3:4b'")
        if not timeout or timeout <= 0:
            raise InvalidInputError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.model = model
        self.host = resolve_host(host)
        self.timeout = float(timeout)
        self.options = dict(options) if options else None
        self.think = bool(think)
        self.model_name = f"ollama:{model}"
        self._client = _abortable_client(self.host, self.timeout)
        self._swap = threading.Lock()

    def complete(self, prompt: str, *, system: Optional[str] = None) -> str:
        with self._swap:  # a call given up before it got here must not take the fresh client (see abort)
            if _call_given_up():
                raise EmemError("LLM call abandoned before it started")
            client = self._client
        try:
            response = client.chat(
                model=self.model, messages=_messages(prompt, system),
                options=self.options, stream=False, think=self.think,
            )
            return strip_think(reply_text(response))
        except Exception as exc:  # the ollama client raises many unrelated types; translate all
            raise ollama_failure(
                exc, host=self.host, model=self.model, doing="generating a reply", timeout=self.timeout
            ) from exc

    def abort(self) -> None:
        """Close the connection of a call in flight (it fails at its next read) and start a fresh one.

        The only way to end a request whose server trickles bytes: the read
        timeout never fires, and a thread cannot be killed.
        """
        with self._swap:
            old, self._client = self._client, _abortable_client(self.host, self.timeout)
        try:
            old.close()
        except Exception as exc:  # closing a half-used connection may complain; the call fails either way
            log.debug("closing an aborted Ollama connection: %s", exc)

    def close(self) -> None:
        self._client.close()


class _ChatAdapter:
    """Wraps an object with an ollama-style ``chat(model=..., messages=[...])``."""

    def __init__(self, obj: Any, model: Optional[str]) -> None:
        self._obj = obj
        self._model = model

    def complete(self, prompt: str, *, system: Optional[str] = None) -> str:
        kwargs: dict[str, Any] = {"messages": _messages(prompt, system)}
        if self._model:
            kwargs["model"] = self._model
        return strip_think(reply_text(self._obj.chat(**kwargs)))


class _InferenceAdapter:
    """Wraps an EmbodiedAgents ``ModelClient`` (``inference(dict) -> {"output": ...}``), as emem does."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def complete(self, prompt: str, *, system: Optional[str] = None) -> str:
        result = self._obj.inference({"query": _messages(prompt, system), "stream": False})
        return strip_think(reply_text(result))


class _CallableAdapter:
    """Wraps ``fn(prompt) -> str``; a system prompt is prepended to the prompt."""

    def __init__(self, fn: Callable[[str], Any]) -> None:
        self._fn = fn

    def complete(self, prompt: str, *, system: Optional[str] = None) -> str:
        full = f"{system}\n\n{prompt}" if system else prompt
        return strip_think(reply_text(self._fn(full)))


def as_llm_client(obj: Any, *, model: Optional[str] = None) -> LLMClient:
    """Accept the LLM objects robots already have.

    In order: anything with ``complete(prompt, system=)``; an ollama-style object
    with ``chat(messages=...)`` (``model`` is passed when given, as ``ollama.Client``
    needs it); an EmbodiedAgents-style ``inference(dict)``; a plain ``fn(prompt) -> str``.
    """
    if obj is None:
        raise InvalidInputError("no LLM client given")
    if _completes(obj):
        return obj
    if callable(getattr(obj, "chat", None)):
        return _ChatAdapter(obj, model)
    if callable(getattr(obj, "inference", None)):
        return _InferenceAdapter(obj)
    if callable(obj):
        return _CallableAdapter(obj)
    raise InvalidInputError(
        f"cannot use a {type(obj).__name__} as an LLM client: give an object with "
        "complete(prompt, system=None), an ollama-style chat(model=..., messages=...), "
        "an inference(dict) method, or a function prompt -> str"
    )


# -- prompt budgeting ----------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """About four characters per token: cheap, model-free, and on the safe side for English."""
    return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class _Item:
    text: str
    count: int

    def line(self) -> str:
        return f"- {self.text} (x{self.count})" if self.count > 1 else f"- {self.text}"


def dedupe_with_counts(texts: list[str]) -> list[tuple[str, int]]:
    """Distinct texts in first-seen order with how often each came (case and spacing ignored)."""
    counts: dict[str, tuple[str, int]] = {}
    for text in texts:
        clean = " ".join(str(text).split())
        if not clean:
            continue
        key = clean.casefold()
        first, count = counts.get(key, (clean, 0))
        counts[key] = (first, count + 1)
    return list(counts.values())


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: max(1, limit - 1)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


_PREAMBLE = re.compile(
    r"^\s*(?:(?:sure|okay|ok|certainly)[!,.]?\s*)?"
    r"(?:here(?:'s| is) (?:a |the |my )?(?:short |brief |concise |one-sentence )?summary[^:\n]*:|summary:)\s*",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def clean_summary(reply: str, max_chars: int) -> Optional[str]:
    """One tidy line, clipped at a sentence end when possible; None if it holds no words."""
    text = strip_think(reply)
    text = text.replace("```", " ")
    text = _PREAMBLE.sub("", text)
    text = " ".join(text.split()).strip().strip("\"'“”").strip()
    if not re.search(r"[^\W\d_]{2,}", text):  # no word at all: empty or garbage
        return None
    if len(text) > max_chars:
        ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, max_chars)]
        text = text[: ends[-1]] if ends and ends[-1] >= max_chars // 3 else _clip(text, max_chars)
    return text


def parse_name_list(reply: str) -> Optional[list[str]]:
    """The first JSON array in a reply (prose and code fences allowed) as clean, distinct names.

    Strings are taken as names; objects contribute their ``name`` (emem's format).
    None when no array can be read.
    """
    text = strip_think(reply)
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\[", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if not isinstance(value, list):
            continue
        names: list[str] = []
        for element in value:
            name = element.get("name") if isinstance(element, dict) else element
            if not isinstance(name, str):
                continue
            name = " ".join(name.split()).strip(" .,;:").lower()[:60]
            if name and name not in names:
                names.append(name)
        return names
    return None


# -- the summarizer ------------------------------------------------------------------------------

SUMMARY_SYSTEM = (
    "You write entries for a robot's long-term memory. Summarise the observations you are given "
    "in one or two short plain sentences. No preamble, no lists, no markdown. Keep object names, "
    "places and how often things were seen; state only what the observations support."
)
ENTITY_SYSTEM = (
    "You extract physical objects from a robot's scene descriptions. Reply with only a JSON array "
    "of strings, nothing else."
)
ENTITY_INSTRUCTION = (
    "List the concrete physical objects named in these descriptions as a JSON array of short "
    'lowercase names, e.g. ["red mug", "table"]. Leave out people, rooms, places, colours on '
    "their own and abstract things. If there are none, reply []."
)


def _part(number: int, total: int) -> str:
    return f"This is part {number} of {total}; the other parts are summarised separately."


class Summarizer:
    """Summaries and entity lists from an LLM, within a prompt budget; None instead of raising."""

    def __init__(
        self,
        llm: Any,
        *,
        max_prompt_tokens: int = 2000,
        max_reply_chars: int = 300,
        max_depth: int = 3,
        max_chunks: int = 8,
        max_seconds: Optional[float] = None,
        model: Optional[str] = None,
    ) -> None:
        """``llm``: anything ``as_llm_client`` accepts. ``max_chunks`` bounds the map step (the
        rarest distinct texts are left out beyond it); ``max_seconds`` bounds one ``summarize`` or
        ``extract_entities`` in wall-clock time, all its LLM calls together (None: no bound)."""
        self.llm = as_llm_client(llm, model=model)
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.max_reply_chars = int(max_reply_chars)
        self.max_depth = int(max_depth)
        self.max_chunks = int(max_chunks)
        if max_seconds is not None and (isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float))
                                        or not max_seconds > 0):
            raise InvalidInputError(f"max_seconds must be a positive number of seconds or None, got {max_seconds!r}")
        self.max_seconds = float(max_seconds) if max_seconds is not None else None
        self._helpers: set[threading.Thread] = set()
        self._helpers_lock = threading.Lock()
        floor = estimate_tokens(SUMMARY_SYSTEM) + 100
        if self.max_prompt_tokens < floor:
            raise InvalidInputError(f"max_prompt_tokens must be at least {floor}, got {max_prompt_tokens}")
        if self.max_reply_chars < 40 or self.max_depth < 1 or self.max_chunks < 1:
            raise InvalidInputError("max_reply_chars must be >= 40, max_depth and max_chunks >= 1")

    # public ---------------------------------------------------------------------------------

    def summarize(self, texts: list[str], context: str = "") -> Optional[str]:
        """A one-or-two-sentence summary of ``texts``, or None if the LLM could not give one."""
        try:
            items = [_Item(t, c) for t, c in dedupe_with_counts(list(texts))]
            if not items:
                return None
            return self._summarize(items, str(context or ""), depth=0, deadline=self._deadline())
        except Exception as exc:  # never raise: the caller has a plain summary to fall back on
            log.warning("LLM summary failed, falling back to the plain summary: %s", exc)
            return None

    def extract_entities(self, texts: list[str]) -> Optional[list[str]]:
        """Physical object names mentioned in free text (scene descriptions), or None on failure."""
        try:
            lines = [_Item(t, 1).line() for t, _ in dedupe_with_counts(list(texts))]
            if not lines:
                return []
            head = ENTITY_INSTRUCTION + "\n\nDescriptions:\n"
            budget = self._budget(ENTITY_SYSTEM, head)
            lines = [_clip(line, budget * 4 // 2) for line in lines]
            chunks = self._pack(lines, budget)
            if len(chunks) > self.max_chunks:
                log.info("LLM entities: %d of %d parts of text left out to stay within %d calls",
                         len(chunks) - self.max_chunks, len(chunks), self.max_chunks)
                chunks = chunks[: self.max_chunks]
            names: list[str] = []
            deadline = self._deadline()
            for chunk in chunks:
                reply = self._complete(head + "\n".join(chunk), ENTITY_SYSTEM, deadline)
                found = parse_name_list(reply)
                if found is None:
                    raise EmemError(f"no JSON list of names in the LLM reply: {_clip(reply, 80)!r}")
                names.extend(n for n in found if n not in names)
            return names
        except Exception as exc:
            log.warning("LLM entity extraction failed: %s", exc)
            return None

    @property
    def calls_running(self) -> int:
        """Helper threads of abandoned calls that have not ended yet (0 once every call is over)."""
        with self._helpers_lock:
            return sum(1 for t in self._helpers if t.is_alive())

    # internals ------------------------------------------------------------------------------

    def _deadline(self) -> Optional[float]:
        return time.monotonic() + self.max_seconds if self.max_seconds is not None else None

    def _complete(self, prompt: str, system: str, deadline: Optional[float]) -> str:
        """``llm.complete``, given up on at ``deadline`` (then aborted if the client can be)."""
        if deadline is None:
            return self.llm.complete(prompt, system=system)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EmemError(f"the LLM took longer than {self.max_seconds:g} s")
        replies: list[str] = []
        errors: list[BaseException] = []
        done = threading.Event()
        abandoned = threading.Event()

        def call() -> None:
            try:
                # A helper scheduled only after the deadline must not start its request: ``abort`` has
                # already run, and a trickled reply on the client's fresh connection would never end.
                _given_up.event = abandoned  # the client checks it again as it takes its connection
                if abandoned.is_set():
                    raise EmemError("LLM call abandoned before it started")
                replies.append(self.llm.complete(prompt, system=system))
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()
                with self._helpers_lock:
                    self._helpers.discard(threading.current_thread())

        # Named after the thread that waits for it, so its origin shows (the consolidation worker's).
        helper = threading.Thread(target=call, name=f"{threading.current_thread().name}/llm-call", daemon=True)
        with self._helpers_lock:
            self._helpers.add(helper)
        helper.start()
        if not done.wait(remaining):
            abandoned.set()
            abort = getattr(self.llm, "abort", None)
            if callable(abort):
                try:
                    abort()
                except Exception as exc:  # the call is abandoned either way
                    log.debug("aborting an LLM call failed: %s", exc)
            raise EmemError(f"the LLM gave no complete reply within {self.max_seconds:g} s; call abandoned")
        if errors:
            raise errors[0]
        return replies[0]

    def _budget(self, system: str, head: str) -> int:
        """Tokens left for the item lines once the system prompt and header are in."""
        return self.max_prompt_tokens - estimate_tokens(system) - estimate_tokens(head) - 2

    def _head(self, context: str, part: str = "", of_summaries: bool = False) -> str:
        context = _clip(" ".join(context.split()), self.max_prompt_tokens)  # at most ~1/4 of budget
        what = "Summaries of consecutive parts of the observations" if of_summaries else "Observations"
        lines = [f"Context: {context}"] if context else []
        if part:
            lines.append(part)
        lines.append(f"{what} (xN = seen N times):")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _pack(lines: list[str], budget: int) -> list[list[str]]:
        """Greedy chunks whose joined lines fit ``budget`` tokens; every chunk holds one line at least."""
        chunks: list[list[str]] = [[]]
        used = 0
        for line in lines:
            cost = estimate_tokens(line + "\n")
            if chunks[-1] and used + cost > budget:
                chunks.append([])
                used = 0
            chunks[-1].append(line)
            used += cost
        return chunks

    def _ask(self, prompt: str, deadline: Optional[float]) -> str:
        reply = self._complete(prompt, SUMMARY_SYSTEM, deadline)
        summary = clean_summary(reply_text(reply), self.max_reply_chars)
        if summary is None:
            raise EmemError(f"the LLM gave an empty or unreadable reply: {_clip(str(reply), 80)!r}")
        return summary

    def _summarize(self, items: list[_Item], context: str, depth: int, deadline: Optional[float]) -> str:
        of_summaries = depth > 0
        head = self._head(context, of_summaries=of_summaries)
        budget = self._budget(SUMMARY_SYSTEM, head)
        lines = [_clip(item.line(), budget * 4 // 2) for item in items]
        if sum(estimate_tokens(line + "\n") for line in lines) <= budget or depth >= self.max_depth:
            chunk = self._pack(lines, budget)[0]  # at the depth limit, what does not fit is left out
            if len(chunk) < len(lines):
                log.warning("LLM summary: depth limit reached, %d of %d parts left out",
                            len(lines) - len(chunk), len(lines))
            return self._ask(head + "\n".join(chunk), deadline)

        # map: part headers are longer than the plain one, so pack against the longest
        part_head = self._head(context, part=_part(self.max_chunks, self.max_chunks),
                               of_summaries=of_summaries)
        part_budget = self._budget(SUMMARY_SYSTEM, part_head)
        lines = self._fit_chunks(items, part_budget)
        chunks = self._pack(lines, part_budget)
        summaries = []
        for number, chunk in enumerate(chunks, 1):
            head_n = self._head(context, part=_part(number, len(chunks)), of_summaries=of_summaries)
            summaries.append(self._ask(head_n + "\n".join(chunk), deadline))
        # reduce
        return self._summarize([_Item(s, 1) for s in summaries], context, depth + 1, deadline)

    def _fit_chunks(self, items: list[_Item], budget: int) -> list[str]:
        """Item lines that fit ``max_chunks`` chunks: the rarest texts are dropped first, order is kept."""
        lines = [_clip(item.line(), budget * 4 // 2) for item in items]
        if len(self._pack(lines, budget)) <= self.max_chunks:
            return lines
        capacity = self.max_chunks * budget * 3 // 4  # packing wastes some room per chunk
        by_frequency = sorted(range(len(items)), key=lambda i: (-items[i].count, i))
        keep: set[int] = set()
        used = 0
        for i in by_frequency:
            cost = estimate_tokens(lines[i] + "\n")
            if used + cost > capacity:
                continue
            keep.add(i)
            used += cost
        kept = [lines[i] for i in range(len(lines)) if i in keep]
        dropped = len(lines) - len(kept)
        while len(self._pack(kept, budget)) > self.max_chunks:
            kept.pop()
            dropped += 1
        log.info("LLM summary: %d rare distinct observations left out to stay within %d chunks",
                 dropped, self.max_chunks)
        return kept
