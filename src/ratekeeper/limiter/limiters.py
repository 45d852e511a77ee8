"""``Limiter`` and ``AsyncLimiter``: the Python API over a request store.

The two classes are twins kept line-aligned: only I/O differs (``await`` on the store, and
``asyncio.sleep`` instead of ``time.sleep``). Both are context managers that close their store
on exit; ``close()`` may be called again, and does nothing more. What they share free of I/O
(reading limits, expanding hits, the arithmetic of waiting) is in ``shared``; the functions
their ``limit`` decorators return, twins too, in ``decorators``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ParamSpec, TypeVar

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.closing import AsyncClosing, Closing
from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import RateLimitExceeded
from ratekeeper.core.inputs import check_cost
from ratekeeper.core.limits import Limit, algorithm_of, charged
from ratekeeper.limiter.decorators import (
    counted,
    counted_async,
    counted_by_outcome,
    counted_by_outcome_async,
)
from ratekeeper.limiter.shared import (
    POLL,
    HitLike,
    KeyLike,
    LimitLike,
    Rates,
    check_charging,
    check_timeout,
    concurrency_limit,
    expand,
    give_up,
    key_function,
    limits_of,
    pause_after,
    single,
)
from ratekeeper.stores import Admitted, AsyncStore, Store, open_async_store, open_store
from ratekeeper.stores.memory import AsyncMemoryStore, Clock, MemoryStore

P = ParamSpec("P")
R = TypeVar("R")


class Limiter(Closing):
    """Decide whether hits may go through, against a request store.

    ``store`` is a store object or URL (default: a new in-memory store). ``algorithm`` is used
    for limits given as rate strings. ``sleep`` is how ``acquire`` waits (tests pass a fake
    clock's ``sleep``). Example::

        limiter = Limiter()
        if limiter.hit(f"user:{user_id}", "10/minute").allowed:
            ...
    """

    #: ``hit_many`` decides its hits in one atomic store call (``ManyDecider``).
    atomic_hit_many = True

    def __init__(
        self,
        store: Store | str | None = None,
        *,
        algorithm: Algorithm | str = Algorithm.FIXED_WINDOW,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if store is None or isinstance(store, str):
            options: dict[str, Any] = {} if clock is None else {"clock": clock}
            store = MemoryStore(**options) if store is None else open_store(store, **options)
        self.store = store
        self.algorithm = algorithm_of(algorithm)
        self._sleep = sleep
        self._apply = store.apply
        self._rates = Rates(self.algorithm)

    def hit(self, key: str, limit: LimitLike, cost: int = 1) -> Decision:
        """Count a hit of ``cost`` on ``key``; the decision says whether it may go through."""
        if limit.__class__ is not Limit:
            limit = self._rates[limit] if limit.__class__ is str else single(limit, self.algorithm)
        return self._apply(key, limit, cost, None)

    def charge(self, key: str, limit: LimitLike, cost: int = 1) -> Decision:
        """Count ``cost`` on ``key`` for work already done, even past ``limit``.

        The charge is counted whether it fits or not, on the counters ``hit`` uses for the same
        key and limit (as ``limit`` with ``debt=True`` counts). What passes the limit is a debt:
        later hits, a look (``peek``) included, are refused until time pays it back. The
        decision is allowed iff the charge fitted; its ``granted`` is ``cost`` either way.
        A limit that cannot hold a debt (``sliding_log``, ``concurrency``, a ``partial`` token
        bucket) raises ``InvalidLimitError``. Example, tokens counted once a reply is done::

            if limiter.peek(user, "10000/hour").allowed:
                reply = model.complete(prompt)
                limiter.charge(user, "10000/hour", reply.tokens)
        """
        if limit.__class__ is not Limit:
            limit = self._rates[limit] if limit.__class__ is str else single(limit, self.algorithm)
        return self._apply(key, charged(limit), cost, None)

    def peek(self, key: str, limit: LimitLike) -> Decision:
        """Report ``key``'s state under ``limit`` without consuming anything."""
        if limit.__class__ is not Limit:
            limit = self._rates[limit] if limit.__class__ is str else single(limit, self.algorithm)
        return self._apply(key, limit, 0, None)

    def reset(self, key: str, limit: LimitLike) -> None:
        """Forget what ``limit`` counted for ``key``."""
        for one in limits_of(limit, self.algorithm):
            self.store.reset(key, one)

    def close(self) -> None:
        """Release the store's connections."""
        self.store.close()

    def hit_many(self, hits: Iterable[HitLike], *, all_or_nothing: bool = True) -> list[Decision]:
        """Count several hits at once, e.g. ``[(ip, "5/minute"), (user, "10/hour")]``.

        A rate string holding several limits contributes one decision per limit. With
        ``all_or_nothing`` (the default) nothing is consumed unless every limit allows.
        """
        batch = expand(hits, self.algorithm)
        return self.store.apply_many(batch, all_or_nothing=all_or_nothing)

    def admit(self, hits: Iterable[HitLike], *, all_or_nothing: bool = True) -> list[Admitted]:
        """``hit_many``, each decision with the time the store took it at (``Admitted``), for
        a ``refund`` of what it granted should the work it admitted not count after all.
        Example, a login charged only when it fails (a sliding log: no window edge to time)::

            guesses = Limit(5, "15 minutes", "sliding_log")
            (decision, at), = limiter.admit([(user, guesses)])
            if decision.allowed and check_password(user, password):
                limiter.refund(user, guesses, decision.granted, at)
        """
        batch = expand(hits, self.algorithm)
        return self.store.admit(batch, all_or_nothing=all_or_nothing)

    def refund(self, key: str, limit: LimitLike, cost: int, at: float) -> None:
        """Give back ``cost`` units ``key`` was granted under ``limit`` (one limit) at ``at``,
        an ``Admitted``'s time: the store takes them back from the window or bucket that
        counted them, and gives nothing once that window has turned (``Store.refund``)."""
        self.store.refund(key, single(limit, self.algorithm), cost, at)

    def acquire(
        self, key: str, limit: LimitLike, cost: int = 1, timeout: float | None = None
    ) -> Decision:
        """Wait until a hit is allowed, then return its decision.

        A refused hit is retried after its ``retry_after``, and an admitted shaper hit sleeps
        its ``delay``. How evenly waiting callers then pass depends on the algorithm: ``gcra``,
        ``leaky_bucket``, ``leaky_shaper`` and ``token_bucket`` space them out; a window
        (``fixed_window`` and the sliding windows) lets them through in a burst when it frees
        up. A concurrency slot is looked for every few milliseconds (``POLL``), so a waiter
        gets it soon after a holder releases it. Raises ``RateLimitExceeded`` as soon as it is
        clear the hit cannot be allowed within ``timeout`` seconds (``None`` waits as long as
        it takes; a cost above the limit's capacity never fits).
        """
        limit = single(limit, self.algorithm)
        cost, timeout = check_cost(cost), check_timeout(timeout)
        waited, poll = 0.0, POLL[0]
        while True:
            decision = self.store.apply(key, limit, cost)
            if decision.allowed:
                if decision.delay > 0.0:
                    self._sleep(decision.delay)
                return decision
            if give_up(decision, limit, cost, waited, timeout):
                raise RateLimitExceeded(decision, key)
            pause = pause_after(decision, limit, poll, waited, timeout)
            self._sleep(pause)
            waited += pause
            poll = min(poll * 2, POLL[1])

    def limit(
        self,
        limit: LimitLike,
        *,
        key: KeyLike = None,
        cost: int = 1,
        charge_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
        charge_when: Callable[[Any], bool] | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a function so each call counts as a hit.

        ``key`` is a fixed string or a function of the call's arguments; by default all calls
        to the function share one key. A refused call raises ``RateLimitExceeded`` carrying
        ``retry_after``. ``limit`` may hold several limits (``"100/day; 10/minute"``): a call
        passes only if all allow, and a refused call consumes nothing. A bad ``limit``, fixed
        ``key``, ``cost`` or charging option raises here, when the function is decorated.

        ``charge_on`` (exception classes) and ``charge_when`` (a test of the result) charge a
        call by its outcome: it is counted before it runs, and refused past the limit as any
        call, then given back (``refund``) unless it raised one of ``charge_on`` or returned
        a result ``charge_when`` holds true; so calls at once never pass the limit together.
        A give-back the store fails is logged, never raised. Example, failed logins only, in
        any 15 minutes (a sliding log: a fixed window would let 10 through around its edge)::

            @limiter.limit(Limit(5, "15 minutes", "sliding_log"),
                           key=lambda user, password: user, charge_on=WrongPassword)
            def login(user: str, password: str) -> Session: ...

        An ``async def`` is refused with ``TypeError``: this limiter's store calls would block
        its event loop. Decorate it with ``AsyncLimiter.limit``, over the same in-memory state
        if need be: ``AsyncLimiter(AsyncMemoryStore(limiter.store))``.
        """
        limits = limits_of(limit, self.algorithm)
        cost = check_cost(cost)
        charges = check_charging(charge_on, charge_when)

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(function):
                raise TypeError(
                    "Limiter.limit decorates sync functions, and its store calls would block the "
                    "event loop of an async one; use AsyncLimiter.limit"
                )
            key_of = key_function(key, function)
            if charges is not None:
                return counted_by_outcome(
                    self.store, function, key_of, limits, cost, charges=charges
                )
            return counted(self.store, function, key_of, limits, cost)

        return decorate

    @contextmanager
    def concurrency(
        self, key: str, limit: LimitLike, timeout: float | None = 0.0
    ) -> Iterator[Decision]:
        """Hold one slot of a concurrency limit for the ``with`` block.

        Waits up to ``timeout`` seconds for a slot (0, the default, does not wait; ``None``
        waits as long as it takes) and raises ``RateLimitExceeded`` if none frees up; a waiter
        gets a slot within a few milliseconds of its release, from any process sharing the
        store. The slot is released when the block exits; a holder that dies without releasing
        loses its slot once the limit's period has passed (the slot TTL).
        """
        limit = concurrency_limit(limit)
        decision = self.acquire(key, limit, 1, timeout)
        try:
            yield decision
        finally:
            self.store.release(key, limit, 1)


class AsyncLimiter(AsyncClosing):
    """The asyncio twin of ``Limiter``: the same methods, awaitable.

    ``store`` is an async store object or URL (default: a new in-memory store). Example::

        limiter = AsyncLimiter()
        decision = await limiter.hit(f"user:{user_id}", "10/minute")
    """

    #: ``hit_many`` decides its hits in one atomic store call (``ManyDecider``).
    atomic_hit_many = True

    def __init__(
        self,
        store: AsyncStore | str | None = None,
        *,
        algorithm: Algorithm | str = Algorithm.FIXED_WINDOW,
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if store is None or isinstance(store, str):
            options: dict[str, Any] = {} if clock is None else {"clock": clock}
            store = (
                AsyncMemoryStore(**options) if store is None else open_async_store(store, **options)
            )
        self.store = store
        self.algorithm = algorithm_of(algorithm)
        self._sleep = sleep
        self._apply = store.apply
        self._rates = Rates(self.algorithm)

    async def hit(self, key: str, limit: LimitLike, cost: int = 1) -> Decision:
        """Count a hit of ``cost`` on ``key``; the decision says whether it may go through."""
        if limit.__class__ is not Limit:
            limit = self._rates[limit] if limit.__class__ is str else single(limit, self.algorithm)
        return await self._apply(key, limit, cost, None)

    async def charge(self, key: str, limit: LimitLike, cost: int = 1) -> Decision:
        """Count ``cost`` on ``key`` for work already done, even past ``limit``; see
        ``Limiter.charge``."""
        if limit.__class__ is not Limit:
            limit = self._rates[limit] if limit.__class__ is str else single(limit, self.algorithm)
        return await self._apply(key, charged(limit), cost, None)

    async def peek(self, key: str, limit: LimitLike) -> Decision:
        """Report ``key``'s state under ``limit`` without consuming anything."""
        if limit.__class__ is not Limit:
            limit = self._rates[limit] if limit.__class__ is str else single(limit, self.algorithm)
        return await self._apply(key, limit, 0, None)

    async def reset(self, key: str, limit: LimitLike) -> None:
        """Forget what ``limit`` counted for ``key``."""
        for one in limits_of(limit, self.algorithm):
            await self.store.reset(key, one)

    async def close(self) -> None:
        """Release the store's connections."""
        await self.store.close()

    async def hit_many(
        self, hits: Iterable[HitLike], *, all_or_nothing: bool = True
    ) -> list[Decision]:
        """Count several hits at once; see ``Limiter.hit_many``."""
        batch = expand(hits, self.algorithm)
        return await self.store.apply_many(batch, all_or_nothing=all_or_nothing)

    async def admit(
        self, hits: Iterable[HitLike], *, all_or_nothing: bool = True
    ) -> list[Admitted]:
        """``hit_many``, each decision with its time; see ``Limiter.admit``."""
        batch = expand(hits, self.algorithm)
        return await self.store.admit(batch, all_or_nothing=all_or_nothing)

    async def refund(self, key: str, limit: LimitLike, cost: int, at: float) -> None:
        """Give back ``cost`` units granted at ``at``; see ``Limiter.refund``."""
        await self.store.refund(key, single(limit, self.algorithm), cost, at)

    async def acquire(
        self, key: str, limit: LimitLike, cost: int = 1, timeout: float | None = None
    ) -> Decision:
        """Wait until a hit is allowed, then return its decision; see ``Limiter.acquire``."""
        limit = single(limit, self.algorithm)
        cost, timeout = check_cost(cost), check_timeout(timeout)
        waited, poll = 0.0, POLL[0]
        while True:
            decision = await self.store.apply(key, limit, cost)
            if decision.allowed:
                if decision.delay > 0.0:
                    await self._sleep(decision.delay)
                return decision
            if give_up(decision, limit, cost, waited, timeout):
                raise RateLimitExceeded(decision, key)
            pause = pause_after(decision, limit, poll, waited, timeout)
            await self._sleep(pause)
            waited += pause
            poll = min(poll * 2, POLL[1])

    def limit(
        self,
        limit: LimitLike,
        *,
        key: KeyLike = None,
        cost: int = 1,
        charge_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
        charge_when: Callable[[Any], bool] | None = None,
    ) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]]:
        """Decorate an async function so each call counts as a hit; see ``Limiter.limit``
        (``charge_on`` and ``charge_when`` too).

        The decorated function keeps its type: it is still a coroutine function.
        """
        limits = limits_of(limit, self.algorithm)
        cost = check_cost(cost)
        charges = check_charging(charge_on, charge_when)

        def decorate(
            function: Callable[P, Coroutine[Any, Any, R]],
        ) -> Callable[P, Coroutine[Any, Any, R]]:
            if not inspect.iscoroutinefunction(function):
                raise TypeError("AsyncLimiter.limit decorates async functions; use Limiter.limit")
            key_of = key_function(key, function)
            if charges is not None:
                return counted_by_outcome_async(
                    self.store, function, key_of, limits, cost, charges=charges
                )
            return counted_async(self.store, function, key_of, limits, cost)

        return decorate

    @asynccontextmanager
    async def concurrency(
        self, key: str, limit: LimitLike, timeout: float | None = 0.0
    ) -> AsyncIterator[Decision]:
        """Hold one slot of a concurrency limit for the ``async with`` block."""
        limit = concurrency_limit(limit)
        decision = await self.acquire(key, limit, 1, timeout)
        try:
            yield decision
        finally:
            await self.store.release(key, limit, 1)
