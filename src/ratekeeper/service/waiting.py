"""The wait bound: how long a request may wait for one service process before its decision is
shed (``--max-wait``).

A request waits in front of the application while the process's event loop is busy with the
requests before it: in the kernel's buffers, then in the loop's queue. Neither can be read for
one request, but their sum is what the loop is behind: how late a timer set for now fires.
``Waiting`` reads that lag every ``TICK`` and keeps it near ``max_wait``: while the loop runs
more than ``max_wait`` behind, the share of decisions let in (``admitting``) halves at every
reading; once it runs less than half of it behind, the share grows back by ``STEP`` every
``max_wait`` seconds (quick to yield, slow to take back: a share grown too far keeps the loop
behind for a whole turn before a reading can say so). A request
past the share is answered 503 ``overloaded`` at once, which costs the loop a small part of a
decision, so the loop catches up and every request's wait stays bounded, answered or shed.

``watch()`` counts a lag against the share only when the loop is still behind at the next
reading (it reads the lesser of two readings in a row): a process the machine did not run for
a while (a busy host, a container throttled to its CPU quota, a pause of the collector) reads
one late timer, then none once it has caught up, and has no queue to shed. A loop that cannot
catch up stays behind at every reading, and sheds from the second.

The share is kept exactly, without chance: every decision request adds ``admitting`` to a
credit, and one is let in each time the credit reaches 1. A process that is not behind lets
every request in. A request may be counted at the door, before the app sees it (``take()``
then ``prepay()``); the app, told so, calls ``redeem()`` and does not count it again.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

#: Seconds a request may wait before decisions are shed, by default (``--max-wait``).
DEFAULT_MAX_WAIT = 0.1
#: The longest wait that can be set, in seconds.
LONGEST_WAIT = 60.0
#: Seconds between two readings of the loop's lag.
TICK = 0.01
#: The smallest share of decisions let in, however far behind the loop runs.
FLOOR = 0.01
#: What the share grows by at each reading once the loop has caught up.
STEP = 0.05
#: The most requests let in at the door that the app has not seen yet.
MOST_PREPAID = 100_000
#: Seconds after which requests let in at the door and not seen by the app are forgotten.
PREPAID_FOR = 1.0
#: One request, in the millionths the credit counts in.
WHOLE = 1_000_000


def check_wait(value: object) -> float:
    """``value`` as the longest wait, in seconds: a number from 0 (no bound) to
    ``LONGEST_WAIT`` (a ``float``, an ``int`` or its decimal text); else ``ValueError``. NaN,
    infinities, negatives and booleans are refused."""
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.replace(".", "", 1).isdigit():
            number = float(text)
    if number is None or not math.isfinite(number) or not 0 <= number <= LONGEST_WAIT:
        raise ValueError(
            f"expected seconds from 0 (no bound) to {LONGEST_WAIT:g}, such as 0.1, not {value!r}"
        )
    return number


class Waiting:
    """The share of decisions a process lets in, kept so that requests wait at most about
    ``max_wait`` seconds (0: every request is let in, whatever the wait).

    ``read(lag)`` takes one reading of how far behind the loop runs, and ``watch()`` takes
    them every ``TICK`` on the running loop. ``take()`` counts one decision request: True if
    it is let in. ``prepay()`` says that one was let in at the door (``prepaid`` counts those
    on their way), and ``redeem()`` that one of them reached the app, which does not count it
    again.

    >>> now = [0.0]
    >>> waiting = Waiting(0.1, clock=lambda: now[0])
    >>> waiting.read(0.3)
    >>> waiting.admitting
    0.5
    >>> [waiting.take() for _ in range(4)]
    [False, True, False, True]
    >>> now[0] = 0.1
    >>> waiting.read(0.01)
    >>> waiting.admitting
    0.55
    """

    def __init__(self, max_wait: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_wait = check_wait(max_wait)
        self.clock = clock
        #: The share of decision requests let in, from ``FLOOR`` to 1.
        self.admitting = 1.0
        #: Seconds the loop ran behind at the last reading.
        self.lag = 0.0
        self._credit = 0  # millionths of a request
        self._prepaid = 0  # requests let in at the door, not yet in the app
        self._prepaid_at = -math.inf  # when the last one was
        self._changed = -math.inf  # when the share last changed

    def read(self, lag: float) -> None:
        """One reading: the loop ran ``lag`` seconds behind."""
        self.lag = lag
        if not self.max_wait:
            return
        now = self.clock()
        if lag > self.max_wait:
            self.admitting = max(FLOOR, self.admitting / 2)
            self._changed = now
        elif (
            lag < self.max_wait / 2 and self.admitting < 1 and now - self._changed >= self.max_wait
        ):
            self.admitting = min(1.0, round(self.admitting + STEP, 6))
            self._changed = now

    def take(self) -> bool:
        """Count one decision request: True if it is let in, False if it is to be shed."""
        if self.admitting >= 1:
            return True
        self._credit += round(self.admitting * WHOLE)  # in millionths: no drift
        if self._credit >= WHOLE:
            self._credit -= WHOLE
            return True
        return False

    def prepay(self) -> None:
        """One request was let in at the door (``take()`` said so); the app admits it next."""
        self._prepaid = min(self.prepaid + 1, MOST_PREPAID)
        self._prepaid_at = self.clock()

    @property
    def prepaid(self) -> int:
        """The requests let in at the door that the app has not seen yet. The app sees them
        at the loop's next turn: any left ``PREPAID_FOR`` seconds after the last one came
        never reached it (their connection closed first), and are forgotten."""
        if self._prepaid and self.clock() - self._prepaid_at > PREPAID_FOR:
            self._prepaid = 0
        return self._prepaid

    def redeem(self) -> None:
        """One request let in at the door (``prepay()``) has reached the app."""
        if self.prepaid:
            self._prepaid -= 1

    async def watch(self) -> None:
        """Read the running loop's lag every ``TICK``, until cancelled: ``read`` is given the
        lesser of each reading and the one before it (see the module), and ``lag`` is the
        reading itself."""
        clock = self.clock
        before = 0.0
        while True:
            due = clock() + TICK
            await asyncio.sleep(TICK)
            lag = max(0.0, clock() - due)
            self.read(min(lag, before))
            self.lag = before = lag
