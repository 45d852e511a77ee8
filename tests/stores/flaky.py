"""A store that fails on command, for the tests of what stands between a caller and a store."""

from __future__ import annotations

from collections.abc import Sequence

from ratekeeper import Decision, Health, Limit, MemoryStore, StoreError
from ratekeeper.stores.memory import Hit


class Flaky:
    """A real MemoryStore that raises ``failure`` while ``down``; counts the calls it gets."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.down = False
        self.failure: Exception = StoreError("down")
        self.calls = 0

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        self.calls += 1
        if self.down:
            raise self.failure
        return self.inner.apply(key, limit, cost, now)

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        self.calls += 1
        if self.down:
            raise self.failure
        return self.inner.apply_many(hits, all_or_nothing=all_or_nothing, now=now)

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        self.calls += 1
        if self.down:
            raise self.failure
        return self.inner.release(key, limit, slots, now)

    def reset(self, key: str, limit: Limit) -> None:
        self.inner.reset(key, limit)

    def ping(self) -> Health:
        return Health(False, error="down") if self.down else Health(True)
