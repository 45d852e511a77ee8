"""A Redis store URL's ``?timeout=``: the timeout of every call, for every form of URL."""

from __future__ import annotations

import pytest

from ratekeeper.core.errors import StoreConfigError
from ratekeeper.stores import open_async_store, open_store
from ratekeeper.stores.redis.clients import DEFAULT_TIMEOUT, open_client, split_timeout


def test_the_timeout_leaves_the_url_and_the_rest_stays() -> None:
    assert split_timeout("redis://:pw@127.0.0.1:6379/2?timeout=2&health_check_interval=5") == (
        "redis://:pw@127.0.0.1:6379/2?health_check_interval=5",
        2.0,
    )
    assert split_timeout("redis+cluster://a:1,b:2?timeout=0.5") == ("redis+cluster://a:1,b:2", 0.5)
    assert split_timeout("redis://127.0.0.1:6379/0") == ("redis://127.0.0.1:6379/0", None)


def test_a_server_url_sets_the_clients_timeout() -> None:
    client = open_client("redis://127.0.0.1:6379/0?timeout=2", asyncio=True)
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 2.0
    assert client.connection_pool.connection_kwargs["socket_connect_timeout"] == 2.0
    default = open_client("redis://127.0.0.1:6379/0", asyncio=False)
    assert default.connection_pool.connection_kwargs["socket_timeout"] == DEFAULT_TIMEOUT


def test_a_cluster_url_sets_the_clients_timeout() -> None:
    client = open_client("redis+cluster://127.0.0.1:7000,127.0.0.1:7001?timeout=3", asyncio=True)
    assert client.connection_kwargs["socket_timeout"] == 3.0


def test_a_timeout_given_in_code_wins_over_the_urls() -> None:
    client = open_client("redis://127.0.0.1:6379/0?timeout=2", asyncio=True, timeout=0.1)
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 0.1


@pytest.mark.parametrize("value", ["0", "-1", "soon", "", "3600"])
def test_a_bad_timeout_is_refused_when_the_store_is_opened(value: str) -> None:
    for url in (
        f"redis://127.0.0.1:6379/0?timeout={value}",
        f"redis+cluster://a:1?timeout={value}",
    ):
        with pytest.raises(StoreConfigError, match="timeout must be positive seconds"):
            open_store(url)
        with pytest.raises(StoreConfigError, match="timeout must be positive seconds"):
            open_async_store(url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:6379/²", "a Redis URL's path is a database number"),
        ("redis+cluster://127.0.0.1:²", "expected host:port in a store URL"),
        ("redis+sentinel://127.0.0.1:1/mymaster/²", "expected redis\\+sentinel://"),
    ],
)
def test_a_number_not_written_in_0_to_9_is_refused(url: str, message: str) -> None:
    """'²' passes str.isdigit() and fails int(): refused as misconfiguration, not ValueError."""
    with pytest.raises(StoreConfigError, match=message):
        open_store(url)


@pytest.mark.parametrize("asyncio", [False, True])
def test_the_sentinels_own_password_goes_to_the_sentinels_only(asyncio: bool) -> None:
    url = "redis+sentinel://u:master@127.0.0.1:1/m?sentinel_username=s&sentinel_password=p%26w"
    client = open_client(url, asyncio=asyncio)
    sentinel = client.connection_pool.sentinel_manager
    assert {
        (pool.connection_kwargs.get("username"), pool.connection_kwargs.get("password"))
        for pool in (one.connection_pool for one in sentinel.sentinels)
    } == {("s", "p&w")}
    master = client.connection_pool.connection_kwargs
    assert (master["username"], master["password"]) == ("u", "master")
    for other in ("redis://127.0.0.1:1/0", "redis+cluster://127.0.0.1:1"):
        with pytest.raises(StoreConfigError, match=r"sentinel_password: only a redis\+sentinel"):
            open_client(f"{other}?sentinel_password=x", asyncio=asyncio)


@pytest.mark.parametrize("asyncio", [False, True])
def test_a_cluster_client_retries_a_lost_connection_but_never_a_timeout(asyncio: bool) -> None:
    """A script that timed out may have run: sent again, its hits would count twice."""
    import redis

    from ratekeeper.stores.redis.clients import _cluster_class

    kind = _cluster_class(asyncio)  # the sync client connects when built: its class is checked
    assert redis.ConnectionError in kind.ERRORS_ALLOW_RETRY
    assert not any(issubclass(e, redis.TimeoutError) for e in kind.ERRORS_ALLOW_RETRY)
    if asyncio:
        client = open_client("redis+cluster://127.0.0.1:7000", asyncio=True)
        assert isinstance(client, kind) and client.retry.get_retries() == 1
