"""Request stores: where the live state of every limit is kept.

A store exposes one atomic read-modify-write primitive, ``apply``, plus ``apply_many``,
``admit`` and ``refund``, ``release``, ``reset`` and ``ping``. Stores are chosen by URL
through one registry, ``open_store``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ratekeeper.core.errors import StoreConfigError
from ratekeeper.core.redaction import redacted
from ratekeeper.stores.contract import Admitted, AsyncStore, Health, Hit, Store
from ratekeeper.stores.memory import AsyncMemoryStore, MemoryStore

__all__ = [
    "Admitted",
    "AsyncStore",
    "Health",
    "Hit",
    "Store",
    "open_async_store",
    "open_store",
]


def _memory(url: str, options: dict[str, Any]) -> MemoryStore:
    if url.partition("://")[2]:  # e.g. memory://?max_keys=10, which would be ignored
        raise StoreConfigError(
            f"{redacted(url)!r}: memory:// takes no host, path or query; give its options "
            "(max_keys, clock) as options"
        )
    try:
        return MemoryStore(**options)
    except TypeError as error:  # an option it does not take
        raise StoreConfigError(f"bad option for {url}: {error}") from None


def _async_memory(url: str, options: dict[str, Any]) -> AsyncMemoryStore:
    return AsyncMemoryStore(_memory(url, options))


def _redis_opener(asyncio: bool) -> Callable[[str, dict[str, Any]], Any]:
    """The opener of one Redis twin: the store, its over-limit cache and its failure policy."""

    def open_redis(url: str, options: dict[str, Any]) -> Any:
        from ratekeeper.stores import redis as stores
        from ratekeeper.stores.redis.clients import (
            check_url,
            open_client,
            split_leases,
            split_prefix,
            timeout_of,
        )
        from ratekeeper.stores.wrappers import leasing, overlimit, resilience
        from ratekeeper.stores.wrappers.deferred import Deferred

        url, prefix = split_prefix(url)
        if prefix is not None:
            options.setdefault("prefix", prefix)  # one given in code wins over the URL's
        url, lease_options = split_leases(url)
        for name, value in lease_options.items():
            options.setdefault(name, value)
        policy = options.pop("on_store_error", "local")
        instances = options.pop("instances", 1)
        resilience.check_instances(instances)
        cache = options.pop("over_limit_cache", False)
        leases = leasing.check_options(
            options.pop("lease_ttl", leasing.TTL),
            options.pop("lease_horizon", leasing.HORIZON),
            options.pop("lease_share", leasing.SHARE),
        )
        names = ("prefix", "tag", "batch") if asyncio else ("prefix", "tag")
        store_options = {name: options.pop(name) for name in names if name in options}
        check_url(url)
        kind = stores.AsyncRedisStore if asyncio else stores.RedisStore
        if asyncio:  # a new client for each event loop the store serves
            store_options["connect"] = lambda: open_client(url, asyncio, **options)
            # The store times its round trips, so that the event loop's lag is not the store's;
            # the client's socket timeout becomes the hard cap (redis.deadlines).
            store_options["timeout"] = timeout_of(url, options.get("timeout"))
            options["capped"] = True

        def connect() -> Any:
            try:
                return kind(open_client(url, asyncio, **options), **store_options)
            except TypeError as error:  # an option the client does not take
                raise StoreConfigError(f"bad store option for {redacted(url)}: {error}") from None
            except stores.ERRORS as error:
                raise stores.failure(error) from error

        # A cluster client connects in its constructor: open it on first use instead.
        clustered = url.startswith("redis+cluster:") and not asyncio
        store: Any = Deferred(connect, sharded=True) if clustered else connect()
        if cache:
            store = (overlimit.AsyncOverLimitCache if asyncio else overlimit.OverLimitCache)(store)
        ttl, horizon, share = leases
        lease = leasing.AsyncLeasing if asyncio else leasing.Leasing
        store = lease(store, ttl=ttl, horizon=horizon, share=share)
        if not policy:
            return store
        wrap = resilience.AsyncResilient if asyncio else resilience.Resilient
        return wrap(store, on_store_error=policy, instances=instances)

    return open_redis


_REDIS = ("redis", "rediss", "unix", "redis+sentinel", "redis+cluster")
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
    if not isinstance(url, str):
        raise StoreConfigError(f"a store URL must be a string, not {url!r}")
    scheme = urlsplit(url).scheme
    if scheme not in registry:
        known = ", ".join(f"{name}://" for name in sorted(registry))
        raise StoreConfigError(f"unknown store URL {redacted(url)!r}; expected one of: {known}")
    return registry[scheme](url, options)


def open_store(url: str = "memory://", **options: Any) -> Store:
    """Open the request store named by ``url``.

    ``memory://``; ``redis://host:port/db`` and ``rediss://``; ``unix:///path/redis.sock?db=0``;
    ``redis+sentinel://host:port,host:port/service``; ``redis+cluster://host:port,host:port``
    (``ratekeeper.stores.redis.clients``). ``options`` go to the store (``clock``, ``max_keys``
    for memory). For Redis: ``prefix`` (default: the URL's ``?prefix=``, else ``rk``) and
    ``tag`` (see ``ratekeeper.core.store_keys``), ``timeout`` per call in seconds (default: the
    URL's ``?timeout=``, else 0.25), ``on_store_error`` (``"local"``, the default: limits kept in
    process while the store fails; ``"allow"``, ``"deny"``, or ``None`` to raise
    ``StoreError``; see ``ratekeeper.stores.wrappers.resilience``), ``instances`` (the number
    of processes sharing the store, default 1: under ``"local"`` each enforces 1/``instances``
    of every limit), ``over_limit_cache`` (answer known denials locally), for asyncio ``batch``
    (send the calls of one event-loop tick together; default on), and for leased limits
    (``Limit(sync="leased")``) ``lease_ttl``, ``lease_horizon`` and ``lease_share`` (see
    ``ratekeeper.stores.wrappers.leasing``). On ``memory://`` a leased limit is exact: one
    process holds the whole budget already.

    Opening never touches the network, for every kind of URL: a store that cannot be reached
    fails on first use, where ``on_store_error`` answers. A malformed URL or an unknown option
    raises ``StoreConfigError`` here; bad credentials or an unknown database raise it on first
    use (never answered by the policy).
    """
    store: Store = _open(_SYNC, url, options)
    return store


def open_async_store(url: str = "memory://", **options: Any) -> AsyncStore:
    """Open the asyncio request store named by ``url``; see ``open_store``."""
    store: AsyncStore = _open(_ASYNC, url, options)
    return store
