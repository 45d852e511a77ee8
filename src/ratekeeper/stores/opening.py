"""Opening a request store from its URL, through one registry (``open_store``,
``open_async_store``): the backend the URL names, ``memory://`` or Redis in its forms
(``ratekeeper.stores.redis.clients``), with the wrappers stacked on a Redis store, outermost
first: the failure policy (``wrappers.resilience``), leased limits (``wrappers.leasing``), the
over-limit cache when asked for (``wrappers.overlimit``), and for a Redis Cluster without
asyncio, the opening deferred to the first call (``wrappers.deferred``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlsplit

from ratekeeper.core.errors import StoreConfigError
from ratekeeper.core.redaction import redacted
from ratekeeper.stores.contract import AsyncLeasingStore, AsyncStore, LeasingStore, Store
from ratekeeper.stores.memory import AsyncMemoryStore, MemoryStore

__all__ = ["open_async_store", "open_store"]

T = TypeVar("T")


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


class _Stack(NamedTuple):
    """What is stacked on a Redis store, from the options ``open_store`` was given."""

    cache: bool  # the over-limit cache
    ttl: float  # the leasing wrapper's
    horizon: float
    share: float
    policy: str | None  # the failure policy, if any
    instances: int | None  # None: counted by the store (``instances="auto"``)


def _redis_options(
    url: str, options: dict[str, Any], asyncio: bool
) -> tuple[str, _Stack, dict[str, Any]]:
    """The URL of a Redis store without the options its query gave, what to stack on the
    store, and the store's own options; ``options`` keeps the client's."""
    from ratekeeper.stores.redis.clients import check_url, split_leases, split_prefix
    from ratekeeper.stores.wrappers import leasing
    from ratekeeper.stores.wrappers.policy import check_instances

    url, prefix = split_prefix(url)
    if prefix is not None:
        options.setdefault("prefix", prefix)  # one given in code wins over the URL's
    url, lease_options = split_leases(url)
    for name, value in lease_options.items():
        options.setdefault(name, value)
    policy = options.pop("on_store_error", "local")
    instances = options.pop("instances", 1)
    if isinstance(instances, str) and instances.strip().lower() == "auto":
        if not asyncio:
            raise StoreConfigError(
                'instances="auto" counts the processes through an asyncio store '
                "(open_async_store); open_store takes their number"
            )
        instances = None
    else:
        check_instances(instances)
    cache = options.pop("over_limit_cache", False)
    leases = leasing.check_options(
        options.pop("lease_ttl", leasing.TTL),
        options.pop("lease_horizon", leasing.HORIZON),
        options.pop("lease_share", leasing.SHARE),
    )
    names = ("prefix", "tag", "batch") if asyncio else ("prefix", "tag")
    store_options = {name: options.pop(name) for name in names if name in options}
    check_url(url)
    return url, _Stack(cache, *leases, policy, instances), store_options


def _connected(url: str, connect: Callable[[], T]) -> T:
    """``connect()``, a Redis store on a new client: an option the client does not take
    raises ``StoreConfigError``, what redis-py raises is sorted (``redis.failure``)."""
    from ratekeeper.stores import redis

    try:
        return connect()
    except TypeError as error:  # an option the client does not take
        raise StoreConfigError(f"bad store option for {redacted(url)}: {error}") from None
    except redis.ERRORS as error:
        raise redis.failure(error) from error


def _open_redis(url: str, options: dict[str, Any]) -> Store:
    """A Redis store, its over-limit cache, its leased limits and its failure policy."""
    from ratekeeper.stores.redis import RedisStore
    from ratekeeper.stores.redis.clients import open_client
    from ratekeeper.stores.wrappers.deferred import Deferred
    from ratekeeper.stores.wrappers.leasing import Leasing
    from ratekeeper.stores.wrappers.overlimit import OverLimitCache
    from ratekeeper.stores.wrappers.resilience import Resilient

    url, stack, store_options = _redis_options(url, options, asyncio=False)

    def connect() -> RedisStore:
        return _connected(
            url, lambda: RedisStore(open_client(url, False, **options), **store_options)
        )

    # A cluster client connects in its constructor: open it on first use instead.
    clustered = url.startswith("redis+cluster:")
    store: LeasingStore = Deferred(connect, sharded=True) if clustered else connect()
    if stack.cache:
        store = OverLimitCache(store)
    leased = Leasing(store, ttl=stack.ttl, horizon=stack.horizon, share=stack.share)
    if not stack.policy:
        return leased
    assert stack.instances is not None  # "auto" is for asyncio stores
    return Resilient(leased, on_store_error=stack.policy, instances=stack.instances)


def _open_async_redis(url: str, options: dict[str, Any]) -> AsyncStore:
    """The asyncio twin of ``_open_redis``."""
    from ratekeeper.stores.redis import AsyncRedisStore
    from ratekeeper.stores.redis.clients import open_client, timeout_of
    from ratekeeper.stores.wrappers.async_leasing import AsyncLeasing
    from ratekeeper.stores.wrappers.async_resilience import AsyncResilient
    from ratekeeper.stores.wrappers.fleet import Fleet, FleetSize
    from ratekeeper.stores.wrappers.overlimit import AsyncOverLimitCache

    url, stack, store_options = _redis_options(url, options, asyncio=True)
    # A new client for each event loop the store serves.
    store_options["connect"] = lambda: open_client(url, True, **options)
    # The store times its round trips, so that the event loop's lag is not the store's; the
    # client's socket timeout becomes the hard cap (redis.deadlines).
    store_options["timeout"] = timeout_of(url, options.get("timeout"))
    options["capped"] = True

    connect = store_options["connect"]
    redis_store = _connected(url, lambda: AsyncRedisStore(connect(), **store_options))
    store: AsyncLeasingStore = redis_store
    if stack.cache:
        store = AsyncOverLimitCache(store)
    leased = AsyncLeasing(store, ttl=stack.ttl, horizon=stack.horizon, share=stack.share)
    if not stack.policy:
        return leased
    if stack.instances is not None:
        return AsyncResilient(leased, on_store_error=stack.policy, instances=stack.instances)
    size = FleetSize()
    resilient = AsyncResilient(leased, on_store_error=stack.policy, instances=size)
    resilient.fleet = Fleet(redis_store, size)
    return resilient


_REDIS = ("redis", "rediss", "unix", "redis+sentinel", "redis+cluster")
_SYNC: dict[str, Callable[[str, dict[str, Any]], Store]] = {
    "memory": _memory,
    **dict.fromkeys(_REDIS, _open_redis),
}
_ASYNC: dict[str, Callable[[str, dict[str, Any]], AsyncStore]] = {
    "memory": _async_memory,
    **dict.fromkeys(_REDIS, _open_async_redis),
}


def _open(
    registry: dict[str, Callable[[str, dict[str, Any]], T]], url: str, options: dict[str, Any]
) -> T:
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
    of every limit; for asyncio, ``"auto"`` counts them through the store while
    ``store.fleet.run()`` runs, as ``ratekeeper serve`` runs it: see
    ``ratekeeper.stores.wrappers.fleet``), ``over_limit_cache`` (answer known denials
    locally), for asyncio ``batch`` (send the calls of one event-loop tick together; default
    on), and for leased limits (``Limit(sync="leased")``) ``lease_ttl``, ``lease_horizon`` and
    ``lease_share`` (see
    ``ratekeeper.stores.wrappers.leasing``). On ``memory://`` a leased limit is exact: one
    process holds the whole budget already.

    Opening never touches the network, for every kind of URL: a store that cannot be reached
    fails on first use, where ``on_store_error`` answers. A malformed URL or an unknown option
    raises ``StoreConfigError`` here; bad credentials or an unknown database raise it on first
    use (never answered by the policy).
    """
    return _open(_SYNC, url, options)


def open_async_store(url: str = "memory://", **options: Any) -> AsyncStore:
    """Open the asyncio request store named by ``url``; see ``open_store``."""
    return _open(_ASYNC, url, options)
