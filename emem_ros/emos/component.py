"""``Memory``: EmbodiedAgents' Memory component, served by emem_ros (a recipe changes only its import).

The constructor is EmbodiedAgents Memory's (layers, position, model and
embedding clients, config, trigger, component_name) plus two of ours:
``proxy_to`` (forward every action to a running emem_ros memory node) and
``emem_params`` (any emem_ros node parameter, dotted). The fourteen actions
have EmbodiedAgents' names, argument names and phases, and our descriptions
(``emem_ros.emos.actions``). Cortex finds them by their ``@component_action``
decorators and calls them over ``<name>/execute_method``; a bad call (unknown
action, bad JSON, wrong type, missing argument, NaN) is answered
``success=false`` with a sentence saying what was wrong, and the component
keeps serving.

Glue only: layer, odometry, TF (``fixed_frame``) and camera-info messages go
to the ``IngestPipeline`` (the node's ingest path), actions to the memory's
tools or to the node's ``~/call_tool``.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable, Optional, Union

from agents.components.component_base import Component
from agents.config import MemoryConfig
from agents.ros import (
    ActionPhase,
    Detections,
    DetectionsMultiSource,
    Event,
    MemLayer,
    Odometry,
    StreamingString,
    String,
    Topic,
    component_action,
)

import emem_ros.emos.actions as acts
from emem_ros.emos.actions import ActionError, description
from emem_ros.emos.datatypes import register as register_datatypes
from emem_ros.emos.local import LocalMemory
from emem_ros.emos.params import flat_params, layer_name
from emem_ros.emos.proxy import NodeMemory
from emem_ros.ros.params import parse_params
from emem_ros.ros.runtime import intake_report

log = logging.getLogger(__name__)

_OURS = register_datatypes()


def _describe(name: str) -> dict[str, Any]:
    return description(acts.ACTIONS_BY_NAME[name])


class Memory(Component):
    """Spatio-temporal memory for an EmbodiedAgents recipe, powered by emem_ros (see module docstring)."""

    def __init__(
        self,
        *,
        layers: Optional[list[MemLayer]] = None,
        position: Optional[Topic] = None,
        model_client: Any = None,
        embedding_client: Any = None,
        config: Optional[MemoryConfig] = None,
        trigger: Union[Topic, list[Topic], float, Event] = 10.0,
        component_name: str,
        proxy_to: Optional[str] = None,
        emem_params: Optional[dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        if proxy_to is None and (not layers or position is None):
            raise TypeError("Memory needs layers and a position topic (or proxy_to='/memory', the node to forward to)")
        self.config: MemoryConfig = config or MemoryConfig()
        self.allowed_inputs = {"Required": [Odometry],
                               "Optional": [String, StreamingString, Detections, DetectionsMultiSource, *_OURS]}
        self.model_client = model_client
        self.embedding_client = embedding_client
        self.position = position
        self.config._position = position
        self.proxy_to = proxy_to
        self._emem_params = dict(emem_params or {})
        self._backend: Union[LocalMemory, NodeMemory, None] = None
        self._backend_lock = threading.Lock()
        self._emem_subscriptions: list[Any] = []
        """Subscriptions of our own (TF, camera info) next to EmbodiedAgents' layer callbacks."""
        self._emem_timers: list[Any] = []
        self._registry: Any = None
        super().__init__(None, None, self.config, trigger, component_name, **kwargs)
        self.layers_dict: dict[str, MemLayer] = {}
        self._layer_of: dict[str, str] = {}
        self._flat: dict[str, Any] = {}
        if proxy_to is None:
            self._layers(list(layers or []))

    # ------------------------------------------------------------------ inputs
    def _layers(self, layers: list[MemLayer]) -> None:
        """Layers and callbacks as EmbodiedAgents sets them up; each message also goes to the ingest pipeline."""
        self.layers_dict = {layer.subscribes_to.name: layer for layer in layers}
        perception = [layer.subscribes_to for layer in layers if not layer.is_internal_state]
        try:
            self._validate_topics([*perception, self.config._position], self.allowed_inputs, "Inputs")
        except Exception as exc:
            allowed = [t.__name__ for t in self.allowed_inputs["Optional"]]
            raise TypeError(f"Memory layers that are not is_internal_state=True must be one of {allowed}") from exc
        topics = [layer.subscribes_to for layer in layers] + [self.config._position]
        self.callbacks = {t.name: t.msg_type.callback(t) for t in self._reparse_inputs_callbacks(topics)}
        self._layer_of = {t.name: layer_name(t.name) for t in topics[:-1]}
        defaults = type(self.config)()
        self._flat = flat_params(layers, self.config._position, self.config, self.trig_source, self._emem_params,
                                 config_defaults=defaults)
        parse_params(self._flat)  # a bad emem_params value or layer fails the recipe here, naming the parameter
        for name, callback in self.callbacks.items():
            handler = self._on_odometry if name == self.position.name else self._on_layer_message  # type: ignore[union-attr]
            callback.on_callback_execute(handler, get_processed=False)

    def _now(self) -> float:
        return float(self.get_clock().now().nanoseconds) * 1e-9

    def _on_layer_message(self, msg: Any, topic: Any, **_: Any) -> None:
        backend, layer = self._backend, self._layer_of.get(getattr(topic, "name", ""))
        if isinstance(backend, LocalMemory) and layer is not None:
            backend.on_message(layer, msg, self._now())  # never raises; counts and logs

    def _on_odometry(self, msg: Any, **_: Any) -> None:
        backend = self._backend
        if isinstance(backend, LocalMemory):
            backend.on_odometry(msg, self._now())

    # ------------------------------------------------------------------ lifecycle
    def custom_on_configure(self) -> None:
        super().custom_on_configure()
        self._open()
        # A launcher's Ctrl-C shuts the context down under the executors: close the memory then (stores the
        # buffer, ends its threads), or the process would wait for them forever.
        self.context.on_shutdown(self._close)

    def custom_on_activate(self) -> None:
        super().custom_on_activate()
        if self._backend is None:  # activated again after a deactivate
            self._open()

    def custom_on_deactivate(self) -> None:
        super().custom_on_deactivate()
        self._close()

    def custom_on_shutdown(self) -> None:
        super().custom_on_shutdown()
        self._close()

    def destroy_node(self) -> None:
        self._close()
        super().destroy_node()

    def _open(self) -> None:
        for client in (self.embedding_client, self.model_client):
            if client is not None:
                client.check_connection()
                client.initialize()
        backend: Union[LocalMemory, NodeMemory]
        if self.proxy_to is not None:
            backend = NodeMemory(self, self.proxy_to)
        else:
            backend = LocalMemory.open(self._flat, self._now, warn=self.get_logger().warning,
                                       embedding_client=self.embedding_client, model_client=self.model_client)
        self._registry = acts.action_registry(backend.handler_for, self._store_now)
        self._backend = backend
        if isinstance(backend, LocalMemory):
            self._subscribe_transforms_and_cameras(backend)

    def _subscribe_transforms_and_cameras(self, backend: LocalMemory) -> None:
        """What the node also subscribes: /tf and /tf_static (``fixed_frame``), the layers' CameraInfo topics."""
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

        from emem_ros.ros.camera import CAMERA_INFO_TYPE
        from emem_ros.ros.msgtypes import resolve_type
        from emem_ros.ros.runtime import TF_TICK, TF_TYPE

        params = backend.params
        if params.fixed_frame:  # tf2_ros's listener QoS: /tf volatile, /tf_static transient local (latched)
            tf_type = resolve_type(TF_TYPE)
            for topic, static in ((params.tf_topic, False), (params.tf_static_topic, True)):
                qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL if static else DurabilityPolicy.VOLATILE)
                self._emem_subscriptions.append(self.create_subscription(
                    tf_type, topic, lambda msg, static=static: backend.on_tf(msg, static, self._now()), qos))
            if params.tf_timeout > 0:
                self._emem_timers.append(self.create_timer(TF_TICK, lambda: backend.expire(self._now())))
        for topic in sorted({spec.camera.info_topic for spec in params.layers if spec.camera.info_topic}):
            self._emem_subscriptions.append(self.create_subscription(
                resolve_type(CAMERA_INFO_TYPE), topic, lambda msg, topic=topic: backend.on_camera_info(topic, msg), 10))

    def _close(self) -> None:
        with self._backend_lock:
            backend, self._backend = self._backend, None
            extras, timers = self._emem_subscriptions, self._emem_timers
            self._emem_subscriptions, self._emem_timers = [], []
        for entity in (*timers, *extras):
            try:
                (self.destroy_timer if entity in timers else self.destroy_subscription)(entity)
            except Exception:  # the context may be shut down already: the process is ending
                pass
        if isinstance(backend, LocalMemory):
            self.get_logger().info(intake_report(backend.pipeline.counts()))  # as the memory node reports it
        if backend is not None:
            backend.close()

    def _execution_step(self, **kwargs: Any) -> None:
        """Messages are stored as they arrive (``_on_layer_message``); the trigger only sets the sampling."""

    # ------------------------------------------------------------------ calling actions
    def _act(self, name: str, arguments: Any) -> str:
        """Run one action; its answer, or ``ActionError`` saying what was wrong."""
        if self._registry is None or self._backend is None:
            raise ActionError(f"the memory of {self.node_name} is not open (configure and activate the component)")
        return acts.run_action(self._registry, name, arguments)

    def _execute_method_srv_callback(self, request: Any, response: Any) -> Any:
        """``<name>/execute_method``: our actions answer in plain words; other names are refused, not run."""
        name = request.name
        if name not in acts.ACTIONS_BY_NAME:
            if name in _BASE_ACTIONS:  # sugarcoat's own actions (start, stop, ...): as sugarcoat serves them
                return super()._execute_method_srv_callback(request, response)
            response.success = False
            response.error_msg = acts.unknown_action(name)
            return response
        try:
            arguments = json.loads(request.kwargs_json) if request.kwargs_json.strip() else {}
        except ValueError as exc:
            response.success, response.error_msg = False, f"the arguments of {name} are not valid JSON ({exc})"
            return response
        try:
            answer = self._act(name, arguments)
        except ActionError as exc:
            response.success, response.error_msg = False, str(exc)
        except Exception as exc:  # the planner gets an answer, whatever broke; the component keeps serving
            log.exception("action %s failed", name)
            response.success, response.error_msg = False, f"{name} failed unexpectedly ({type(exc).__name__}: {exc})"
        else:
            response.success, response.response_json = True, json.dumps(answer)
        return response

    def _store_now(self) -> str:
        backend = self._backend
        if isinstance(backend, NodeMemory):
            return (f"The memory node {backend.node_name} stores every message of its layers as it arrives; "
                    "there is nothing to snapshot.")
        assert isinstance(backend, LocalMemory)
        if self.config.auto_store:
            flushed = backend.flush()
            return (f"Every layer message is stored as it arrives; {flushed} buffered observation(s) were written "
                    "now and everything received is searchable.")
        latest = {layer: getattr(self.callbacks.get(topic), "msg", None) for topic, layer in self._layer_of.items()}
        stored = backend.store_latest(latest, self._now())
        return f"Stored {stored} observation(s) from the latest message of each of {len(latest)} layer(s)."

    # ------------------------------------------------------------------ inspection (Cortex reads it)
    def inspect_component(self) -> str:
        result: str = super().inspect_component()
        if self.proxy_to is not None:
            return result + f"\nMemory: the emem_ros memory node {self.proxy_to} (its own layers and odometry)."

        def line(topic: str, layer: MemLayer) -> str:
            msg = layer.subscribes_to.msg_type
            return f"  - {self._layer_of[topic]}  (from topic '{topic}', type {getattr(msg, '__name__', msg)})"

        perception = [line(t, lay) for t, lay in self.layers_dict.items() if not lay.is_internal_state]
        internal = [line(t, lay) for t, lay in self.layers_dict.items() if lay.is_internal_state]
        lines = [""]
        lines += (["Perception layers (layer_name → source topic):",
                   "  Use these names as the 'layer' filter in perception retrieval tools (semantic_search, "
                   "spatial_query, locate, ...) to narrow results to one stream."] + perception
                  if perception else ["Perception layers: none configured"])
        if internal:
            lines += ["", "Internal-state layers (layer_name → source topic):",
                      "  These carry the robot's own state (battery, temperature, ...). Query them via "
                      "body_status(layers=[...]): they are NOT returned by semantic_search."] + internal
        return result + "\n".join(lines) + f"\nPosition topic: {self.position.name if self.position else '-'}"

    # ------------------------------------------------------------------ a plain LLM component
    def register_tools_on(self, llm: Any, tools: Optional[list[str]] = None,
                          send_tool_response_to_model: bool = True) -> None:
        """Register the ten retrieval tools (or ``tools``) on an EmbodiedAgents LLM component; errors come back as text."""
        unknown = sorted(set(tools or ()) - set(acts.RETRIEVAL))
        if unknown:
            raise ValueError(f"no retrieval tool named {', '.join(unknown)}; tools: {', '.join(acts.RETRIEVAL)}")
        for name in acts.RETRIEVAL:
            if tools is None or name in tools:
                llm.register_tool(self._tool_function(name), _describe(name), send_tool_response_to_model)

    def _tool_function(self, name: str) -> Callable[..., str]:
        def call(**kwargs: Any) -> str:
            try:
                return self._act(name, kwargs)
            except ActionError as exc:
                return f"Error: {exc}"

        call.__name__ = name
        call.__self__ = self  # type: ignore[attr-defined]  # EmbodiedAgents reads it: a component's method
        return call

    # ------------------------------------------------------------------ the actions (EmbodiedAgents' names)
    @component_action(description=_describe("store"))
    def store(self, **kwargs: Any) -> str:
        return self._act("store", kwargs)

    @component_action(description=_describe("store_specific_memory"))
    def store_specific_memory(self, **kwargs: Any) -> str:
        return self._act("store_specific_memory", kwargs)

    @component_action(description=_describe("start_episode"))
    def start_episode(self, **kwargs: Any) -> str:
        return self._act("start_episode", kwargs)

    @component_action(description=_describe("end_episode"))
    def end_episode(self, **kwargs: Any) -> str:
        return self._act("end_episode", kwargs)

    @component_action(description=_describe("semantic_search"), phase=ActionPhase.PLANNING)
    def semantic_search(self, **kwargs: Any) -> str:
        return self._act("semantic_search", kwargs)

    @component_action(description=_describe("spatial_query"), phase=ActionPhase.PLANNING)
    def spatial_query(self, **kwargs: Any) -> str:
        return self._act("spatial_query", kwargs)

    @component_action(description=_describe("temporal_query"), phase=ActionPhase.PLANNING)
    def temporal_query(self, **kwargs: Any) -> str:
        return self._act("temporal_query", kwargs)

    @component_action(description=_describe("episode_summary"), phase=ActionPhase.PLANNING)
    def episode_summary(self, **kwargs: Any) -> str:
        return self._act("episode_summary", kwargs)

    @component_action(description=_describe("get_current_context"), phase=ActionPhase.PLANNING)
    def get_current_context(self, **kwargs: Any) -> str:
        return self._act("get_current_context", kwargs)

    @component_action(description=_describe("search_gists"), phase=ActionPhase.PLANNING)
    def search_gists(self, **kwargs: Any) -> str:
        return self._act("search_gists", kwargs)

    @component_action(description=_describe("entity_query"), phase=ActionPhase.PLANNING)
    def entity_query(self, **kwargs: Any) -> str:
        return self._act("entity_query", kwargs)

    @component_action(description=_describe("locate"), phase=ActionPhase.PLANNING)
    def locate(self, **kwargs: Any) -> str:
        return self._act("locate", kwargs)

    @component_action(description=_describe("recall"), phase=ActionPhase.PLANNING)
    def recall(self, **kwargs: Any) -> str:
        return self._act("recall", kwargs)

    @component_action(description=_describe("body_status"), phase=ActionPhase.BOTH)
    def body_status(self, **kwargs: Any) -> str:
        return self._act("body_status", kwargs)


_BASE_ACTIONS = frozenset(name for name in dir(Component) if hasattr(getattr(Component, name, None),
                                                                          "_action_description"))
"""Actions the EmbodiedAgents base classes declare themselves."""
