"""The ten retrieval tools, the write actions, and the LLM tool-calling surface."""

from emem_ros.tools.ollama_chat import ChatOutcome, run_ollama_chat
from emem_ros.tools.registry import ToolRegistry, ToolSpec

__all__ = ["ChatOutcome", "ToolRegistry", "ToolSpec", "run_ollama_chat"]
