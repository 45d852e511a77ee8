"""The store URL forms beyond ``redis://``: a Unix socket, TLS, and the key prefix.

Real servers only: a redis-server listening on a Unix socket, and one serving TLS with
certificates made here by ``openssl`` (a CA, the server's, a client's). Each form decides the
exact sequence a limit of three gives, through both twins.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import Limit, StoreConfigError, StoreError, open_async_store, open_store
from tests.certificates import make_certificates
from tests.servers import RedisServer, command, free_port

LIMIT = Limit(3, 3600, "gcra")  # no window edge for the test to straddle

Decide = Callable[[str, str], list[bool]]


def sync_decisions(url: str, key: str) -> list[bool]:
    store = open_store(url, on_store_error=None)
    try:
        return [store.apply(key, LIMIT).allowed for _ in range(4)]
    finally:
        store.close()


def async_decisions(url: str, key: str) -> list[bool]:
    async def run() -> list[bool]:
        store = open_async_store(url, on_store_error=None)
        try:
            return [(await store.apply(key, LIMIT)).allowed for _ in range(4)]
        finally:
            await store.close()

    return asyncio.run(run())


def piped_decisions(url: str, key: str) -> list[bool]:
    """``async_decisions``, the last three on the store's pipe (``stores/redis/pipe.py``),
    which opens as the store's client connects: TLS, AUTH, the database."""

    async def run() -> list[bool]:
        # A TLS handshake on a loaded machine may pass the default 0.25 s: this test is about
        # what the pipe connects to, not how fast.
        store: Any = open_async_store(url, on_store_error=None, timeout=2.0)
        try:
            redis_store = store.store  # under the leasing wrapper
            allowed = [(await store.apply(key, LIMIT)).allowed]  # through redis-py
            await redis_store._batcher.opening
            pipe = redis_store._batcher.pipe
            allowed += [(await store.apply(key, LIMIT)).allowed for _ in range(3)]
            assert pipe.sent == 3 and store.store._batcher.pipe is pipe
            return allowed
        finally:
            await store.close()

    return asyncio.run(run())


@pytest.fixture(scope="module")
def unix_redis() -> Iterator[RedisServer]:
    # A socket's path is limited to 107 bytes: pytest's temporary directories may be longer.
    directory = Path(tempfile.mkdtemp(prefix="rk-sock-"))
    server = RedisServer(directory, unix_socket=directory / "redis.sock")
    command(server.port, "CONFIG", "SET", "requirepass", "s3cret")
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


def keys_in(server: RedisServer, db: int, pattern: str = "*") -> list[str]:
    """The keys of database ``db`` matching ``pattern``, read over the server's TCP port."""
    import redis

    client = redis.Redis(port=server.port, password="s3cret", db=db, decode_responses=True)
    try:
        return sorted(client.keys(pattern))
    finally:
        client.close()


@pytest.mark.parametrize("decide", [sync_decisions, async_decisions, piped_decisions])
def test_a_unix_socket_url_decides_in_the_database_it_names(
    unix_redis: RedisServer, decide: Decide
) -> None:
    assert unix_redis.unix_socket is not None
    name = decide.__name__
    url = f"unix://:s3cret@{unix_redis.unix_socket}?db=3"
    assert decide(url, f"unix-{name}") == [True, True, True, False]
    assert [key for key in keys_in(unix_redis, 3) if f"unix-{name}" in key]
    assert not [key for key in keys_in(unix_redis, 0) if f"unix-{name}" in key]


@pytest.mark.parametrize("decide", [sync_decisions, async_decisions])
def test_a_prefix_in_the_url_names_the_keys(unix_redis: RedisServer, decide: Decide) -> None:
    assert unix_redis.unix_socket is not None
    name = decide.__name__
    url = f"unix://:s3cret@{unix_redis.unix_socket}?db=0&prefix=team-a&timeout=1"
    assert decide(url, f"prefixed-{name}") == [True, True, True, False]
    keys = keys_in(unix_redis, 0, f"*prefixed-{name}*")
    assert len(keys) == 1 and keys[0].startswith("team-a:")
    # Another prefix is another set of counters.
    other = f"redis://:s3cret@127.0.0.1:{unix_redis.port}/0?prefix=team-b"
    assert decide(other, f"prefixed-{name}") == [True, True, True, False]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("unix://redis.sock", "names the socket's absolute path"),
        ("unix://", "names the socket's absolute path"),
        ("unix:///run/redis.sock?db=first", "db is a database number"),
        ("redis://127.0.0.1:6379/0?prefix=%7Bx%7D", "prefix must be a non-empty string"),
        ("redis://127.0.0.1:6379/0?prefix=", "prefix must be a non-empty string"),
    ],
)
def test_malformed_urls_are_refused_when_opened(url: str, problem: str) -> None:
    with pytest.raises(StoreConfigError, match=problem):
        open_store(url)
    with pytest.raises(StoreConfigError, match=problem):
        open_async_store(url)


def test_a_prefix_given_in_code_wins_over_the_urls() -> None:
    store = open_store("redis://127.0.0.1:1/0?prefix=from-url", prefix="from-code")
    try:
        inner = store.store  # type: ignore[attr-defined]
        assert inner.prefix == "from-code"
    finally:
        store.close()


# -- TLS ---------------------------------------------------------------------------------------


class TlsRedis(RedisServer):
    """A redis-server serving TLS on ``tls_port`` (and plain RESP on ``port``, so that the
    tests' readiness check can read it)."""

    def __init__(self, directory: Path, certificates: Path, clients: str) -> None:
        self.tls_port = free_port()
        super().__init__(
            directory,
            None,
            *("--tls-port", str(self.tls_port)),
            *("--tls-cert-file", str(certificates / "server.crt")),
            *("--tls-key-file", str(certificates / "server.key")),
            *("--tls-ca-cert-file", str(certificates / "ca.crt")),
            *("--tls-auth-clients", clients),
        )


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def tls_redis(
    tmp_path_factory: pytest.TempPathFactory, certificates: dict[str, Path]
) -> Iterator[TlsRedis]:
    server = TlsRedis(tmp_path_factory.mktemp("tls"), certificates["ca.crt"].parent, "yes")
    yield server
    server.stop()


@pytest.mark.parametrize("decide", [sync_decisions, async_decisions, piped_decisions])
def test_rediss_decides_over_tls_with_a_client_certificate(
    tls_redis: TlsRedis, certificates: dict[str, Path], decide: Decide
) -> None:
    name = decide.__name__
    query = (
        f"ssl_ca_certs={certificates['ca.crt']}&ssl_certfile={certificates['client.crt']}"
        f"&ssl_keyfile={certificates['client.key']}"
    )
    url = f"rediss://localhost:{tls_redis.tls_port}/0?{query}"
    assert decide(url, f"tls-{name}") == [True, True, True, False]
    # The certificate names localhost, not 127.0.0.1: by address, only without the check.
    by_address = f"rediss://127.0.0.1:{tls_redis.tls_port}/0?{query}"
    with pytest.raises(StoreError, match=r"(?i)certificate|hostname|match"):
        decide(by_address, f"tls-ip-{name}")
    unchecked = f"{by_address}&ssl_check_hostname=false"
    assert decide(unchecked, f"tls-ip-{name}") == [True, True, True, False]


def test_rediss_without_the_client_certificate_is_refused(
    tls_redis: TlsRedis, certificates: dict[str, Path]
) -> None:
    url = f"rediss://localhost:{tls_redis.tls_port}/0?ssl_ca_certs={certificates['ca.crt']}"
    with pytest.raises(StoreError):
        sync_decisions(url, "tls-anonymous")
