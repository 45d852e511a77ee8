"""The in-flight bound: at most so many decisions under way in one service process at once
(``--max-in-flight``).

A burst larger than the process can decide in time would keep its event loop behind until
answers to everyone come late, the request store's included. ``InFlightBound`` sheds the excess
before the store sees it: past ``limit`` decisions in flight, a request is turned away at once
(HTTP 503 ``overloaded`` with ``Retry-After``, gRPC ``UNAVAILABLE``), so that the gateway's
own failure mode decides it (Envoy's ``failure_mode_deny``, nginx's ``auth_request`` error
page) and the client can try again. The decision routes (HTTP, nginx's, Envoy's gRPC
``ShouldRateLimit``) take part; health, readiness, metrics and admin routes never wait on it.

Shedding is logged as it starts and once it is over (no request shed for ``QUIET`` seconds),
never once per request. The surfaces share one event loop, so no lock is taken.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ratekeeper.core.wording import many
from ratekeeper.service.surfaces import SERVED

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
    """At most ``limit`` decisions in flight.

    ``enter(surface)`` lets one decision in and returns True, or, with ``limit`` in flight,
    counts it as shed (``shed[surface]``) and returns False: the caller answers it at once.
    Every decision let in calls ``leave()`` once it is answered. ``clock`` (seconds) times
    the log of shedding. Raises ``ValueError`` for a ``limit`` that ``check_limit`` refuses.

    >>> bound = InFlightBound(1)
    >>> bound.enter("http"), bound.enter("grpc")
    (True, False)
    >>> bound.leave()
    >>> bound.in_flight, bound.shed["grpc"]
    (0, 1)
    """

    def __init__(self, limit: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = check_limit(limit)
        self.clock = clock
        self.in_flight = 0
        self.shed = dict.fromkeys(SERVED, 0)
        self._shedding_since: float | None = None  # when shedding began, while it lasts
        self._last_shed = 0.0
        self._shed_since = 0  # requests shed since shedding began

    def enter(self, surface: str) -> bool:
        if self.in_flight < self.limit:
            self.in_flight += 1
            return True
        self.shed[surface] += 1
        now = self.clock()
        self._last_shed = now
        if self._shedding_since is None:
            self._shedding_since, self._shed_since = now, 0
            log.warning(
                "overloaded: %s in flight, the most --max-in-flight allows; "
                "answering the excess 503 overloaded (gRPC UNAVAILABLE) until it drains",
                many(self.limit, "decision"),
            )
        self._shed_since += 1
        return False

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
