"""A request store opened on its first use, so that opening one never touches the network.

A Redis Cluster client connects in its constructor to learn the cluster's slots. Opened through
``Deferred``, an unreachable cluster is a store failure on first use, answered by the failure
policy like any other, and not an exception out of ``open_store``: every store URL behaves the
same way. The opening is retried on the next call (the circuit breaker permitting) until it
succeeds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Unpack, cast

from ratekeeper.algorithms.leases import Taken
from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from ratekeeper.stores.contract import Admitted, Health, Hit, LeaseTerms, LeasingStore, Sharded


class Deferred:
    """A store that ``opener()`` makes on first use; ``opener`` raises ratekeeper's errors.
    ``sharded`` says whether the store it makes is made of shards (see ``shard_of``)."""

    def __init__(self, opener: Callable[[], LeasingStore], *, sharded: bool = False) -> None:
        self._opener = opener
        self.sharded = sharded
        self._store: LeasingStore | None = None
        self._lock = threading.Lock()

    @property
    def store(self) -> LeasingStore:
        """The store, opened now if it was not yet."""
        store = self._store
        if store is None:
            with self._lock:
                if self._store is None:
                    self._store = self._opener()
                store = self._store
        return store

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        return self.store.apply(key, limit, cost, now)

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        return self.store.apply_many(hits, all_or_nothing=all_or_nothing, now=now)

    def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        return self.store.admit(hits, all_or_nothing=all_or_nothing)

    def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        self.store.refund(key, limit, cost, at)

    def shard_of(self, key: str, limit: Limit) -> str:
        """The opened store's ``shard_of``; ``""`` before it is opened (opening is left to the
        call, under the failure policy)."""
        store = self._store
        if store is None or not self.sharded:
            return ""
        return cast(Sharded, store).shard_of(key, limit)

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        return self.store.release(key, limit, slots, now)

    def lease(self, key: str, limit: Limit, want: int, **terms: Unpack[LeaseTerms]) -> Taken:
        return self.store.lease(key, limit, want, **terms)

    def reset(self, key: str, limit: Limit) -> None:
        self.store.reset(key, limit)

    def ping(self) -> Health:
        from ratekeeper.core.errors import StoreError

        try:
            store = self.store
        except StoreError as error:
            return Health(False, error=str(error))
        health: Health = store.ping()
        return health

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)
