"""The in-flight bound: at most so many decisions under way in one service process at once
(``--max-in-flight``), and no request waiting much longer than ``--max-wait`` for them.

A burst larger than the process can decide in time would keep its event loop behind until
answers to everyone come late, the request store's included. ``InFlightBound`` sheds the excess
before the store sees it: past ``limit`` decisions in flight, a request is turned away at once
(HTTP 503 ``overloaded`` with ``Retry-After``, gRPC ``UNAVAILABLE``), so that the gateway's
own failure mode decides it (Envoy's ``failure_mode_deny``, nginx's ``auth_request`` error
page) and the client can try again. Time is bounded as well as numbers: while the event loop
runs more than ``max_wait`` behind, only a share of the decisions is let in
(``ratekeeper.service.waiting``), the rest shed the same way. The decision routes (HTTP,
nginx's, Envoy's gRPC ``ShouldRateLimit``) take part; health, readiness, metrics and admin
routes never wait on it.

Shedding is logged as it starts and once it is over (no request shed for ``QUIET`` seconds),
never once per request. The surfaces share one event loop, so no lock is taken.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ratekeeper.core.wording import many
from ratekeeper.service.surfaces import SERVED
from ratekeeper.service.waiting import Waiting

log = logging.getLogger("ratekeeper.service")

#: Decisions in flight in one process by default (``--max-in-flight``).
DEFAULT_MAX_IN_FLIGHT = 1000
#: The largest bound that can be set.
MOST_IN_FLIGHT = 1_000_000
#: Seconds a turned-away client is told to wait (``Retry-After``).
RETRY_AFTER = 1
#: Seconds without a request shed after which shedding is logged as over.
QUIET = 10.0


def check_limit(value: object) -> int:
    """``value`` as a bound on decisions in flight: a whole number from 1 to
    ``MOST_IN_FLIGHT`` (an ``int``, or its decimal digits); else ``ValueError``."""
    text = str(value).strip() if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool):
        number: int | None = value
    elif text is not None and text.isascii() and text.isdigit():
        number = int(text)
    else:
        number = None
    if number is None or not 1 <= number <= MOST_IN_FLIGHT:
        raise ValueError(f"expected a whole number from 1 to {MOST_IN_FLIGHT}, not {value!r}")
    return number


class InFlightBound:
    """At most ``limit`` decisions in flight, and, with ``max_wait`` (seconds; 0 for none),
    only the share of them that ``waiting`` (a ``Waiting``) lets in while the loop runs behind.

    ``enter(surface)`` lets one decision in and returns True, or, with ``limit`` in flight or
    past the share, counts it as shed (``shed[surface]``) and returns False: the caller
    answers it at once; ``prepaid``: the request was let through at the door
    (``turn_away``), and is not counted against the share again. Every decision let in calls
    ``leave()`` once it is answered.
    ``turn_away(surface)`` decides at the door, before the app sees the request, while
    ``shedding`` says decisions may be shed: a request it lets through is then let in by
    ``enter`` without being counted twice. ``watch()`` reads the loop's lag until
    cancelled. ``clock`` (seconds) times the log of shedding and the lag. Raises
    ``ValueError`` for a ``limit`` that ``check_limit`` refuses, or a ``max_wait`` that
    ``waiting.check_wait`` refuses.

    >>> bound = InFlightBound(1)
    >>> bound.enter("http"), bound.enter("grpc")
    (True, False)
    >>> bound.leave()
    >>> bound.in_flight, bound.shed["grpc"]
    (0, 1)
    """

    def __init__(
        self, limit: int, *, max_wait: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = check_limit(limit)
        self.clock = clock
        self.waiting = Waiting(max_wait, clock=clock)
        self.in_flight = 0
        self.shed = dict.fromkeys(SERVED, 0)
        self._shedding_since: float | None = None  # when shedding began, while it lasts
        self._last_shed = 0.0
        self._shed_since = 0  # requests shed since shedding began
        self._full = False  # whether the last one shed was for the bound (else the share)

    def enter(self, surface: str, *, prepaid: bool = False) -> bool:
        if prepaid:  # let in at the door (turn_away): its share is taken
            self.waiting.redeem()
        if self.in_flight < self.limit and (prepaid or self.waiting.take()):
            self.in_flight += 1
            return True
        self._count_shed(surface, self.in_flight >= self.limit)
        return False

    @property
    def full(self) -> bool:
        """Whether ``limit`` decisions are in flight, or on their way in from the door."""
        return self.in_flight + self.waiting.prepaid >= self.limit

    @property
    def shedding(self) -> bool:
        """Whether decisions may be shed now: the bound is reached, or only a share of them
        is let in. (Asked on every read: the prepaid that ``full`` forgets when stale are
        counted here until then.)"""
        waiting = self.waiting
        return waiting.admitting < 1 or self.in_flight + waiting._prepaid >= self.limit

    def refund(self) -> None:
        """A request ``turn_away`` let through will not reach ``enter`` (it could not be
        parsed): it no longer counts toward the bound."""
        self.waiting.redeem()

    def turn_away(self, surface: str, *, coming: int = 0) -> bool:
        """At the door, before the app sees the request: True if its decision is shed (counted
        as ``enter`` counts it), False if it goes on, ``enter`` letting it in on the share
        taken here. Those let through and not yet in count toward the bound, and so do
        ``coming``: requests on their way in that the door did not weigh."""
        room = self.in_flight + self.waiting.prepaid + coming < self.limit
        if room and self.waiting.take():
            self.waiting.prepay()
            return False
        self._count_shed(surface, not room)
        return True

    @property
    def reason(self) -> str:
        """Why decisions are shed now (the last one was): ``"full"``, the bound reached, or
        ``"wait"``, only a share let in. ``why()`` says it in words."""
        return "full" if self._full or self.full else "wait"

    def why(self) -> str:
        """Why decisions are shed now (the last one was), as the answer to one says it."""
        if self.reason == "full":
            return (
                f"the service is deciding {many(self.limit, 'request')}, the most it takes at once"
            )
        return (
            f"requests wait here longer than the {self.waiting.max_wait:g} s they may; "
            "only part of them is decided"
        )

    async def watch(self) -> None:
        """Read the running loop's lag every ``waiting.TICK`` until cancelled."""
        await self.waiting.watch()

    def _count_shed(self, surface: str, full: bool) -> None:
        """Count one decision shed on ``surface``: for the bound's being ``full``, else for
        the share."""
        self._full = full
        self.shed[surface] += 1
        now = self.clock()
        self._last_shed = now
        if self._shedding_since is None:
            self._shedding_since, self._shed_since = now, 0
            if full:
                log.warning(
                    "overloaded: %s in flight, the most --max-in-flight allows; "
                    "answering the excess 503 overloaded (gRPC UNAVAILABLE) until it drains",
                    many(self.limit, "decision"),
                )
            else:
                log.warning(
                    "overloaded: requests wait %.2f s, past --max-wait %g s; answering all "
                    "but %.0f%% of the decisions 503 overloaded (gRPC UNAVAILABLE) until "
                    "the wait is back under it",
                    self.waiting.lag,
                    self.waiting.max_wait,
                    self.waiting.admitting * 100,
                )
        self._shed_since += 1

    def leave(self) -> None:
        self.in_flight -= 1
        since = self._shedding_since
        if since is not None and self.clock() - self._last_shed >= QUIET:
            self._shedding_since = None
            log.info(
                "no longer overloaded: %s shed in %.1f s",
                many(self._shed_since, "request"),
                self._last_shed - since,
            )
