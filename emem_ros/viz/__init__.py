"""Pictures of a memory file (matplotlib, headless)."""
