"""What front ends (MCP, chat loops) need of a memory: its tool surface, and a flush after writes."""

from __future__ import annotations

from typing import Any, Protocol


class ToolHost(Protocol):
    def get_tool_definitions(self, include_actions: bool = True) -> list[dict[str, Any]]: ...

    def dispatch_tool_call(self, tool_name: str, arguments: Any = None) -> str: ...

    def flush(self) -> int: ...
