"""Small rosbag2 bags for replay tests, written with the real rosbags Writer.

``BagBuilder`` collects messages (objects, or raw bytes for malformed ones)
per topic and writes them as a .db3 or .mcap bag, so a test states exactly
what is on each topic and can check what the replay made of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
from rosbags.rosbag2 import Writer
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode, StoragePlugin

from emem_ros.replay.typestore import load_typestore

START = 1_741_000_000.0
REPO = Path(__file__).resolve().parents[2]
BAGS = REPO / "rosbags"


@dataclass
class _Topic:
    name: str
    msgtype: str
    msgdef: Optional[str] = None
    rihs01: Optional[str] = None
    messages: list[tuple[float, Union[bytes, Any]]] = field(default_factory=list)


class BagBuilder:
    """Messages by topic; ``write`` makes the bag (bag time = message time + ``latency``)."""

    def __init__(self, store: Any = None) -> None:
        self.store = store or load_typestore("humble", own_msgs=False)
        self.T = self.store.types
        self.topics: dict[str, _Topic] = {}

    def topic(self, name: str, msgtype: str, *, msgdef: Optional[str] = None,
              rihs01: Optional[str] = None) -> "BagBuilder":
        """Declare a topic; ``msgdef``/``rihs01`` override what the typestore would record."""
        self.topics[name] = _Topic(name, msgtype, msgdef, rihs01)
        return self

    def add(self, topic: str, t: float, msg: Union[bytes, Any]) -> "BagBuilder":
        self.topics[topic].messages.append((t, msg))
        return self

    def write(self, path: Path, storage: str = "sqlite3", latency: float = 0.01, compress: bool = False) -> Path:
        """``compress``: zstd per message (sqlite3) or per chunk (mcap), as the bundled bags are."""
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        writer = Writer(path, version=8, storage_plugin=plugin)
        if compress:
            mode = CompressionMode.STORAGE if storage == "mcap" else CompressionMode.MESSAGE
            writer.set_compression(mode, CompressionFormat.ZSTD)
        with writer:
            conns = {}
            for topic in self.topics.values():
                if topic.msgdef is not None:
                    conns[topic.name] = writer.add_connection(topic.name, topic.msgtype, msgdef=topic.msgdef,
                                                              rihs01=topic.rihs01 or "")
                else:
                    conns[topic.name] = writer.add_connection(topic.name, topic.msgtype, typestore=self.store)
            stream = sorted((t, name, i) for name, topic in self.topics.items()
                            for i, (t, _) in enumerate(topic.messages))
            for t, name, i in stream:
                topic = self.topics[name]
                msg = topic.messages[i][1]
                raw = msg if isinstance(msg, (bytes, bytearray)) else self.store.serialize_cdr(msg, topic.msgtype)
                writer.write(conns[name], int(round((START + t + latency) * 1e9)), bytes(raw))
        return path

    # ------------------------------------------------------------------ message makers
    def header(self, t: float, frame: str = "odom") -> Any:
        ns = int(round((START + t) * 1e9))
        stamp = self.T["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
        return self.T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame)

    def odometry(self, t: float, x: float, y: float, frame: str = "odom") -> Any:
        T = self.T
        pose = T["geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](x=x, y=y, z=0.0),
                                           orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))
        zero = T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0)
        return T["nav_msgs/msg/Odometry"](
            header=self.header(t, frame), child_frame_id="base_link",
            pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
            twist=T["geometry_msgs/msg/TwistWithCovariance"](
                twist=T["geometry_msgs/msg/Twist"](linear=zero, angular=zero), covariance=np.zeros(36)))

    def string(self, text: str) -> Any:
        return self.T["std_msgs/msg/String"](data=text)

    def float64(self, value: float) -> Any:
        return self.T["std_msgs/msg/Float64"](data=value)

    def detections2d(self, t: float, labels: list[tuple[str, float]]) -> Any:
        T = self.T
        dets = []
        for label, score in labels:
            hyp = T["vision_msgs/msg/ObjectHypothesisWithPose"](
                hypothesis=T["vision_msgs/msg/ObjectHypothesis"](class_id=label, score=score),
                pose=T["geometry_msgs/msg/PoseWithCovariance"](
                    pose=T["geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](x=0.0, y=0.0, z=0.0),
                                                     orientation=T["geometry_msgs/msg/Quaternion"](
                                                         x=0.0, y=0.0, z=0.0, w=1.0)),
                    covariance=np.zeros(36)))
            bbox = T["vision_msgs/msg/BoundingBox2D"](
                center=T["vision_msgs/msg/Pose2D"](position=T["vision_msgs/msg/Point2D"](x=320.0, y=240.0),
                                                   theta=0.0), size_x=40.0, size_y=40.0)
            dets.append(T["vision_msgs/msg/Detection2D"](header=self.header(t, "camera"), results=[hyp], bbox=bbox,
                                                         id=""))
        return T["vision_msgs/msg/Detection2DArray"](header=self.header(t, "camera"), detections=dets)
