"""Helpers for testing code that uses ratekeeper: a clock you move by hand.

Example::

    clock = FakeClock()
    limiter = Limiter(MemoryStore(clock=clock), sleep=clock.sleep)
    limiter.hit("k", "1/second")
    clock.advance(1.0)
"""

from __future__ import annotations

import threading

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that only moves when told to. Call it to read the time (seconds since the epoch).

    ``sleep`` and ``async_sleep`` advance the clock instead of waiting, so code that paces
    itself with ``Limiter.acquire`` runs instantly in tests. Thread-safe.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds``; return the new time."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back; got {seconds!r}")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, now: float) -> None:
        """Jump to ``now`` seconds since the epoch."""
        with self._lock:
            self._now = float(now)

    def sleep(self, seconds: float) -> None:
        """Record the sleep and advance the clock by ``seconds`` at once."""
        self.slept.append(seconds)
        self.advance(seconds)

    async def async_sleep(self, seconds: float) -> None:
        """The awaitable ``sleep``."""
        self.sleep(seconds)
