"""The Limiter API: hit, peek, reset, hit_many, acquire, the decorator, concurrency slots."""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest

from ratekeeper import (
    InvalidInputError,
    InvalidLimitError,
    Limit,
    Limiter,
    MemoryStore,
    RateLimitExceeded,
)
from ratekeeper import limiter as limiter_module
from ratekeeper.testing import FakeClock


@pytest.fixture
def limiter(clock: FakeClock) -> Limiter:
    return Limiter(MemoryStore(clock=clock), sleep=clock.sleep)


def test_hit_takes_a_limit_or_a_rate_string(limiter: Limiter) -> None:
    assert [limiter.hit("k", "2/minute").allowed for _ in range(3)] == [True, True, False]
    assert [limiter.hit("j", Limit(2, 60)).allowed for _ in range(3)] == [True, True, False]


def test_rate_strings_use_the_limiter_algorithm(clock: FakeClock) -> None:
    limiter = Limiter(MemoryStore(clock=clock), algorithm="gcra")
    decisions = [limiter.hit("k", "2/minute") for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]
    assert decisions[-1].retry_after == pytest.approx(30.0)  # GCRA frees one slot per 30 s


def test_hit_rejects_a_string_with_several_limits(limiter: Limiter) -> None:
    with pytest.raises(ValueError, match="holds 2 limits; use hit_many"):
        limiter.hit("k", "1/second; 5/minute")


def test_peek_consumes_nothing(limiter: Limiter) -> None:
    limiter.hit("k", "5/minute", cost=2)
    assert limiter.peek("k", "5/minute").remaining == 3
    assert limiter.peek("k", "5/minute").remaining == 3


def test_reset(limiter: Limiter) -> None:
    limiter.hit("k", "1/minute")
    limiter.reset("k", "1/minute")
    assert limiter.hit("k", "1/minute").allowed


def test_hit_many_expands_multi_limit_strings(limiter: Limiter) -> None:
    decisions = limiter.hit_many([("k", "1000/day; 2/minute")])
    assert [(d.limit, d.remaining) for d in decisions] == [(1000, 999), (2, 1)]


def test_hit_many_is_all_or_nothing_by_default(limiter: Limiter) -> None:
    hits = [("ip:1", "3/minute"), ("user:al", "1/minute", 1)]
    assert all(d.allowed for d in limiter.hit_many(hits))
    assert not all(d.allowed for d in limiter.hit_many(hits))
    assert limiter.peek("ip:1", "3/minute").remaining == 2


def test_acquire_paces_by_sleeping_retry_after(limiter: Limiter, clock: FakeClock) -> None:
    limit = Limit(2, 10, "gcra", burst=1)  # one hit every 5 s
    start = clock()
    for _ in range(4):
        assert limiter.acquire("out", limit).allowed
    assert clock() - start == pytest.approx(15.0)
    assert clock.slept == pytest.approx([5.0, 5.0, 5.0])


def test_acquire_sleeps_the_shaper_delay(limiter: Limiter, clock: FakeClock) -> None:
    limit = Limit(1, 2, "leaky_shaper", burst=3)
    delays = [limiter.acquire("q", limit).delay for _ in range(3)]
    assert delays == pytest.approx([0.0, 2.0, 2.0])  # the clock moved while we slept
    assert clock.slept == pytest.approx([2.0, 2.0])


def test_acquire_times_out_without_waiting_in_vain(limiter: Limiter, clock: FakeClock) -> None:
    limit = Limit(1, 60)
    limiter.acquire("k", limit)
    start = clock()
    with pytest.raises(RateLimitExceeded) as refused:
        limiter.acquire("k", limit, timeout=5)
    assert clock() == start  # it did not sleep 5 s for nothing
    assert refused.value.retry_after > 5
    assert refused.value.key == "k"


def test_acquire_refuses_a_cost_above_capacity_at_once(limiter: Limiter) -> None:
    with pytest.raises(RateLimitExceeded):
        limiter.acquire("k", Limit(3, 60, "token_bucket"), cost=4)


def test_decorator_raises_with_retry_after(limiter: Limiter, clock: FakeClock) -> None:
    calls = []

    @limiter.limit("2/minute")
    def work(x: int) -> int:
        calls.append(x)
        return x * 2

    assert work(1) == 2
    assert work(2) == 4
    with pytest.raises(RateLimitExceeded) as refused:
        work(3)
    assert calls == [1, 2]
    window_end = clock() - clock() % 60 + 60
    assert refused.value.retry_after == pytest.approx(window_end - clock())
    assert work.__name__ == "work"


def test_decorator_key_function(limiter: Limiter) -> None:
    @limiter.limit("1/minute", key=lambda user: f"user:{user}")
    def fetch(user: str) -> str:
        return user

    assert fetch("a") == "a"
    assert fetch("b") == "b"
    with pytest.raises(RateLimitExceeded, match="'user:a'"):
        fetch("a")


def test_a_refusal_survives_pickling_with_its_decision(limiter: Limiter) -> None:
    @limiter.limit("1/minute", key="k")
    def work() -> None:
        return None

    work()
    with pytest.raises(RateLimitExceeded) as refused:
        work()
    copy = pickle.loads(pickle.dumps(refused.value))
    assert copy.decision == refused.value.decision
    assert copy.key == "k"
    assert copy.retry_after == refused.value.retry_after
    assert (
        str(copy)
        == str(refused.value)
        == (f"rate limit of 1 exceeded for 'k'; retry after {copy.retry_after:.3f}s")
    )


def test_decorator_with_several_limits_consumes_nothing_when_refused(limiter: Limiter) -> None:
    @limiter.limit("3/hour; 1/minute", key="k")
    def ping() -> None:
        return None

    ping()
    with pytest.raises(RateLimitExceeded):
        ping()
    assert limiter.peek("k", "3/hour").remaining == 2


def test_concurrency_slots(limiter: Limiter) -> None:
    limit = Limit(2, 30, "concurrency")
    with limiter.concurrency("jobs", limit), limiter.concurrency("jobs", limit):
        with pytest.raises(RateLimitExceeded), limiter.concurrency("jobs", limit):
            pass
        assert limiter.peek("jobs", limit).remaining == 0
    assert limiter.peek("jobs", limit).remaining == 2


def test_concurrency_slot_released_on_error(limiter: Limiter) -> None:
    limit = Limit(1, 30, "concurrency")
    with pytest.raises(KeyError), limiter.concurrency("jobs", limit):
        raise KeyError("boom")
    assert limiter.peek("jobs", limit).remaining == 1


def test_concurrency_waits_for_an_expiring_slot(limiter: Limiter, clock: FakeClock) -> None:
    limit = Limit(1, 30, "concurrency")
    limiter.hit("jobs", limit)  # a holder that crashed and never released
    with limiter.concurrency("jobs", limit, timeout=60) as decision:
        assert decision.allowed
    # It looks every few milliseconds (a release may come at any time), and not past expiry.
    assert max(clock.slept) == limiter_module.POLL[1]
    assert sum(clock.slept) == pytest.approx(30.0)


def test_concurrency_needs_a_concurrency_limit(limiter: Limiter) -> None:
    with (
        pytest.raises(ValueError, match="needs a concurrency limit, not fixed_window"),
        limiter.concurrency("k", Limit(1, 60)),
    ):
        pass


def test_concurrency_takes_a_rate_string_as_slots_per_lease_ttl(limiter: Limiter) -> None:
    with limiter.concurrency("k", "1/minute") as decision:
        assert (decision.limit, decision.remaining, decision.reset_after) == (1, 0, 60.0)


def test_store_by_url() -> None:
    assert isinstance(Limiter("memory://").store, MemoryStore)
    with pytest.raises(ValueError, match="unknown store URL 'nope://x'"):
        Limiter("nope://x")


# --- A careless caller: every mistake is an error of ratekeeper's hierarchy, nothing counted ---


def test_a_limit_a_call_cannot_take_is_an_invalid_limit(limiter: Limiter) -> None:
    for call in (
        lambda: limiter.hit("k", "1/second; 5/minute"),
        lambda: limiter.peek("k", "1/second; 5/minute"),
        lambda: limiter.acquire("k", "1/second; 5/minute"),
        lambda: limiter.concurrency("k", "1/second; 5/minute").__enter__(),
    ):
        with pytest.raises(InvalidLimitError, match="'1/second; 5/minute' holds 2 limits"):
            call()
    with pytest.raises(InvalidLimitError, match="needs a concurrency limit, not fixed_window"):
        limiter.concurrency("k", Limit(1, 60)).__enter__()
    with pytest.raises(InvalidLimitError, match="unknown algorithm 'nope'"):
        Limiter(algorithm="nope")
    assert len(limiter.store) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [-1, math.nan, "1", True])
def test_a_bad_timeout_is_an_invalid_input(limiter: Limiter, timeout: Any) -> None:
    with pytest.raises(
        InvalidInputError, match=f"timeout must be None or seconds >= 0, not {timeout!r}"
    ):
        limiter.acquire("k", "1/minute", timeout=timeout)
    with pytest.raises(InvalidInputError, match="timeout must be None or seconds >= 0"):
        limiter.concurrency("k", "1/minute", timeout=timeout).__enter__()
    assert len(limiter.store) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize(("key", "shown"), [(5, "5"), ("", "''"), (b"k", "b'k'")])
def test_a_decorator_key_that_is_no_key_raises_when_the_function_is_decorated(
    limiter: Limiter, key: Any, shown: str
) -> None:
    with pytest.raises(InvalidInputError, match=f"key must be a non-empty string, not {shown}"):
        limiter.limit("1/minute", key=key)(lambda: None)
    assert len(limiter.store) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("hits", [None, 5])
def test_hit_many_of_no_list_is_an_invalid_input(limiter: Limiter, hits: Any) -> None:
    with pytest.raises(InvalidInputError, match=f"hit_many takes a list of hits, not {hits!r}"):
        limiter.hit_many(hits)
