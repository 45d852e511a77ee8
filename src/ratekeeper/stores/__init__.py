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


_STORE_OPTIONS = ("prefix", "tag", "batch")


def _redis(url: str, options: dict[str, Any]) -> Store:
    from ratekeeper.stores.overlimit import OverLimitCache
    from ratekeeper.stores.redis import RedisStore
    from ratekeeper.stores.resilience import Resilient
    from ratekeeper.stores.urls import open_client

    policy = options.pop("on_store_error", "allow")
    cache = options.pop("over_limit_cache", False)
    store: Any = RedisStore(
        open_client(url, False, **_client_options(options)), **_store_options(options, False)
    )
    if cache:
        store = OverLimitCache(store)
    return Resilient(store, on_store_error=policy) if policy else store


def _async_redis(url: str, options: dict[str, Any]) -> AsyncStore:
    from ratekeeper.stores.overlimit import AsyncOverLimitCache
    from ratekeeper.stores.redis import AsyncRedisStore
    from ratekeeper.stores.resilience import AsyncResilient
    from ratekeeper.stores.urls import open_client

    policy = options.pop("on_store_error", "allow")
    cache = options.pop("over_limit_cache", False)
    store: Any = AsyncRedisStore(
        open_client(url, True, **_client_options(options)), **_store_options(options, True)
    )
    if cache:
        store = AsyncOverLimitCache(store)
    return AsyncResilient(store, on_store_error=policy) if policy else store


def _store_options(options: dict[str, Any], asyncio: bool) -> dict[str, Any]:
    names = _STORE_OPTIONS if asyncio else _STORE_OPTIONS[:2]
    return {name: options[name] for name in names if name in options}


def _client_options(options: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in options.items() if name not in _STORE_OPTIONS}


_REDIS = ("redis", "rediss", "redis+sentinel", "redis+cluster")
_SYNC: dict[str, Callable[[str, dict[str, Any]], Store]] = {
    "memory": _memory,
    **dict.fromkeys(_REDIS, _redis),
}
_ASYNC: dict[str, Callable[[str, dict[str, Any]], AsyncStore]] = {
    "memory": _async_memory,
    **dict.fromkeys(_REDIS, _async_redis),
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
