"""Request stores: where the live state of every limit is kept.

A store exposes one atomic read-modify-write primitive, ``apply``, plus ``apply_many`` and
``reset``. Stores are chosen by URL through one registry, ``open_store``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from ratekeeper.decision import Decision
from ratekeeper.limit import Limit
from ratekeeper.stores.memory import AsyncMemoryStore, Hit, MemoryStore

__all__ = ["AsyncStore", "Hit", "Store", "open_async_store", "open_store"]


class Store(Protocol):
    """The request-store contract.

    ``apply(key, limit, cost=1, now=None)`` atomically runs ``limit``'s algorithm on ``key``'s
    state and returns the ``Decision``; ``now`` (seconds since the epoch) defaults to the store's
    clock. ``apply_many(hits, all_or_nothing=False, now=None)`` applies ``(key, limit, cost)``
    triples atomically as one batch; with ``all_or_nothing`` nothing is consumed unless every
    hit is allowed. ``reset(key, limit)`` forgets the key's state; ``close()`` releases
    connections.
    """

    def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision: ...

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]: ...

    def reset(self, key: str, limit: Limit) -> None: ...

    def close(self) -> None: ...


class AsyncStore(Protocol):
    """The asyncio twin of ``Store``: the same methods, awaitable."""

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision: ...

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]: ...

    async def reset(self, key: str, limit: Limit) -> None: ...

    async def close(self) -> None: ...


def _memory(url: str, options: dict[str, Any]) -> MemoryStore:
    return MemoryStore(**options)


def _async_memory(url: str, options: dict[str, Any]) -> AsyncMemoryStore:
    return AsyncMemoryStore(**options)


def _redis_opener(asyncio: bool) -> Callable[[str, dict[str, Any]], Any]:
    """The opener of one Redis twin: the store, its over-limit cache and its failure policy."""

    def open_redis(url: str, options: dict[str, Any]) -> Any:
        from ratekeeper.stores import overlimit, resilience
        from ratekeeper.stores import redis as stores
        from ratekeeper.stores.urls import open_client

        policy = options.pop("on_store_error", "allow")
        cache = options.pop("over_limit_cache", False)
        names = ("prefix", "tag", "batch") if asyncio else ("prefix", "tag")
        store_options = {name: options.pop(name) for name in names if name in options}
        client = open_client(url, asyncio, **options)
        if asyncio:  # a new client for each event loop the store serves
            store_options["connect"] = lambda: open_client(url, asyncio, **options)
        store: Any = (stores.AsyncRedisStore if asyncio else stores.RedisStore)(
            client, **store_options
        )
        if cache:
            store = (overlimit.AsyncOverLimitCache if asyncio else overlimit.OverLimitCache)(store)
        if not policy:
            return store
        wrap = resilience.AsyncResilient if asyncio else resilience.Resilient
        return wrap(store, on_store_error=policy)

    return open_redis


_REDIS = ("redis", "rediss", "redis+sentinel", "redis+cluster")
_SYNC: dict[str, Callable[[str, dict[str, Any]], Store]] = {
    "memory": _memory,
    **dict.fromkeys(_REDIS, _redis_opener(asyncio=False)),
}
_ASYNC: dict[str, Callable[[str, dict[str, Any]], AsyncStore]] = {
    "memory": _async_memory,
    **dict.fromkeys(_REDIS, _redis_opener(asyncio=True)),
}


def _open(
    registry: dict[str, Callable[[str, dict[str, Any]], Any]], url: str, options: dict[str, Any]
) -> Any:
    scheme = urlsplit(url).scheme
    if scheme not in registry:
        known = ", ".join(f"{name}://" for name in sorted(registry))
        raise ValueError(f"unknown store URL {url!r}; expected one of: {known}")
    return registry[scheme](url, options)


def open_store(url: str = "memory://", **options: Any) -> Store:
    """Open the request store named by ``url``.

    ``memory://``; ``redis://host:port/db`` and ``rediss://``; ``redis+sentinel://host:port,
    host:port/service``; ``redis+cluster://host:port,host:port``. ``options`` go to the store
    (``clock``, ``max_keys`` for memory). For Redis: ``prefix`` and ``tag`` (see
    ``ratekeeper.keys``), ``timeout`` per call in seconds (default 0.25), ``on_store_error``
    (``"allow"``, the default, ``"deny"``, ``"local"``, or ``None`` to raise ``StoreError``),
    ``over_limit_cache`` (answer known denials locally), and for asyncio ``batch`` (send the
    calls of one event-loop tick together; default on).
    """
    store: Store = _open(_SYNC, url, options)
    return store


def open_async_store(url: str = "memory://", **options: Any) -> AsyncStore:
    """Open the asyncio request store named by ``url``; see ``open_store``."""
    store: AsyncStore = _open(_ASYNC, url, options)
    return store
