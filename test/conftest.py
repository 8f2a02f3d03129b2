"""Shared fixtures: small real memories on a temp folder, with a clock we control."""

from __future__ import annotations

import logging
from typing import Callable

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
