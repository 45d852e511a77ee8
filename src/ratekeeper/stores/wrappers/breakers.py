"""Circuit breakers: one per shard of a request store (see ``resilience``).

An outage is logged in a few lines, however long it lasts and however busy the service is, one
line per state, in the order of the transitions:

- the opening, at once (an error): "request store failed 3 times in a row (...); circuit open";
- the re-openings after failed probes, counted by a ``LogThrottle``: one line a minute while the
  outage lasts, each with the count of those not logged ("still failing (...); circuit open
  again ... (… 59 more in the last 60 s)");
- the recovery, once, with the outage's length and the re-openings not logged since the last
  line: "request store reachable again after 10.2 s (from its first failed call; its last
  failed 0.4 s ago; 8 re-openings not logged); circuit closed".

The length runs from the first failed call of the outage (the first of the failures in a row
that opened the circuit) to the successful call that closes it; the last failure says how long
before that call the store last failed, so that the outage ended between the two. Both ends are
calls, so both depend on traffic: a store that came back while nothing asked for it is seen
back at the next call. No "still failing" line is logged at the recovery. The probes themselves
are logged at debug level.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.core.wording import many
from ratekeeper.stores.contract import Health

log = logging.getLogger("ratekeeper.store")

#: The throttle's key of an outage: the opening and the re-openings are one condition.
_DOWN = "down"

#: The states of a breaker, best first.
_STATES = ("closed", "half-open", "open")

#: A shard's breaker that stayed open this many cooldowns without a call asking for it holds a
#: shard no key maps to any more (a failed master, its replica promoted under another name): it
#: is retired, its counts kept in the totals.
STALE_COOLDOWNS = 30


class CircuitBreaker:
    """Counts consecutive failures; open means "do not call the store now".

    ``failures_total`` counts every failure, ``opened`` every transition to open (a re-opening
    after a failed probe too); ``last_error`` is the latest failure's message and
    ``last_error_at`` its wall-clock time (``time.time()``), kept after recovery. ``name`` is
    the shard the breaker guards, ``""`` for a whole store.
    """

    def __init__(
        self,
        failures: int = 3,
        cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        name: str = "",
    ) -> None:
        self.threshold = failures
        self.cooldown = cooldown
        self.clock = clock
        self.name = name
        self.failures = 0
        self.failures_total = 0
        self.opened = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.opened_at: float | None = None
        self.failing_since: float | None = None  # the first of the failures in a row
        self.failed_at: float | None = None  # the latest failure (the breaker's clock)
        self.down_since: float | None = None  # an open circuit's ``failing_since``
        self.asked_at = 0.0  # when a call last asked for the store while the circuit was open
        self._probing = False
        self._lock = threading.Lock()
        self._what = f"request store shard {name}" if name else "request store"
        self._log = LogThrottle(log, clock=self._now)

    def _now(self) -> float:
        return self.clock()

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
        self.asked_at = now = self.clock()
        with self._lock:
            if self._probing or now - self.opened_at < self.cooldown:
                return False
            self._probing = True
        log.debug("%s: circuit half-open, probing the store", self._what)
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
            since, self.down_since = self.down_since, None
            self.failures = 0
            self.opened_at = None
            self._probing = False
            last = self.failed_at
        if since is not None:
            now = self.clock()
            hidden = self._log.forget(_DOWN)  # counted in this line, not logged before it
            log.warning(
                "%s reachable again after %.1f s (from its first failed call; its last failed "
                "%.1f s ago%s); circuit closed",
                self._what,
                now - since,
                now - (since if last is None else last),
                f"; {many(hidden, 're-opening')} not logged" if hidden else "",
            )

    def failed(self, error: BaseException) -> None:
        now = self.clock()
        with self._lock:
            if self.failures == 0:
                self.failing_since = now
            self.failures += 1
            self.failures_total += 1
            self.failed_at = now
            self.last_error = str(error)
            self.last_error_at = time.time()
            probing, self._probing = self._probing, False
            if self.failures < self.threshold:
                return
            opening = self.opened_at is None
            self.opened_at = self.asked_at = now
            if opening:
                self.down_since = self.failing_since
            if opening or probing:
                self.opened += 1
        if opening:
            self._log.log(
                logging.ERROR,
                "%s failed %s in a row (%s); circuit open, the failure policy answers for %.1fs",
                self._what,
                many(self.failures, "time"),
                error,
                self.cooldown,
                key=_DOWN,
            )
        elif probing:
            self._log.log(
                logging.WARNING,
                "%s still failing (%s); circuit open again for %.1fs",
                self._what,
                error,
                self.cooldown,
                key=_DOWN,
            )


class Breakers:
    """A circuit breaker per shard, made on a shard's first use; ``""`` is a store's without
    shards. ``clock`` is every breaker's (tests set a fake one). A shard's breaker left open
    for ``STALE_COOLDOWNS`` cooldowns without a call for it is retired when health is asked."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.by_shard: dict[str, CircuitBreaker] = {"": CircuitBreaker(clock=clock)}
        self._lock = threading.Lock()
        self._retired = (0, 0)  # the failures and openings of retired breakers

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        for breaker in list(self.by_shard.values()):
            breaker.clock = clock

    def get(self, shard: str) -> CircuitBreaker:
        """The breaker of ``shard``, closed if it is new."""
        breaker = self.by_shard.get(shard)
        if breaker is None:
            with self._lock:
                breaker = self.by_shard.setdefault(
                    shard, CircuitBreaker(clock=self._clock, name=shard)
                )
        return breaker

    def health(self, answered: Health, degraded: int) -> Health:
        """``answered`` (the store's own ping, whose ``error`` says why the store does not
        answer now) with the breakers' worst state, their totals, the shards whose breaker is
        not closed (never ``""``: the breaker of a whole store is told by the state alone), and
        the latest failure any of them saw (``last_error``, past)."""
        self._retire()
        breakers = list(self.by_shard.values())
        states = [(breaker.name, breaker.state) for breaker in breakers]
        worst = max((state for _, state in states), key=_STATES.index)
        failed = [breaker for breaker in breakers if breaker.last_error_at is not None]
        latest = max(failed, key=lambda breaker: breaker.last_error_at or 0.0, default=None)
        return answered._replace(
            breaker=worst,
            last_error=None if latest is None else latest.last_error,
            last_error_at=None if latest is None else latest.last_error_at,
            failures=self._retired[0] + sum(breaker.failures_total for breaker in breakers),
            opened=self._retired[1] + sum(breaker.opened for breaker in breakers),
            degraded=degraded,
            open_shards=tuple(sorted(name for name, state in states if name and state != "closed")),
        )

    def _retire(self) -> None:
        """Retire the breakers of shards no call has asked for in ``STALE_COOLDOWNS``."""
        now = self._clock()
        retired = []
        with self._lock:
            for name, breaker in list(self.by_shard.items()):
                if (
                    name
                    and breaker.opened_at is not None
                    and now - breaker.asked_at > STALE_COOLDOWNS * breaker.cooldown
                ):
                    del self.by_shard[name]
                    failures, opened = self._retired
                    self._retired = (failures + breaker.failures_total, opened + breaker.opened)
                    retired.append(breaker)
        for breaker in retired:  # the re-openings it still counts are logged
            breaker._log.clear(_DOWN)
