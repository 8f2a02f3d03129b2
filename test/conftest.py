"""Shared fixtures: small real memories on a temp folder, with a clock we control."""

from __future__ import annotations

import logging
from typing import Callable, Iterator

import pytest

from emem_ros import Memory, MemoryConfig
from emem_ros.embeddings import HashingEmbeddingProvider


class FakeClock:
    """The memory's clock in tests: it moves only when told to."""

    def __init__(self, start: float = 1_763_800_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_memory(tmp_path, clock) -> Callable[..., Memory]:
    """Build memories on tmp_path; every one is closed at teardown."""
    made: list[Memory] = []

    def factory(name: str = "memory.db", provider=None, **overrides) -> Memory:
        settings = {"flush_interval": 0.0, "index_save_interval": 0.0}
        settings.update(overrides)
        config = MemoryConfig(db_path=str(tmp_path / name), **settings)
        memory = Memory(config=config, embedding_provider=provider or HashingEmbeddingProvider(),
                        get_current_time=clock)
        made.append(memory)
        return memory

    yield factory
    for memory in made:
        if not memory.closed:
            try:
                memory.close()
            except Exception:
                logging.getLogger(__name__).exception("closing a test memory failed")


@pytest.fixture
def memory(tmp_path, clock) -> Iterator[Memory]:
    """A memory as the patrol tests open it (``test.support.patrol.open_memory``), closed at teardown."""
    from test.support.patrol import open_memory

    opened = open_memory(tmp_path / "memory.db", clock)
    yield opened
    opened.close()


# ---------------------------------------------------------------------------- PostgreSQL (fleet store)
def _postgres_or_skip():
    """A started server, stopped and removed after the test (also on failure); a skip saying why if none."""
    from test.support.postgres import PostgresUnavailable, start_server

    try:
        server = start_server()
    except PostgresUnavailable as exc:
        pytest.skip(f"PostgreSQL unavailable: {exc}")
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL 15 (PostGIS + pgvector) for the session; the fleet tests skip where it cannot start."""
    yield from _postgres_or_skip()


@pytest.fixture
def fleet_url(postgres_server) -> str:
    """A fresh, empty database on the session's server."""
    return postgres_server.create_database()


@pytest.fixture
def own_postgres():
    """A server of this test's own, which the test may stop and start (an outage mid-sync)."""
    yield from _postgres_or_skip()


# ---------------------------------------------------------------------------- Python logging vs ROS launch
def _undo_launch_logging() -> None:
    """Give Python logging back its standard logger class and propagation after ROS `launch` was imported.

    Importing `launch` (Humble's launch_testing pytest plugin does, at start-up) calls
    `logging.setLoggerClass(LaunchLogger)`, whose loggers set `propagate = False`: every logger made
    afterwards (ours are made when their module is first imported) stops reaching the root logger,
    where pytest's log capture listens. The loggers of launch itself keep their own setting.
    """
    if logging.getLoggerClass().__name__ == "LaunchLogger":
        logging.setLoggerClass(logging.Logger)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (type(logger).__name__ == "LaunchLogger" and not logger.propagate
                and name.split(".")[0] not in ("launch", "launch_ros", "launch_testing")):
            logger.propagate = True


@pytest.fixture(autouse=True)
def _standard_python_logging(request):
    """Outside test/ros (where launch runs in-process and owns its loggers), logging is Python's own."""
    if "ros" not in request.path.parent.name:
        _undo_launch_logging()
    yield
