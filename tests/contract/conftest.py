"""The store contract suite runs unchanged over every request store.

Each store factory takes a clock; the tests pass ``now`` explicitly wherever time matters, so
that a store whose clock is a server's (Redis) can run them too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from ratekeeper import MemoryStore, Store
from ratekeeper.testing import FakeClock

StoreFactory = Callable[[FakeClock], Store]

FACTORIES: dict[str, StoreFactory] = {
    "memory": lambda clock: MemoryStore(clock=clock),
}


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Store]:
    yield FACTORIES[request.param](clock)
