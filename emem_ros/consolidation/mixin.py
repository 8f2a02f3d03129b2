"""Consolidation entry points of the Memory facade (filled in by the consolidation package)."""

from __future__ import annotations


class ConsolidationMixin:
    def _init_consolidation(self) -> None:
        """Called once by Memory.__init__ after the store is open."""

    def _close_consolidation(self) -> None:
        """Called by Memory.close before the final flush: finish or abandon pending work."""
