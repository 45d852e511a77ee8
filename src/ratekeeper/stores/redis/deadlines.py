"""The deadline of an asyncio store's round trip, which the event loop's own lag does not use up.

A plain timer (a socket timeout) fails a call the store answered in time when the event loop
is behind: busy with a burst of requests, the loop reads the answer late, and the timer, as
late, fires first. ``Deadline`` times a round trip fairly. When its timer fires late, the loop
was behind and whatever was due may be waiting unread: the deadline moves on by ``LATE``. When
it fires on time, it looks once more after ``LATE``, so that an answer read meanwhile is taken;
on time twice, the store has not answered, and the call fails. So a round trip fails about
``timeout`` after it began when the loop keeps up, and never later than ``cap`` whatever the
loop does: a store that hangs still fails in bounded time.

``Deadline.run`` times a redis-py call under an asyncio timeout; ``Deadline.watch`` gives the
same timer bare (a ``Watch``: one ``loop.call_at``, no task, no timeout), which calls back
when the store has had its time, for the store's pipe (``pipe.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from math import inf, isfinite
from typing import Any, TypeGuard, TypeVar

T = TypeVar("T")

#: Seconds: a timer that fires later than this after its time found the loop behind; and how
#: long a deadline moves on each time.
LATE = 0.01
#: The hard cap of a round trip, as a multiple of its timeout.
CAP = 4


class Deadline:
    """Round trips of ``timeout`` seconds of the store's time, and at most ``cap`` seconds in
    all (``CAP`` times the timeout unless given); see the module.

    ``await deadline.run(call, *args)`` awaits ``call(*args)`` and returns what it returns,
    or raises ``TimeoutError`` (the call cancelled) once the store has had its time. Raises
    ``ValueError`` for a ``timeout`` or ``cap`` that is not positive seconds, or a ``cap``
    below ``timeout``.
    """

    __slots__ = ("cap", "timeout")

    def __init__(self, timeout: float, cap: float | None = None) -> None:
        limit = CAP * timeout if cap is None and _seconds(timeout) else cap
        if not _seconds(timeout) or not _seconds(limit) or limit < timeout:
            raise ValueError(
                f"expected positive seconds and a cap no less than the timeout, not "
                f"timeout={timeout!r}, cap={cap!r}"
            )
        self.timeout = timeout
        self.cap = limit

    async def run(self, call: Callable[..., Awaitable[T]], *args: Any, **options: Any) -> T:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(self.cap) as scope:
                watch = Watch(loop, started + self.timeout, partial(_expire, loop, scope))
                try:
                    return await call(*args, **options)
                finally:
                    watch.handle.cancel()
        except TimeoutError:
            if not scope.expired():
                raise
            raise TimeoutError(
                f"no answer in {loop.time() - started:.3f} s (timeout {self.timeout:g} s)"
            ) from None

    def watch(
        self, loop: asyncio.AbstractEventLoop, started: float, expire: Callable[[], object]
    ) -> Watch:
        """The timer of a round trip that began at ``started`` (``loop.time()``), without a
        task or an asyncio timeout: ``expire()`` is called once the store has had its time, or
        ``cap`` seconds after ``started`` at the latest; ``watch.handle.cancel()`` stops it."""
        return Watch(loop, started + self.timeout, expire, started + self.cap)


def _expire(loop: asyncio.AbstractEventLoop, scope: asyncio.Timeout) -> None:
    if not scope.expired():
        scope.reschedule(loop.time())


def _seconds(value: object) -> TypeGuard[float]:
    """Whether ``value`` is a number of seconds: positive and finite, not a bool."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and isfinite(value)
        and value > 0
    )


class Watch:
    """The timer of one round trip: calls ``expire()`` once the store has had its time (see the
    module), at ``until`` (``loop.time()``) at the latest."""

    __slots__ = ("expire", "handle", "looked", "loop", "until")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        when: float,
        expire: Callable[[], object],
        until: float = inf,
    ) -> None:
        self.loop = loop
        self.expire = expire
        self.until = until
        self.looked = False  # on time once already: the next on-time check expires
        self.handle = loop.call_at(when, self.check, when)

    def check(self, planned: float) -> None:
        now = self.loop.time()
        if now >= self.until:
            self.expire()
            return
        if now - planned > LATE:  # the loop was behind: an answer may be waiting unread
            self.looked = False
        elif not self.looked:  # on time: one more look, for an answer read meanwhile
            self.looked = True
        else:
            self.expire()
            return
        self.handle = self.loop.call_at(now + LATE, self.check, now + LATE)
