"""Refunds through the whole Redis stack that ``open_store`` builds, on a real redis-server:
``Resilient(Leasing(OverLimitCache(RedisStore)))``, and ``Deferred`` under it for a cluster.

An exact limit's refund gives its units back in Redis; a leased limit's goes back into the
process's live slice (granted again without the store, and counted by the store only as what
was granted less what was refunded once the slice is given back), never into a slice taken
after the hit was granted; a refund while Redis is down is logged and dropped, never raised;
and a denial the over-limit cache holds is forgotten by a refund, so that the unit it frees
admits the next hit.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import AsyncLimiter, Limit, Limiter, open_async_store, open_store
from ratekeeper.stores.wrappers import leasing, policy, resilience
from ratekeeper.stores.wrappers.overlimit import AsyncOverLimitCache, OverLimitCache
from tests.servers import RedisCluster, RedisServer

DAY = 86_400
EXACT = Limit(5, DAY)
LEASED = Limit(100, DAY, sync="leased")
#: The whole stack, with slices that last long enough never to end inside a test on a loaded
#: machine.
LONG = {"lease_ttl": 600.0, "lease_horizon": 0.05, "over_limit_cache": True}


def prefix() -> str:
    return f"refund-{uuid.uuid4().hex[:8]}"


def counted(url: str, where: str, key: str, limit: Limit) -> int:
    """What Redis has counted for ``key`` under ``limit`` (read as an exact limit)."""
    checker = Limiter(open_store(url, prefix=where, on_store_error=None))
    exact = Limit(limit.amount, limit.period, limit.algorithm)
    try:
        return limit.amount - checker.peek(key, exact).remaining
    finally:
        checker.close()


def admitted(limiter: Limiter, key: str, limit: Limit, hits: int) -> list[tuple[bool, float]]:
    return [
        (decision.allowed, at)
        for decision, at in (limiter.admit([(key, limit)])[0] for _ in range(hits))
    ]


def stack(limiter: Limiter | AsyncLimiter) -> tuple[Any, Any, Any]:
    """The wrappers ``open_store`` built: the failure policy, the leases, the denial cache."""
    resilient = limiter.store
    assert isinstance(resilient, resilience.Resilient | resilience.AsyncResilient)
    leases = resilient.store
    assert isinstance(leases, leasing.Leasing | leasing.AsyncLeasing)
    cache = leases.store
    assert isinstance(cache, OverLimitCache | AsyncOverLimitCache)
    return resilient, leases, cache


# -- exact limits ---------------------------------------------------------------------------


def test_an_exact_refund_gives_the_units_back_in_redis(redis_server: RedisServer) -> None:
    where = prefix()
    limiter = Limiter(open_store(redis_server.url, prefix=where, over_limit_cache=True))
    stack(limiter)
    hits = admitted(limiter, "k", EXACT, 5)
    assert [ok for ok, _ in hits] == [True] * 5
    limiter.refund("k", EXACT, 1, hits[0][1])
    limiter.refund("k", EXACT, 1, hits[4][1])
    assert counted(redis_server.url, where, "k", EXACT) == 3
    assert [ok for ok, _ in admitted(limiter, "k", EXACT, 3)] == [True, True, False]
    limiter.close()


def test_an_exact_refund_through_a_clusters_deferred_store(redis_cluster: RedisCluster) -> None:
    where = prefix()
    limiter = Limiter(open_store(redis_cluster.url, prefix=where, over_limit_cache=True))
    hits = admitted(limiter, "k", EXACT, 6)
    assert [ok for ok, _ in hits] == [True] * 5 + [False]
    limiter.refund("k", EXACT, 2, hits[1][1])
    assert counted(redis_cluster.url, where, "k", EXACT) == 3
    assert [ok for ok, _ in admitted(limiter, "k", EXACT, 3)] == [True, True, False]
    limiter.close()


def test_a_refund_clears_the_denial_the_cache_holds(redis_server: RedisServer) -> None:
    """The sixth hit is refused and its denial cached for the rest of the day: without a
    round trip, every hit after it would be refused by the cache. A refund frees one unit in
    Redis and forgets the denial, so the next hit goes to Redis and is admitted; the one
    after is refused again (and cached again)."""
    where = prefix()
    limiter = Limiter(open_store(redis_server.url, prefix=where, over_limit_cache=True))
    _, _, cache = stack(limiter)
    hits = admitted(limiter, "k", EXACT, 6)
    assert [ok for ok, _ in hits] == [True] * 5 + [False]
    assert not limiter.hit("k", EXACT).allowed
    assert cache.denials.answered == 1  # the seventh hit never reached Redis
    limiter.refund("k", EXACT, 1, hits[2][1])
    assert (EXACT.id, "k") not in cache.denials.entries
    assert [ok for ok, _ in admitted(limiter, "k", EXACT, 2)] == [True, False]
    assert cache.denials.answered == 1
    assert (EXACT.id, "k") in cache.denials.entries
    assert counted(redis_server.url, where, "k", EXACT) == 5
    limiter.close()


def test_a_refund_redis_cannot_take_keeps_the_denial_cached(tmp_path: Path) -> None:
    """Nothing was freed: the cache keeps answering the key's hits itself."""
    server = RedisServer(tmp_path)
    try:
        limiter = Limiter(
            open_store(server.url, prefix=prefix(), over_limit_cache=True, timeout=0.5)
        )
        _, _, cache = stack(limiter)
        hits = admitted(limiter, "k", EXACT, 6)
        server.kill()
        limiter.refund("k", EXACT, 1, hits[0][1])
        assert (EXACT.id, "k") in cache.denials.entries
        decision = limiter.hit("k", EXACT)
        assert not decision.allowed and not decision.degraded  # the cache's, not the policy's
        limiter.close()
    finally:
        server.stop()


def test_a_refund_while_redis_is_down_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = RedisServer(tmp_path)
    try:
        where = prefix()
        limiter = Limiter(open_store(server.url, prefix=where, timeout=0.5))
        hits = admitted(limiter, "k", EXACT, 3)
        server.kill()
        policy.unrefunded.clear(policy.UNREFUNDED)
        caplog.set_level(logging.WARNING, logger="ratekeeper.store")
        limiter.refund("k", EXACT, 1, hits[0][1])  # no exception
        assert [r.getMessage() for r in caplog.records] == [
            "could not refund 1 unit of 'k' (they stay counted): the store failed"
        ]
        # The failure counts toward the breaker like any other.
        assert limiter.store.breaker.failures == 1
        limiter.close()
    finally:
        server.stop()


# -- leased limits --------------------------------------------------------------------------


def test_a_leased_refund_goes_back_into_the_slice(redis_server: RedisServer) -> None:
    """Thirty hits, every third refunded as soon as it is admitted: each refund lands in the
    slice its hit came from, the hit after a refund is granted from the slice (no exchange),
    and once close() gives the slices back Redis counts the hits less the refunds."""
    where = prefix()
    limiter = Limiter(open_store(redis_server.url, prefix=where, **LONG))
    _, leases, _ = stack(limiter)
    hits = refunds = 0
    for n in range(30):
        ((decision, at),) = limiter.admit([("k", LEASED)])
        assert decision.allowed and decision.granted == 1
        hits += 1
        if n % 3 == 0:
            piece = leases.slices[(LEASED.id, "k")]
            left, exchanges = piece.left, leases.exchanges
            limiter.refund("k", LEASED, 1, at)
            refunds += 1
            assert piece.left == left + 1
            assert limiter.hit("k", LEASED).allowed  # from the slice: no exchange
            hits += 1
            assert leases.exchanges == exchanges
    assert (hits, refunds) == (40, 10)
    assert leases.granted == hits - refunds
    limiter.close()
    assert counted(redis_server.url, where, "k", LEASED) == hits - refunds


def test_a_keys_first_hit_refunded_leaves_nothing_counted(redis_server: RedisServer) -> None:
    """A key's first hit is granted from the slice its own exchange took: its refund goes
    back into that slice."""
    where = prefix()
    limiter = Limiter(open_store(redis_server.url, prefix=where, **LONG))
    _, leases, _ = stack(limiter)
    ((decision, at),) = limiter.admit([("first", LEASED)])
    assert decision.allowed and leases.exchanges == 1
    limiter.refund("first", LEASED, 1, at)
    assert leases.slices[(LEASED.id, "first")].left == 1
    limiter.close()
    assert counted(redis_server.url, where, "first", LEASED) == 0


def test_a_refund_whose_slice_was_exchanged_since_gives_nothing(
    redis_server: RedisServer,
) -> None:
    """The units of a slice exchanged since were settled with the store at the exchange: a
    refund of one of them does not go into the new slice (which would give it twice, or give
    a unit of a window gone to the current one)."""
    where = prefix()
    limiter = Limiter(open_store(redis_server.url, prefix=where, **LONG))
    _, leases, _ = stack(limiter)
    ((first, at),) = limiter.admit([("k", LEASED)])  # the key's first slice: this hit's unit
    assert first.allowed and leases.exchanges == 1
    hits = 1
    while leases.exchanges == 1:  # the next hit takes a new slice
        assert limiter.hit("k", LEASED).allowed
        hits += 1
    piece = leases.slices[(LEASED.id, "k")]
    left = piece.left
    limiter.refund("k", LEASED, 1, at)
    assert piece.left == left and leases.granted == hits
    limiter.close()
    assert counted(redis_server.url, where, "k", LEASED) == hits


def test_a_leased_refund_while_redis_is_down_stays_local(tmp_path: Path) -> None:
    """A leased refund needs no round trip: with Redis gone it still lands in the slice, and
    the slice grants it again."""
    server = RedisServer(tmp_path)
    try:
        limiter = Limiter(open_store(server.url, prefix=prefix(), timeout=0.5, **LONG))
        _, leases, _ = stack(limiter)
        ((decision, at),) = limiter.admit([("k", LEASED)])
        assert decision.allowed
        server.kill()
        limiter.refund("k", LEASED, 1, at)
        assert leases.slices[(LEASED.id, "k")].left == 1
        again = limiter.hit("k", LEASED)
        assert again.allowed and not again.degraded
        limiter.close()  # the give-back fails: logged, never raised
    finally:
        server.stop()


def test_a_batch_of_leased_and_exact_limits_is_admitted_each_on_its_clock(
    redis_server: RedisServer,
) -> None:
    """A request under an exact and a leased limit (a web route's two limits charged by
    outcome): the exact hit is timed by Redis and refunded there, the leased one by the slice's
    clock and refunded into its slice; all or nothing, a refusal on either side takes nothing.
    """
    where = prefix()
    limiter = Limiter(open_store(redis_server.url, prefix=where, **LONG))
    _, leases, _ = stack(limiter)
    (exact, exact_at), (lease, lease_at) = limiter.admit([("e", EXACT), ("l", LEASED)])
    assert exact.allowed and lease.allowed and leases.exchanges == 1
    limiter.refund("e", EXACT, 1, exact_at)
    limiter.refund("l", LEASED, 1, lease_at)
    assert leases.slices[(LEASED.id, "l")].left == 1
    for _ in range(EXACT.amount):
        limiter.hit("e", EXACT)
    refused = limiter.admit([("l", LEASED), ("e", EXACT)], all_or_nothing=True)
    assert [one.decision.allowed for one in refused] == [True, False]
    assert [one.decision.granted for one in refused] == [0, 0]
    assert leases.slices[(LEASED.id, "l")].left == 1  # the leased unit went back
    limiter.close()
    assert counted(redis_server.url, where, "e", EXACT) == EXACT.amount
    assert counted(redis_server.url, where, "l", LEASED) == 0


# -- the asyncio twins ----------------------------------------------------------------------


def test_async_refunds_through_the_stack(redis_server: RedisServer) -> None:
    where = prefix()

    async def run() -> tuple[int, int]:
        limiter = AsyncLimiter(open_async_store(redis_server.url, prefix=where, **LONG))
        _, leases, cache = stack(limiter)
        exact = [await limiter.admit([("e", EXACT)]) for _ in range(6)]
        assert [one[0].decision.allowed for one in exact] == [True] * 5 + [False]
        assert (EXACT.id, "e") in cache.denials.entries
        await limiter.refund("e", EXACT, 1, exact[0][0].at)
        assert (EXACT.id, "e") not in cache.denials.entries
        assert (await limiter.hit("e", EXACT)).allowed
        assert not (await limiter.hit("e", EXACT)).allowed

        ((first, at),) = await limiter.admit([("l", LEASED)])
        assert first.allowed and leases.exchanges == 1
        await limiter.refund("l", LEASED, 1, at)
        assert leases.slices[(LEASED.id, "l")].left == 1
        for _ in range(9):
            assert (await limiter.hit("l", LEASED)).allowed
        mixed = await limiter.admit([("m", EXACT), ("l", LEASED)])
        assert all(one.decision.allowed for one in mixed)
        await limiter.refund("m", EXACT, 1, mixed[0].at)
        await limiter.refund("l", LEASED, 1, mixed[1].at)
        exchanges = leases.exchanges
        await limiter.close()
        return exchanges, leases.granted

    exchanges, granted = asyncio.run(run())
    assert granted == 9 and exchanges >= 1
    assert counted(redis_server.url, where, "m", EXACT) == 0
    assert counted(redis_server.url, where, "e", EXACT) == 5
    assert counted(redis_server.url, where, "l", LEASED) == 9


def test_an_async_refund_while_redis_is_down_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = RedisServer(tmp_path)
    try:

        async def run() -> int:
            limiter = AsyncLimiter(open_async_store(server.url, prefix=prefix(), timeout=0.5))
            ((_, at),) = await limiter.admit([("k", EXACT)])
            server.kill()
            await limiter.refund("k", EXACT, 1, at)  # no exception
            failures: int = limiter.store.breaker.failures
            await limiter.close()
            return failures

        policy.unrefunded.clear(policy.UNREFUNDED)
        caplog.set_level(logging.WARNING, logger="ratekeeper.store")
        assert asyncio.run(run()) == 1
        assert [r.getMessage() for r in caplog.records] == [
            "could not refund 1 unit of 'k' (they stay counted): the store failed"
        ]
    finally:
        server.stop()
