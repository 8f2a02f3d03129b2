"""emem_ros: a spatio-temporal memory for robots.

The ROS-free core is importable without rclpy; ``Memory`` and ``MemoryConfig``
are loaded lazily so that importing the generated ``emem_ros.msg`` / ``.srv``
of an installed copy stays cheap.
"""

from pkgutil import extend_path
from typing import Any

__path__ = extend_path(__path__, __name__)

__all__ = ["Memory", "MemoryConfig"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:  # PEP 562: lazy exports keep `import emem_ros.msg` light.
    if name == "Memory":
        from emem_ros.memory import Memory

        return Memory
    if name == "MemoryConfig":
        from emem_ros.core.config import MemoryConfig

        return MemoryConfig
    raise AttributeError(f"module 'emem_ros' has no attribute {name!r}")
