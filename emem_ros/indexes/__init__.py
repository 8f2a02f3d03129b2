"""Derived indexes (meaning, place): rebuildable from SQLite at any time."""
