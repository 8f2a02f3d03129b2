"""The memory in the component's own process: the emem_ros core behind the one ingest path.

``LocalMemory.open`` validates the parameters (``parse_params``, as the node
does), opens the ``Memory`` (``build_memory``, or with EmbodiedAgents'
embedding / model clients when the recipe gives them) and puts an
``IngestPipeline`` in front of it: every layer message and every odometry
message of the component goes through it (adapters, intake policy, pose at
the message's stamp). Tools run on the memory's own tool registry.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from emem_ros.core.errors import InvalidInputError
from emem_ros.emos.actions import Handler
from emem_ros.ros.factory import build_memory, make_llm_client
from emem_ros.ros.params import NodeParams, parse_params
from emem_ros.ros.pipeline import IngestOutcome, IngestPipeline


def open_memory(params: NodeParams, clock: Callable[[], float], embedding_client: Any = None,
                model_client: Any = None) -> Any:
    """The memory the parameters describe; EmbodiedAgents' clients embed and summarise when given."""
    if embedding_client is None and model_client is None:
        return build_memory(params, clock)
    from emem_ros.embeddings.callable import CallableEmbeddingProvider
    from emem_ros.embeddings.factory import make_embedder
    from emem_ros.memory import Memory

    embedder = (CallableEmbeddingProvider(embedding_client._embed, model_name=_client_model(embedding_client))
                if embedding_client is not None
                else make_embedder(params.embedding_backend, params.embedding_model, params.ollama_host or None))
    llm = model_client if model_client is not None else make_llm_client(params)
    return Memory(config=params.memory, embedding_provider=embedder, llm_client=llm, get_current_time=clock)


def _client_model(client: Any) -> Optional[str]:
    model = getattr(client, "model", None)
    name = getattr(model, "checkpoint", None) or getattr(model, "name", None)
    return f"emos:{name}" if isinstance(name, str) and name else None


class LocalMemory:
    """An open memory and its ingest pipeline; ``close`` stores what is buffered and closes the file."""

    def __init__(self, memory: Any, pipeline: IngestPipeline) -> None:
        self.memory = memory
        self.pipeline = pipeline

    @classmethod
    def open(cls, flat: dict[str, Any], clock: Callable[[], float], *, warn: Callable[[str], None],
             embedding_client: Any = None, model_client: Any = None) -> "LocalMemory":
        params = parse_params(flat)
        if params.fleet_url:  # never accepted and then silently not synced
            raise InvalidInputError("fleet.url: the fleet sync runs in the emem_ros memory node; launch the node with "
                                    "it and give the component proxy_to='/<node>'")
        memory = open_memory(params, clock, embedding_client, model_client)
        try:
            pipeline = IngestPipeline(memory, params, warn=warn)
        except Exception:
            memory.close()
            raise
        memory.set_live_pose(pipeline.live_pose)
        return cls(memory, pipeline)

    @property
    def params(self) -> NodeParams:
        return self.pipeline.params

    def on_message(self, layer: str, msg: Any, receive_time: float) -> IngestOutcome:
        return self.pipeline.on_message(layer, msg, receive_time)

    def on_odometry(self, msg: Any, receive_time: float) -> bool:
        return self.pipeline.on_odometry(msg, receive_time)

    def on_tf(self, msg: Any, static: bool, receive_time: float) -> int:
        """A TFMessage (``fixed_frame`` set): drafts waiting for it are placed."""
        return self.pipeline.on_tf(msg, static=static, receive_time=receive_time)

    def on_camera_info(self, topic: str, msg: Any) -> bool:
        return self.pipeline.on_camera_info(topic, msg)

    def expire(self, now: float) -> int:
        """Store the drafts that waited ``tf_timeout`` for their transform."""
        return self.pipeline.expire(now)

    def handler_for(self, tool: str) -> Handler:
        """Run one of the memory's tools with checked arguments (our names); notes default to the robot's pose."""
        spec = self.memory.tools.registry.get(tool)
        if spec is None:
            raise KeyError(f"this memory has no tool {tool!r}")
        run: Handler = spec.handler
        if tool != "store_specific_memory":
            return run

        def store_note(**arguments: Any) -> Any:
            if arguments.get("x") is None and arguments.get("y") is None:
                pose = self.pipeline.live_pose()  # as EmbodiedAgents' Memory does: the robot's position now
                if pose is not None:
                    arguments = {**arguments, "x": pose[0], "y": pose[1], "z": pose[2]}
            return run(**arguments)

        return store_note

    def store_latest(self, latest: dict[str, Any], receive_time: float) -> int:
        """The latest message of each layer through the ingest path now, then stored (EmbodiedAgents' ``store``
        with auto_store off); how many observations that made."""
        stored = sum(len(self.on_message(layer, msg, receive_time).ids) for layer, msg in latest.items()
                     if msg is not None)
        self.flush()
        return stored

    def resolve_time(self, value: Any) -> Optional[float]:
        resolved: Optional[float] = self.memory.resolve_time(value)
        return resolved

    def flush(self) -> int:
        flushed: int = self.memory.flush()
        return flushed

    def close(self) -> None:
        """Store what waits for a transform (none will come), then close the memory (final flush)."""
        try:
            self.pipeline.finish()
        finally:
            self.memory.close()
