"""``RemoteLimiter`` and its asyncio twin against the real ``ratekeeper serve`` process: the
Limiter API decided by the service, and the failure policy while the service is away."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratekeeper import (
    InvalidInputError,
    InvalidLimitError,
    Limit,
    RateLimitExceeded,
    StoreConfigError,
    StoreError,
)
from ratekeeper.client import KEEPALIVE_EXPIRY, AsyncRemoteLimiter, RemoteLimiter
from tests.faults import FaultProxy
from tests.gateways import UpstreamServer
from tests.servers import RedisServer, free_port
from tests.service.served import Served

TOKEN = "client-admin-token-0123456789"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    served = Served(tmp_path_factory.mktemp("service"), environ={"RATEKEEPER_ADMIN_TOKEN": TOKEN})
    try:
        yield served.url
    finally:
        served.stop()


def test_the_limiter_api_decided_by_the_service(service: str) -> None:
    limiter = RemoteLimiter(service, timeout=5, admin_token=TOKEN)
    limit = Limit(3, 3600, "gcra")
    decisions = [limiter.hit("client:a", limit) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0]
    assert decisions[3].retry_after == pytest.approx(1200, abs=1)
    assert not any(d.degraded for d in decisions)
    assert limiter.peek("client:a", limit).remaining == 0
    limiter.reset("client:a", limit)
    assert limiter.hit("client:a", limit).remaining == 2
    assert limiter.hit("client:b", "2/hour", cost=2).remaining == 0

    @limiter.limit("1/hour", key=lambda user: f"report:{user}")
    def report(user: str) -> str:
        return user

    assert report("x") == "x"
    with pytest.raises(RateLimitExceeded):
        report("x")
    assert limiter.store.ping().ok
    limiter.close()


def test_a_second_client_shares_the_services_counts(service: str) -> None:
    first, second = RemoteLimiter(service, timeout=5), RemoteLimiter(service, timeout=5)
    assert first.hit("shared", "2/hour").allowed
    assert second.hit("shared", "2/hour").allowed
    assert not first.hit("shared", "2/hour").allowed
    first.close()
    second.close()


def test_bad_input_is_refused_before_anything_is_sent(service: str) -> None:
    limiter = RemoteLimiter(service, timeout=5)
    for call in (
        lambda: limiter.hit("k", "5/hour", -1),
        lambda: limiter.hit("", "5/hour"),
        lambda: limiter.hit_many([("a", "5/hour"), ("b", "5/hour")]),  # all or nothing
    ):
        with pytest.raises(InvalidInputError):
            call()
    for limit in (Limit(1, 86_400, calendar=True), Limit(2, 60, "concurrency")):
        with pytest.raises(InvalidLimitError):
            limiter.hit("k", limit)
    limiter.close()


@pytest.mark.parametrize(("policy", "allowed"), [("allow", True), ("deny", False)])
def test_an_unreachable_service_is_answered_by_the_policy(policy: str, allowed: bool) -> None:
    limiter = RemoteLimiter(f"http://127.0.0.1:{free_port()}", on_store_error=policy)
    decision = limiter.hit("k", "1/hour")
    assert (decision.allowed, decision.degraded) == (allowed, True)
    assert not limiter.store.ping().ok
    limiter.close()


def test_without_a_policy_an_unreachable_service_raises() -> None:
    limiter = RemoteLimiter(f"http://127.0.0.1:{free_port()}", on_store_error=None)
    with pytest.raises(StoreError, match="ratekeeper service"):
        limiter.hit("k", "1/hour")
    limiter.close()


def test_the_async_client_decides_the_same(service: str) -> None:
    async def main() -> list[int]:
        limiter = AsyncRemoteLimiter(service, timeout=5)
        found = [(await limiter.hit("async:a", "2/hour")).remaining for _ in range(3)]
        found.append((await limiter.peek("async:a", "2/hour")).remaining)
        await limiter.close()
        return found

    assert asyncio.run(main()) == [1, 0, 0, 0]


@pytest.fixture(scope="module")
def two_workers_on_redis(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[str]:
    served = Served(
        tmp_path_factory.mktemp("workers"), "--workers", "2", "--store", redis_server.url
    )
    try:
        yield served.url
    finally:
        served.stop()


@pytest.mark.parametrize("deployment", ["service", "two_workers_on_redis"])
def test_an_idle_connection_is_not_kept_until_the_service_closes_it(
    deployment: str, request: pytest.FixtureRequest
) -> None:
    """The service closes a connection idle for 5 s; a call sent on it as it closes fails. So
    the clients reuse a connection while it has been idle less than ``KEEPALIVE_EXPIRY`` (2 s),
    and open a new one after: the connections a proxy before the service accepts show it."""
    service = request.getfixturevalue(deployment)
    port = int(service.rsplit(":", 1)[1])
    with FaultProxy(port) as proxy:
        url = f"http://127.0.0.1:{proxy.port}"
        limiter = RemoteLimiter(url, timeout=5, on_store_error=None)
        remaining = [limiter.hit("idle:sync", "9/hour").remaining for _ in range(2)]
        time.sleep(KEEPALIVE_EXPIRY + 0.5)
        remaining.append(limiter.hit("idle:sync", "9/hour").remaining)
        limiter.close()
        assert (remaining, proxy.stats().accepted) == ([8, 7, 6], 2)

        async def main() -> list[int]:
            limiter = AsyncRemoteLimiter(url, timeout=5, on_store_error=None)
            found = [(await limiter.hit("idle:async", "9/hour")).remaining for _ in range(2)]
            await asyncio.sleep(KEEPALIVE_EXPIRY + 0.5)
            found.append((await limiter.hit("idle:async", "9/hour")).remaining)
            await limiter.close()
            return found

        assert (asyncio.run(main()), proxy.stats().accepted) == ([8, 7, 6], 4)


def test_reset_is_an_admin_call(service: str) -> None:
    limit = Limit(1, 3600)
    plain = RemoteLimiter(service, timeout=5)
    assert plain.hit("client:reset", limit).allowed
    with pytest.raises(StoreConfigError, match="401"):
        plain.reset("client:reset", limit)
    assert not plain.hit("client:reset", limit).allowed  # nothing was forgotten
    plain.close()

    async def run() -> bool:
        limiter = AsyncRemoteLimiter(service, timeout=5, admin_token=TOKEN)
        await limiter.reset("client:reset", limit)
        allowed = (await limiter.hit("client:reset", limit)).allowed
        await limiter.close()
        return allowed

    assert asyncio.run(run())
    with pytest.raises(StoreConfigError, match="admin_token"):
        RemoteLimiter(service, admin_token="")


@pytest.mark.parametrize(
    "url", ["http://", "http://:8080", "https:///v1", "http://127.0.0.1:99999"]
)
def test_a_url_without_a_host_or_port_is_refused_when_made(url: str) -> None:
    with pytest.raises(StoreConfigError, match="URL"):
        RemoteLimiter(url)


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, 1e308, 3600])
def test_a_timeout_that_is_not_positive_seconds_is_refused_when_made(timeout: float) -> None:
    for make in (RemoteLimiter, AsyncRemoteLimiter):
        with pytest.raises(StoreConfigError, match="timeout"):
            make("http://127.0.0.1:8080", timeout=timeout)


@pytest.mark.parametrize("role", ["app", "auth"])  # 200 with JSON of its own; 200, no body
def test_a_server_that_is_not_ratekeeper_is_a_misconfiguration(tmp_path: Path, role: str) -> None:
    server = UpstreamServer(tmp_path, role)
    try:
        for policy in ("allow", None):
            limiter = RemoteLimiter(server.url, timeout=5, on_store_error=policy, admin_token=TOKEN)
            with pytest.raises(StoreConfigError, match="not a ratekeeper service"):
                limiter.hit("k", "1/hour")
            with pytest.raises(StoreConfigError, match="not a ratekeeper service"):
                limiter.reset("k", "1/hour")
            limiter.close()

        async def main() -> None:
            limiter = AsyncRemoteLimiter(server.url, timeout=5)
            try:
                await limiter.hit("k", "1/hour")
            finally:
                await limiter.close()

        with pytest.raises(StoreConfigError, match="not a ratekeeper service"):
            asyncio.run(main())
    finally:
        server.stop()
