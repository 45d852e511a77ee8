"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ratekeeper.testing import FakeClock
from tests.servers import RedisServer

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
