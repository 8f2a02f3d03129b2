"""Consolidation: gists, episode summaries, entities and archival, off the hot path."""
