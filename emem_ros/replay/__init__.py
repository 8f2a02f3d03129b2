"""Replay rosbag2 recordings (.db3 / .mcap) into a memory through the node's own ingest path.

``replay_bag(bag, params)`` reads the bag with ``rosbags``, feeds every message
through ``emem_ros.ros.pipeline.IngestPipeline`` in bag time and returns a
``ReplaySummary``; ``load_typestore`` gives the typestores it decodes with.
"""

from emem_ros.replay.bagreader import BagError, BagInfo, BagReader
from emem_ros.replay.runner import ReplayError, ReplayOptions, replay_bag
from emem_ros.replay.summary import LayerReport, OdometryReport, ReplaySummary
from emem_ros.replay.typestore import load_typestore

__all__ = [
    "BagError",
    "BagInfo",
    "BagReader",
    "LayerReport",
    "OdometryReport",
    "ReplayError",
    "ReplayOptions",
    "ReplaySummary",
    "load_typestore",
    "replay_bag",
]
