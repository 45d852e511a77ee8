"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ratekeeper.testing import FakeClock
from tests.servers import PostgresServer, RedisCluster, RedisServer

#: Every run writes each test's duration to a file and prints the slowest (tests/durations.py).
pytest_plugins = ["tests.durations"]

#: A fixed epoch-sized instant: 2023-11-14 22:13:20 UTC.
T0 = 1_700_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real standalone redis-server for the session; tests use their own keys or flush."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One real Redis Cluster (3 masters, 3 replicas) for the session; tests use their own keys.

    Tests that damage a cluster (kill a node) build their own ``RedisCluster`` instead.
    """
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session; tests use their own tables."""
    server = PostgresServer()
    yield server
    server.remove()
