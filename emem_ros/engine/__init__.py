"""The engine below the ``Memory`` facade: store, clock, embedding, ingest path, episodes."""

from emem_ros.engine.engine import Engine
from emem_ros.engine.episodes import EpisodeHook, episode_number

__all__ = ["Engine", "EpisodeHook", "episode_number"]
