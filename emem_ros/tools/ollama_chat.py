"""A tool-calling chat loop for an ``ollama`` client with the memory's tools registered.

The model asks for tools; each call runs through ``dispatch_tool_call`` (so a
bad call becomes an error message the model can correct, never an
exception); results go back as ``role: tool`` messages; the loop ends when
the model answers without tool calls. After ``max_rounds`` of tool calls the
model is asked once more without tools, so it has to answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from emem_ros.tools.host import ToolHost


@dataclass(frozen=True)
class ToolCallRecord:
    name: str
    arguments: Any
    result: str


@dataclass
class ChatOutcome:
    content: str
    """The model's final answer."""
    messages: list[Any]
    """The whole conversation, ready to continue."""
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    rounds: int = 0
    hit_round_limit: bool = False

    def __str__(self) -> str:
        return self.content


def run_ollama_chat(memory: ToolHost, client: Any, model: str, messages: Sequence[Any], max_rounds: int = 5,
                    tools: Optional[list[dict[str, Any]]] = None, **chat_options: Any) -> ChatOutcome:
    """Chat with ``client.chat(model=, messages=, tools=)`` until the model stops calling tools."""
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be at least 1, got {max_rounds!r}")
    conversation = list(messages)
    definitions = memory.get_tool_definitions() if tools is None else tools
    records: list[ToolCallRecord] = []
    for round_number in range(1, max_rounds + 1):
        response = client.chat(model=model, messages=conversation, tools=definitions, **chat_options)
        message = _field(response, "message")
        conversation.append(_as_dict(message))
        calls = _field(message, "tool_calls") or []
        if not calls:
            return ChatOutcome(_field(message, "content") or "", conversation, records, round_number)
        for call in calls:
            function = _field(call, "function")
            name = _field(function, "name")
            arguments = _field(function, "arguments")
            result = memory.dispatch_tool_call(name, arguments)
            records.append(ToolCallRecord(name, arguments, result))
            conversation.append({"role": "tool", "content": result, "tool_name": name})
    response = client.chat(model=model, messages=conversation, **chat_options)
    message = _field(response, "message")
    conversation.append(_as_dict(message))
    return ChatOutcome(_field(message, "content") or "", conversation, records, max_rounds + 1, True)


def _field(obj: Any, name: str) -> Any:
    """Works on ollama's pydantic responses and on plain dicts alike."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _as_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, dict):
        return dict(message)
    dump = getattr(message, "model_dump", None)
    if callable(dump):
        return {k: v for k, v in dump(exclude_none=True).items()}
    return {"role": "assistant", "content": str(_field(message, "content") or "")}
