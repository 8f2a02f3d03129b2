"""Build a ``Memory`` from validated node parameters: the node and replay share this."""

from __future__ import annotations

from typing import Any, Callable, Optional

from emem_ros.embeddings.factory import make_embedder
from emem_ros.ros.params import NodeParams


def make_llm_client(params: NodeParams) -> Any:
    """The summarising LLM of ``llm.backend``, or None (extractive summaries)."""
    if params.llm_backend == "ollama":
        from emem_ros.consolidation.llm import OllamaLLMClient

        return OllamaLLMClient(params.llm_model, host=params.ollama_host or None)
    return None


def build_memory(params: NodeParams, get_current_time: Optional[Callable[[], float]] = None,
                 db_path: Optional[str] = None) -> Any:
    """Open the memory the parameters describe (``db_path`` overrides the file)."""
    from emem_ros.memory import Memory

    embedder = make_embedder(params.embedding_backend, params.embedding_model, params.ollama_host or None)
    memory = Memory(db_path=db_path, config=params.memory, embedding_provider=embedder,
                    llm_client=make_llm_client(params), get_current_time=get_current_time)
    from emem_ros.agent.tools import AgentEnv

    if isinstance(memory.tools.env, AgentEnv):
        memory.tools.env.forget_caller = "ros:service"  # the audit trail: a forget came through ~/forget
    return memory
