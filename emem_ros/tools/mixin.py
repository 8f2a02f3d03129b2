"""Tool methods of the Memory facade (filled in by the tools package)."""

from __future__ import annotations


class ToolsMixin:
    def _init_tools(self) -> None:
        """Called once by Memory.__init__ after the store is open."""
