"""What differs between the ROS 2 distributions emem_ros runs on, Humble and Jazzy: the one place for it.

Checked on the builds CI runs (``.ci/ros_half.sh``): Humble with rclpy 3.3.15 and rosbag2 0.15,
Jazzy with rclpy 7.1.3 and rosbag2 0.26.5; vision_msgs 4.1.1 on both.

The same on both, so nothing is handled anywhere (no version checks, no fallbacks):

- ``rclpy.lifecycle`` is the same file on both, including the change_state service that raises
  inside its callback on a transition that is invalid from the current state (``node.py`` answers
  such requests with success=False on both).
- ``rclpy.executors.MultiThreadedExecutor`` and ``ExternalShutdownException``,
  ``rclpy.exceptions.ParameterUninitializedException``, ``rclpy.signals.SignalHandlerOptions``,
  typed parameter declarations (``declare_parameter(name, Parameter.Type.STRING_ARRAY)``) and
  ``logger.warning``. (Jazzy's executors also skip entities destroyed while a wait was pending;
  Humble's would raise ``InvalidHandle`` there: the node destroys its entities only in lifecycle
  transitions, which run on the executor, so it never meets that case.)
- QoS defaults (KEEP_LAST, depth 10, RELIABLE, VOLATILE) and ``qos_profile_sensor_data``. Jazzy
  adds BEST_AVAILABLE policies and warns on KEEP_LAST with depth 0 (our depths are >= 1); the
  node does not use BEST_AVAILABLE: it is fixed when a subscription is created, so a best-effort
  sensor publisher that appears later would not be heard, where best effort hears both kinds.
- ``rosbag2_py`` does not matter: emem_ros reads and writes bags with rosbags (pure Python, no ROS),
  so only what the two rosbag2 versions write (below) does.
- vision_msgs 4.1.1 (the same definitions and type hashes), the launch / launch_ros APIs that
  ``launch/memory.launch.py`` uses, and the ``ros2 bag play`` options the tests and the benchmark
  use (``--clock``, ``-r``, ``-d``, ``--disable-keyboard-controls``, ``--start-offset``).

Different, and handled here:

- Parameters ROS itself declares on every node: ``use_sim_time`` on both; from Iron on also
  ``start_type_description_service`` (Jazzy). Parameter validation and the node's "unknown
  parameter" warning leave them (and ``qos_overrides.*``) alone: ``ROS_PARAMETERS``.
- Bags. Humble's rosbag2 writes metadata version 5 (no ``ros_distro``, no type hashes) and
  records to sqlite3 by default; Jazzy's writes version 9 (``ros_distro: jazzy``, a RIHS01
  ``type_description_hash`` per topic, ``offered_qos_profiles`` as a YAML list instead of a
  string) and records to mcap by default. rosbags reads both; ``emem replay`` decodes with the
  typestore of the bag's recorded distribution (``typestore_distro``), and a Jazzy bag whose
  recorded type hash differs from the typestore's is decoded with the definition the bag
  carries (``emem_ros.replay.decoder``). Humble's ``ros2 bag`` cannot open a version-9 bag
  ("yaml-cpp: bad conversion", also for the bare .mcap, whose channels carry the new QoS text):
  ``rosbags-convert --src JAZZY_BAG --dst OUT --dst-version 8`` writes one Humble plays
  (docs/install.md). ``BAGS`` holds these facts per distribution.
- Executors: rclpy's ``EventsExecutor`` (``rclpy.experimental``) is not in Jazzy's rclpy 7.1.3
  (nor in Humble's); ``executor_kinds()`` says which executors the running rclpy has and
  ``make_executor`` builds the node's. The multi-threaded one is the default on both: the
  node's callback groups (intake, queries, maintenance) only run side by side on threads.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["BAGS", "BagFacts", "DEFAULT_EXECUTOR", "DISTROS", "ROS_PARAMETERS", "ROS_PARAMETER_PREFIXES",
           "SUPPORTED", "current", "executor_kinds", "is_ros_parameter", "make_executor", "typestore_distro"]

SUPPORTED = ("humble", "jazzy")
"""The distributions CI runs the node on (test/ros/ on each)."""

ROS_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})
"""Parameters rclpy declares on every node (the second one from Iron on); not ours to validate."""
ROS_PARAMETER_PREFIXES = ("qos_overrides.",)


@dataclass(frozen=True)
class BagFacts:
    """What one distribution's rosbag2 writes and reads."""

    rosbags_store: str
    """Name of the rosbags typestore (``rosbags.typesys.Stores``) with this distribution's messages."""
    metadata_version: int
    """The metadata.yaml version its ``ros2 bag record`` writes."""
    default_storage: str
    """Storage plugin ``ros2 bag record`` uses without ``--storage``."""
    type_hashes: bool
    """Whether its bags record a RIHS01 type hash per topic."""
    reads_up_to: int
    """The newest metadata version its ``ros2 bag play`` opens (rosbags-written version 8 included)."""


BAGS: dict[str, BagFacts] = {
    "humble": BagFacts("ROS2_HUMBLE", metadata_version=5, default_storage="sqlite3", type_hashes=False,
                       reads_up_to=8),
    "jazzy": BagFacts("ROS2_JAZZY", metadata_version=9, default_storage="mcap", type_hashes=True,
                      reads_up_to=9),
}
DISTROS: tuple[str, ...] = tuple(BAGS)
"""Distributions whose messages ``emem replay`` can decode with (``--distro``)."""

DEFAULT_EXECUTOR = "multi_threaded"
_EXECUTORS = {"multi_threaded": ("rclpy.executors", "MultiThreadedExecutor"),
              "single_threaded": ("rclpy.executors", "SingleThreadedExecutor"),
              "events": ("rclpy.experimental", "EventsExecutor")}


def current() -> Optional[str]:
    """The sourced ROS 2 distribution (``ROS_DISTRO``, set by its setup.bash), lower case; None if none."""
    name = os.environ.get("ROS_DISTRO", "").strip().lower()
    return name or None


def is_ros_parameter(name: str) -> bool:
    """True for a parameter ROS declares itself (``use_sim_time``, ``qos_overrides.*``, ...)."""
    return name in ROS_PARAMETERS or name.startswith(ROS_PARAMETER_PREFIXES)


def typestore_distro(recorded: Optional[str]) -> str:
    """The typestore to decode a bag with, from its recorded ``ros_distro`` (absent in Humble's bags).

    A bag without a known distribution (Humble's metadata version 5 has none; the rosbags writer
    records 'rosbags') is read with Humble's types; a Jazzy bag whose hashes differ from them still
    decodes, with the definitions it carries (``emem_ros.replay.decoder``).
    """
    name = (recorded or "").strip().lower()
    return name if name in BAGS else "humble"


def executor_kinds() -> tuple[str, ...]:
    """The executors the importable rclpy offers, among multi_threaded, single_threaded and events."""
    kinds = []
    for kind, (module, attribute) in _EXECUTORS.items():
        try:
            found = hasattr(importlib.import_module(module), attribute)
        except ImportError:
            found = False
        if found:
            kinds.append(kind)
    return tuple(kinds)


def make_executor(kind: str = DEFAULT_EXECUTOR, *, threads: Optional[int] = None, context: Any = None) -> Any:
    """The rclpy executor ``kind`` (``executor_kinds()``); ``threads`` for the multi-threaded one.

    Raises ValueError naming the kinds the running rclpy has when ``kind`` is not one of them.
    """
    available = executor_kinds()
    if kind not in available:
        raise ValueError(f"executor {kind!r} is not in this rclpy ({current() or 'ROS 2'}); "
                         f"choose one of {', '.join(available) or 'none (is rclpy importable?)'}")
    module, attribute = _EXECUTORS[kind]
    cls = getattr(importlib.import_module(module), attribute)
    options: dict[str, Any] = {} if context is None else {"context": context}
    if kind == "multi_threaded":
        options["num_threads"] = threads or max(4, os.cpu_count() or 1)
    return cls(**options)
