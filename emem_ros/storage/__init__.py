"""SQLite, the source of truth: nodes, edges, tiers, texts and their vectors."""
