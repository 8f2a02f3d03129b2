"""The agent-facing core: experience ledger, query cache, stats, export/import, MCP."""
