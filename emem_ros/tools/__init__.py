"""The ten retrieval tools, the write actions, and the LLM tool-calling surface."""
