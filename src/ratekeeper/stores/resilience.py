"""What a limiter does when its request store fails.

A limiter protects a service; it must not take it down. ``Resilient`` wraps any store: when the
store raises ``StoreError`` (every Redis call has a timeout, so a store that hangs raises too),
it answers by the policy ``on_store_error``:

``allow``
    fail open: the hit is allowed;
``deny``
    fail closed: the hit is refused, with ``retry_after`` the time until the store is tried
    again;
``local``
    fall back to an in-process ``MemoryStore``: limits stay enforced per process.

Such decisions have ``degraded=True``. A circuit breaker stops waiting on a store that is down:
after ``failures`` consecutive errors it stops calling the store for ``cooldown`` seconds, then
lets one call through to probe it, and closes again (recovers by itself) on the first success.
Every transition of the breaker is logged (``ratekeeper.store``) and counted, and ``ping()``
reports it with the counts (``Health``).

Only store failures (``StoreError``: a refused connection, a timeout, a server error) count
toward the breaker and are answered by the policy. A caller's mistake (``InvalidInputError``,
``InvalidLimitError``) and a misconfigured store (``StoreConfigError``: bad credentials, an
unknown database) are raised to the caller and leave the breaker as it was: neither would be
cured by waiting, and failing open on them would switch limiting off.

``Resilient`` and ``AsyncResilient`` are twins: only I/O differs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import StoreConfigError, StoreError
from ratekeeper.core.inputs import check_hits, check_key
from ratekeeper.core.limits import Limit
from ratekeeper.stores.health import Health
from ratekeeper.stores.memory import Hit, MemoryStore, check_release

log = logging.getLogger("ratekeeper.store")

T = TypeVar("T")

POLICIES = ("allow", "deny", "local")


class CircuitBreaker:
    """Counts consecutive failures; open means "do not call the store now".

    ``failures_total`` counts every failure, ``opened`` every time the circuit opened;
    ``last_error`` is the latest failure's message.
    """

    def __init__(
        self, failures: int = 3, cooldown: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.threshold = failures
        self.cooldown = cooldown
        self.clock = clock
        self.failures = 0
        self.failures_total = 0
        self.opened = 0
        self.last_error: str | None = None
        self.opened_at: float | None = None
        self._probing = False
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half-open"`` (a probe may go through, or is)."""
        if self.opened_at is None:
            return "closed"
        if self._probing or self.clock() - self.opened_at >= self.cooldown:
            return "half-open"
        return "open"

    def allows_call(self) -> bool:
        """Whether the store may be called now; in the half-open state, one probe at a time."""
        if self.opened_at is None:
            return True
        with self._lock:
            if self._probing or self.clock() - self.opened_at < self.cooldown:
                return False
            self._probing = True
        log.info("request store: circuit half-open, probing the store")
        return True

    def abandon(self) -> None:
        """A call let through raised a caller's or a configuration error: it says nothing of
        the store's health, so a probe it held may go again."""
        self._probing = False

    def retry_after(self) -> float:
        if self.opened_at is None:
            return self.cooldown
        return max(self.cooldown - (self.clock() - self.opened_at), 0.0) or self.cooldown

    def succeeded(self) -> None:
        if self.failures == 0:  # closed, and not probing: nothing to change (the common case)
            return
        with self._lock:
            was_open = self.opened_at is not None
            self.failures = 0
            self.opened_at = None
            self._probing = False
        if was_open:
            log.warning("request store is back; circuit closed")

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self.failures += 1
            self.failures_total += 1
            self.last_error = str(error)
            probing, self._probing = self._probing, False
            if self.failures < self.threshold:
                return
            opening = self.opened_at is None
            self.opened_at = self.clock()
            if opening:
                self.opened += 1
        if opening:
            log.error(
                "request store failed %d times in a row (%s); circuit open, the failure policy "
                "answers for %.1fs",
                self.failures,
                error,
                self.cooldown,
            )
        elif probing:
            log.warning(
                "request store still failing (%s); circuit open again for %.1fs",
                error,
                self.cooldown,
            )


class _Policy:
    """The fallback decisions, shared by the twins."""

    def __init__(self, on_store_error: str, local: MemoryStore | None) -> None:
        if on_store_error not in POLICIES:
            raise StoreConfigError(
                f"on_store_error must be one of {', '.join(POLICIES)}, not {on_store_error!r}"
            )
        self.on_store_error = on_store_error
        self.local = local if local is not None else MemoryStore()
        self.errors = 0  # decisions made by the policy since start
        self.breaker = CircuitBreaker()

    def decide(self, hits: Sequence[Hit], all_or_nothing: bool) -> list[Decision]:
        """The policy's decisions for ``hits`` (checked here: the store never saw them)."""
        hits = check_hits(hits)
        self.errors += len(hits)
        if self.on_store_error == "local":
            decided = self.local.apply_many(hits, all_or_nothing=all_or_nothing)
            return [decision._replace(degraded=True) for decision in decided]
        if self.on_store_error == "allow":
            return [
                Decision(
                    True, limit.capacity, max(limit.capacity - cost, 0), 0.0, 0.0, 0.0, cost, True
                )
                for _, limit, cost in hits
            ]
        wait = self.breaker.retry_after()
        return [
            Decision(False, limit.capacity, 0, wait, wait, 0.0, 0, True) for _, limit, _ in hits
        ]

    def release(self, key: str, limit: Limit, slots: int) -> Decision:
        """A release the store could not take: the policy's local store takes it, if any;
        else the leases expire by themselves."""
        key, slots = check_key(key), check_release(limit, slots)
        if self.on_store_error == "local":
            return self.local.release(key, limit, slots)._replace(degraded=True)
        return Decision(True, limit.capacity, 0, 0.0, 0.0, 0.0, 0, True)

    def health(self, answered: Health) -> Health:
        """``answered`` (the store's own ping) with the breaker's state and counts."""
        breaker = self.breaker
        return answered._replace(
            breaker=breaker.state,
            error=answered.error or breaker.last_error,
            failures=breaker.failures_total,
            opened=breaker.opened,
            degraded=self.errors,
        )


class Resilient:
    """A store that answers by ``on_store_error`` whenever ``store`` fails."""

    def __init__(
        self, store: Any, *, on_store_error: str = "allow", local: MemoryStore | None = None
    ) -> None:
        self.store = store
        self.policy = _Policy(on_store_error, local)
        self.breaker = self.policy.breaker

    def _through(self, call: Callable[[], T]) -> T | None:
        """``call()`` on the store, unless the breaker is open; None when it was not called
        or failed (the policy answers). Any other exception is the caller's: it propagates."""
        breaker = self.breaker
        if not breaker.allows_call():
            return None
        try:
            result = call()
        except StoreError as error:
            breaker.failed(error)
            return None
        except BaseException:
            breaker.abandon()
            raise
        breaker.succeeded()
        return result

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        decision: Decision | None = self._through(lambda: self.store.apply(key, limit, cost, now))
        if decision is None:
            return self.policy.decide([(key, limit, cost)], False)[0]
        return decision

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        decisions: list[Decision] | None = self._through(
            lambda: self.store.apply_many(hits, all_or_nothing=all_or_nothing, now=now)
        )
        if decisions is None:
            return self.policy.decide(hits, all_or_nothing)
        return decisions

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        decision: Decision | None = self._through(
            lambda: self.store.release(key, limit, slots, now)
        )
        if decision is None:
            return self.policy.release(key, limit, slots)
        return decision

    def reset(self, key: str, limit: Limit) -> None:
        self.policy.local.reset(key, limit)
        self.store.reset(key, limit)

    def ping(self) -> Health:
        """The store's own ping (not through the breaker), with the breaker's state and counts."""
        answered: Health = self.store.ping()
        return self.policy.health(answered)

    def close(self) -> None:
        self.store.close()


class AsyncResilient:
    """The asyncio twin of ``Resilient``."""

    def __init__(
        self, store: Any, *, on_store_error: str = "allow", local: MemoryStore | None = None
    ) -> None:
        self.store = store
        self.policy = _Policy(on_store_error, local)
        self.breaker = self.policy.breaker

    async def _through(self, call: Callable[[], Awaitable[T]]) -> T | None:
        breaker = self.breaker
        if not breaker.allows_call():
            return None
        try:
            result = await call()
        except StoreError as error:
            breaker.failed(error)
            return None
        except BaseException:
            breaker.abandon()
            raise
        breaker.succeeded()
        return result

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        decision: Decision | None = await self._through(
            lambda: self.store.apply(key, limit, cost, now)
        )
        if decision is None:
            return self.policy.decide([(key, limit, cost)], False)[0]
        return decision

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        decisions: list[Decision] | None = await self._through(
            lambda: self.store.apply_many(hits, all_or_nothing=all_or_nothing, now=now)
        )
        if decisions is None:
            return self.policy.decide(hits, all_or_nothing)
        return decisions

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision:
        decision: Decision | None = await self._through(
            lambda: self.store.release(key, limit, slots, now)
        )
        if decision is None:
            return self.policy.release(key, limit, slots)
        return decision

    async def reset(self, key: str, limit: Limit) -> None:
        self.policy.local.reset(key, limit)
        await self.store.reset(key, limit)

    async def ping(self) -> Health:
        answered: Health = await self.store.ping()
        return self.policy.health(answered)

    async def close(self) -> None:
        await self.store.close()
