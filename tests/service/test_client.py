"""``RemoteLimiter`` and its asyncio twin against the real ``ratekeeper serve`` process: the
Limiter API decided by the service, and the failure policy while the service is away."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from ratekeeper import (
    InvalidInputError,
    InvalidLimitError,
    Limit,
    RateLimitExceeded,
    StoreConfigError,
    StoreError,
)
from ratekeeper.client import AsyncRemoteLimiter, RemoteLimiter
from tests.servers import free_port
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
