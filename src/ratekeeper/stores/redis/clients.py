"""Opening Redis clients from store URLs:

    redis://[[user]:password@]host:port/db     one server (rediss:// for TLS)
    unix://[[user]:password@]/path/redis.sock?db=0
                                               one server on a Unix socket (redis-py's form)
    redis+sentinel://[[user]:password@]host:port,host:port/service[/db]
        [?sentinel_password=...[&sentinel_username=...]]
    redis+cluster://[[user]:password@]host:port,host:port

Every client gets a socket timeout (``timeout`` seconds, default 0.25) and no blind retries, so
that no call waits much longer than its timeout; a cluster client still follows MOVED/ASK
redirections and refreshes its view of the cluster after a failover, retrying once after a
lost connection but never after a timeout (a script that timed out may have run). Every form
takes the timeout in its query too, ``?timeout=2`` (what ``ratekeeper serve --store`` can
set); a ``timeout`` option given in code wins over it. The user information of a
``redis+sentinel://`` URL is the master's; the sentinels' own, when they ask for one
(``requirepass``), is ``?sentinel_password=`` (and ``&sentinel_username=``). Every form
takes the store's key prefix (``ratekeeper.core.store_keys``) the same way,
``?prefix=team-a``, which the store's opener reads (``split_prefix``), and the lease options,
``?lease_horizon=0.02`` (``split_leases``). The other query options of ``redis://``,
``rediss://`` and ``unix://`` go to redis-py as its ``from_url`` reads them:
``rediss://...?ssl_ca_certs=/ca.pem&ssl_certfile=/client.pem&ssl_keyfile=/client.key&
ssl_check_hostname=false``.

An asyncio store times its round trips itself, so that the event loop's own lag does not count
against the store (``deadlines``): its client, opened ``capped``, gets ``CAP`` times the
timeout as its socket timeout, the hard cap of a call.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ratekeeper.core.errors import MissingExtraError, StoreConfigError
from ratekeeper.core.inputs import decimal
from ratekeeper.core.redaction import redacted
from ratekeeper.stores.redis.deadlines import CAP

DEFAULT_TIMEOUT = 0.25


@lru_cache(maxsize=2)
def _cluster_class(asyncio: bool) -> Any:
    """redis-py's cluster client, retrying once after a lost connection (to find a promoted
    replica) but never after a timeout: a script that timed out may have run, and running it
    again would count its hits twice."""
    import redis.asyncio.cluster
    import redis.cluster

    base: Any = redis.asyncio.cluster.RedisCluster if asyncio else redis.cluster.RedisCluster
    allowed = tuple(
        error for error in base.ERRORS_ALLOW_RETRY if not issubclass(error, redis.TimeoutError)
    )
    return type("RedisCluster", (base,), {"ERRORS_ALLOW_RETRY": allowed, "__module__": __name__})


def _hosts(netloc: str) -> list[tuple[str, int]]:
    hosts = []
    for part in netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = part.rpartition(":")
        if not host or not decimal(port) or not 0 < int(port) < 65536:
            raise StoreConfigError(f"expected host:port in a store URL, not {part!r}")
        hosts.append((host.strip("[]"), int(port)))
    return hosts


def _split(url: str, option: str) -> tuple[str, str | None]:
    """``url`` without its ``option`` query parameter, and that parameter's last value (None
    when it has none)."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    given = [value for name, value in pairs if name == option]
    if not given:
        return url, None
    rest = urlencode([(name, value) for name, value in pairs if name != option])
    return urlunsplit(parts._replace(query=rest)), given[-1]


def split_timeout(url: str) -> tuple[str, float | None]:
    """``url`` without its ``timeout`` query parameter, and that timeout in seconds (None when
    it has none). Raises ``StoreConfigError`` for a timeout that is not positive seconds."""
    url, given = _split(url, "timeout")
    if given is None:
        return url, None
    try:
        timeout = float(given)
    except ValueError:
        timeout = 0.0
    if not 0 < timeout < 3600:
        raise StoreConfigError(f"timeout must be positive seconds, not {given!r}")
    return url, timeout


def split_prefix(url: str) -> tuple[str, str | None]:
    """``url`` without its ``prefix`` query parameter, and that key prefix (None when it has
    none). Raises ``StoreConfigError`` for a prefix ``store_keys.check_prefix`` refuses."""
    from ratekeeper.core.store_keys import check_prefix

    url, prefix = _split(url, "prefix")
    if prefix is not None:
        check_prefix(prefix)
    return url, prefix


#: The lease options a store URL's query may give (``ratekeeper.stores.wrappers.leasing``).
LEASE_OPTIONS = ("lease_ttl", "lease_horizon", "lease_share")


def split_leases(url: str) -> tuple[str, dict[str, float]]:
    """``url`` without its lease options (``LEASE_OPTIONS``), and those given, as numbers.
    Raises ``StoreConfigError`` for one that is not a number (the store checks its range)."""
    given: dict[str, float] = {}
    for option in LEASE_OPTIONS:
        url, value = _split(url, option)
        if value is not None:
            try:
                given[option] = float(value)
            except ValueError:
                raise StoreConfigError(f"{option} must be a number, not {value!r}") from None
    return url, given


#: The options of a ``redis+sentinel://`` URL that go to the sentinels, by redis-py's names.
SENTINEL_OPTIONS = {"sentinel_username": "username", "sentinel_password": "password"}


def split_sentinel(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without the sentinels' options (``SENTINEL_OPTIONS``), and those given, by
    redis-py's names. Raises ``StoreConfigError`` for one given to another kind of URL."""
    given: dict[str, str] = {}
    for option, name in SENTINEL_OPTIONS.items():
        url, value = _split(url, option)
        if value is not None:
            given[name] = value
    if given and not url.startswith("redis+sentinel:"):
        options = ", ".join(option for option, name in SENTINEL_OPTIONS.items() if name in given)
        raise StoreConfigError(f"{options}: only a redis+sentinel:// URL has sentinels")
    return url, given


def check_url(url: str) -> None:
    """Raise ``StoreConfigError`` unless ``url`` is a well-formed Redis store URL; no I/O."""
    url, _ = split_timeout(url)
    url, _ = split_prefix(url)
    url, _ = split_leases(url)
    url, _ = split_sentinel(url)
    parts = urlsplit(url)
    path = [piece for piece in parts.path.split("/") if piece]
    if parts.scheme == "unix":
        if parts.netloc.rsplit("@", 1)[-1] or not parts.path.startswith("/") or not path:
            raise StoreConfigError(
                f"a unix:// store URL names the socket's absolute path, as in "
                f"unix:///run/redis/redis.sock?db=0, not {redacted(url)!r}"
            )
        db = [value for name, value in parse_qsl(parts.query) if name == "db"]
        if db and not decimal(db[-1]):
            raise StoreConfigError(f"a unix:// URL's db is a database number, not {db[-1]!r}")
    elif parts.scheme in ("redis", "rediss"):
        try:
            parts.port  # noqa: B018 - urlsplit checks the port when it is read
        except ValueError as error:
            raise StoreConfigError(f"bad store URL {redacted(url)!r}: {error}") from None
        if not parts.hostname and "unix" not in url:
            raise StoreConfigError(f"a store URL names its host: {redacted(url)!r}")
        if path and (len(path) > 1 or not decimal(path[0])):
            raise StoreConfigError(f"a Redis URL's path is a database number, not {parts.path!r}")
    elif parts.scheme == "redis+cluster":
        _hosts(parts.netloc)
        if path:
            raise StoreConfigError(f"a Redis Cluster has no databases: {redacted(url)!r}")
    elif parts.scheme == "redis+sentinel":
        _hosts(parts.netloc)
        if not path or len(path) > 2 or (len(path) == 2 and not decimal(path[1])):
            raise StoreConfigError(
                f"expected redis+sentinel://host:port,.../service[/db], not {redacted(url)!r}"
            )
    else:
        raise StoreConfigError(f"not a Redis URL: {redacted(url)!r}")


def _credentials(netloc: str) -> tuple[str | None, str | None]:
    """The user name and password of ``[[user]:password@]host:port,...``, None when absent."""
    if "@" not in netloc:
        return None, None
    credentials = netloc.rsplit("@", 1)[0]
    user, _, password = credentials.partition(":") if ":" in credentials else ("", "", credentials)
    return unquote(user) or None, unquote(password) or None


def timeout_of(url: str, timeout: float | None = None) -> float:
    """The timeout of calls to the store ``url`` names: ``timeout`` when given, else the URL's,
    else ``DEFAULT_TIMEOUT``. Raises ``StoreConfigError`` for one that is not positive seconds
    (below an hour)."""
    _, in_url = split_timeout(url)
    if timeout is None:
        timeout = DEFAULT_TIMEOUT if in_url is None else in_url
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < 3600:
        raise StoreConfigError(f"timeout must be positive seconds, not {timeout!r}")
    return timeout


def open_client(
    url: str, asyncio: bool, timeout: float | None = None, *, capped: bool = False, **options: Any
) -> Any:
    """Return a redis-py client (sync or asyncio) for ``url``; ``timeout`` wins over the URL's.
    ``capped``: its socket timeouts are ``CAP`` times the timeout, for a store that times its
    round trips itself (``AsyncRedisStore(client, timeout=...)``).

    Raises ``StoreConfigError`` for a malformed URL, a bad ``timeout`` or an unknown option.
    """
    check_url(url)
    timeout = timeout_of(url, timeout)
    url, _ = split_timeout(url)
    url, sentinels = split_sentinel(url)
    if capped:
        timeout *= CAP
    try:
        import redis
        import redis.asyncio
        import redis.asyncio.retry
        import redis.retry
        from redis.backoff import NoBackoff
    except ImportError as error:
        raise MissingExtraError("redis", "redis") from error
    Retry: Any = redis.asyncio.retry.Retry if asyncio else redis.retry.Retry
    parts = urlsplit(url)
    common: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        **options,
    }
    if parts.scheme in ("redis", "rediss", "unix"):
        module = redis.asyncio if asyncio else redis
        packer = _hiredis_packer()
        if packer is not None and parts.scheme != "rediss":
            if asyncio and "connection_class" not in common:
                common["connection_class"] = _hiredis_packed_connection(parts.scheme == "unix")
            elif not asyncio and "command_packer" not in common:
                common["command_packer"] = packer
        return _checked(module.Redis.from_url(url, retry=Retry(NoBackoff(), 0), **common))
    if parts.scheme == "redis+cluster":
        cluster = redis.asyncio.cluster if asyncio else redis.cluster
        nodes = [cluster.ClusterNode(host, port) for host, port in _hosts(parts.netloc)]
        username, password = _credentials(parts.netloc)
        return _cluster_class(asyncio)(
            startup_nodes=nodes,
            username=username,
            password=password,
            retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
            **common,
        )
    sentinel_module = redis.asyncio.sentinel if asyncio else redis.sentinel
    path = [piece for piece in parts.path.split("/") if piece]
    # The sentinels themselves get the same timeout and no retries: redis-py's default retry
    # with backoff would make a call wait seconds while the sentinels are unreachable.
    sentinel = sentinel_module.Sentinel(
        _hosts(parts.netloc),
        sentinel_kwargs={
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
            **sentinels,
        },
        **common,
    )
    db = int(path[1]) if len(path) > 1 else 0
    username, password = _credentials(parts.netloc)
    return _checked(
        sentinel.master_for(
            path[0], db=db, username=username, password=password, retry=Retry(NoBackoff(), 0)
        )
    )


def _checked(client: Any) -> Any:
    """``client``, once one of its connections was built (no I/O): redis-py takes any option
    when a client is made and refuses an unknown one only when it connects, so that an option
    it does not take raises ``TypeError`` now rather than on first use."""
    pool = client.connection_pool
    pool.connection_class(**pool.connection_kwargs)
    return client


@lru_cache(maxsize=1)
def _hiredis_packer() -> Any:
    """A command packer that hands the arguments to hiredis in one call; None without hiredis.

    redis-py's own hiredis packer first walks the arguments in Python (about 0.15 µs each, a
    third of a decision's client time on a 64-hit batch); hiredis packs ``str``, ``bytes``,
    ``int`` and ``float`` arguments itself, to the same bytes. Anything else, and a command
    name of several words (``"SCRIPT LOAD"``), goes through redis-py's packer.
    """
    try:
        from hiredis import pack_command
        from redis.connection import HiredisRespSerializer
    except ImportError:  # pragma: no cover - hiredis comes with ratekeeper[redis]
        return None

    class HiredisPacker(HiredisRespSerializer):
        def pack(self, *args: Any) -> list[bytes]:
            command = args[0]
            if command.__class__ is str and " " not in command:
                try:
                    return [pack_command(args)]
                except TypeError:  # a bytearray or memoryview argument
                    pass
            packed: list[bytes] = super().pack(*args)
            return packed

    made: Any = HiredisPacker  # redis-py types its serializers' constructors in some versions
    return made()


@lru_cache(maxsize=2)
def _hiredis_packed_connection(unix: bool) -> Any:
    """An asyncio connection (over TCP, or a Unix socket) that packs commands with
    ``_hiredis_packer``.

    redis-py's asyncio connection packs every argument in Python, which is most of the client's
    time on a batch of hits; hiredis packs the same bytes in C.
    """
    from redis.asyncio.connection import Connection, UnixDomainSocketConnection

    packer = _hiredis_packer()
    base: Any = UnixDomainSocketConnection if unix else Connection

    class HiredisPackedConnection(base):  # type: ignore[misc]
        def pack_command(self, *args: Any) -> list[bytes]:
            packed: list[bytes] = packer.pack(*args)
            return packed

    return HiredisPackedConnection
