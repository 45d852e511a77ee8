"""A dashboard page open on a server of the service benchmark, for the length of a ``with``
block: ``GET /v1/stats`` once a second, as the page asks it.

``Page`` sends ``Authorization: Bearer <token>``, as a script does; a signed-in browser sends
its cookie instead, and the server checks either with one comparison. It polls from a thread
of the benchmark's process pinned to the load generator's CPU, so that the server's CPU does
only the server's share of a poll. It counts the answers by status (0: no answer).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from types import TracebackType

import httpx

#: What the page asks, and how often (seconds).
STATS, INTERVAL = "/v1/stats", 1.0


class Page:
    """``GET <url>/v1/stats`` with the admin ``token`` every ``interval`` seconds, the first
    at once, from a thread on ``cpu`` (None: not pinned), until the ``with`` block ends."""

    def __init__(self, url: str, token: str, cpu: str | None, interval: float = INTERVAL) -> None:
        self.url, self.cpu, self.interval = url + STATS, cpu, interval
        self.headers = {"Authorization": f"Bearer {token}"}
        self.answers: Counter[int] = Counter()
        self.seconds = 0.0  # how long it was open
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="dashboard page", daemon=True)

    def __enter__(self) -> Page:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def polls(self) -> int:
        return sum(self.answers.values())

    @property
    def failures(self) -> int:
        """The polls not answered 200."""
        return self.polls - self.answers[200]

    def _poll(self) -> None:
        if self.cpu is not None:
            os.sched_setaffinity(0, {int(self.cpu)})  # 0: this thread
        opened = due = time.monotonic()
        with httpx.Client(timeout=10) as client:
            while True:
                try:
                    status = client.get(self.url, headers=self.headers).status_code
                except httpx.TransportError:
                    status = 0
                self.answers[status] += 1
                due += self.interval
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    break
        self.seconds = time.monotonic() - opened
