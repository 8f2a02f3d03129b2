"""With EmbodiedAgents (EMOS): emem_ros as the ``Memory`` component of a recipe (docs/emos.md).

``from emem_ros.emos import Memory`` replaces ``from agents.components import
Memory``; ``MemoryProxy(component_name=..., node="/memory")`` is the same
component forwarding to a running emem_ros memory node. Importing them needs
EmbodiedAgents and ROS 2 (the component module is loaded on first use); the
emem_ros core never imports this package, and ``emem_ros.emos.actions`` and
``emem_ros.emos.params`` need neither.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Memory", "MemoryProxy"]


def MemoryProxy(*, component_name: str, node: str = "/memory", **kwargs: Any) -> Any:  # a class to a recipe
    """The ``Memory`` component forwarding every action to the emem_ros memory node ``node``'s ``~/call_tool``."""
    from emem_ros.emos.component import Memory

    return Memory(component_name=component_name, proxy_to=node, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "Memory":
        try:
            from emem_ros.emos.component import Memory
        except ImportError as exc:
            raise ImportError(f"emem_ros.emos.Memory needs EmbodiedAgents and ROS 2 ({exc}); see docs/emos.md") from exc
        return Memory
    raise AttributeError(f"module 'emem_ros.emos' has no attribute {name!r}")
