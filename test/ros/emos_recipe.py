"""An EmbodiedAgents recipe with the real Cortex and emem_ros's Memory, as an EMOS user writes one.

Its only difference from a recipe with EmbodiedAgents' own Memory is the import
line (and ``emem_params``: the hashing embedder, so no model files are needed,
and the frame: the odometry's, or ``--fixed-frame`` through TF). With ``--proxy-to``
the Memory forwards to a running emem_ros memory node instead.

Usage: python emos_recipe.py --port OLLAMA_PORT --db FILE [--proxy-to /emem/memory | --fixed-frame map]
"""

from __future__ import annotations

import argparse

from agents.clients import OllamaClient
from agents.components import Cortex
from agents.config import CortexConfig, MemoryConfig
from agents.models import OllamaModel
from agents.ros import Launcher, MemLayer, Topic

from emem_ros.emos import Memory, MemoryProxy  # instead of: from agents.components import Memory


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--proxy-to", default="")
    parser.add_argument("--fixed-frame", default="", help="place observations in this frame through TF")
    args = parser.parse_args()
    frames = {"fixed_frame": args.fixed_frame} if args.fixed_frame else {"frame_id": "odom"}

    if args.proxy_to:
        memory = MemoryProxy(component_name="memory", node=args.proxy_to)
    else:
        memory = Memory(
            layers=[MemLayer(subscribes_to=Topic(name="detections_3d", msg_type="Detection3DArray")),
                    MemLayer(subscribes_to=Topic(name="scene", msg_type="String"), temporal_change=True),
                    MemLayer(subscribes_to=Topic(name="battery", msg_type="BatteryState"), is_internal_state=True),
                    MemLayer(subscribes_to=Topic(name="vision", msg_type="Detections")),  # a Vision component's
                    MemLayer(subscribes_to=Topic(name="speech", msg_type="StreamingString"))],  # an LLM's reply
            position=Topic(name="odom", msg_type="Odometry"),
            config=MemoryConfig(db_path=args.db),
            trigger=1.0,
            component_name="memory",
            emem_params={"embedding.backend": "hashing", **frames},
        )
    planner = OllamaClient(OllamaModel(name="planner", checkpoint="scripted-planner:latest"),
                           host="127.0.0.1", port=args.port, inference_timeout=30)
    cortex = Cortex(output=Topic(name="cortex_output", msg_type="StreamingString"), model_client=planner,
                    config=CortexConfig(max_planning_steps=5, max_execution_steps=5), component_name="cortex")
    launcher = Launcher()
    launcher.add_pkg(components=[memory, cortex], multiprocessing=False)
    launcher.bringup()


if __name__ == "__main__":
    main()
