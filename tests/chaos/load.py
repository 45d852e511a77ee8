"""A bounded load of checks on several instances, and what each answer said.

``Load(urls, checks, ...)`` runs ``concurrency`` workers in a thread of its own, each sending
``POST /v1/check`` on keep-alive connections, round robin over ``urls``, the ``n``-th request
carrying ``checks(n)``, until ``seconds`` have passed or ``requests`` were sent (whichever is
first) or ``stop()``. ``result()`` waits for the end and returns one ``Answer`` per request,
in the order they were sent, each with the instance it went to, the key, and either the
decision (``allowed``, ``degraded``) or the error that took its place. Meanwhile the test
drives its faults from its own thread.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ratekeeper.client import KEEPALIVE_EXPIRY

#: A check's JSON body.
Check = dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """One request: when it was sent (seconds since the load began), where, for which key, and
    what came back (``status`` None and ``error`` set when nothing did)."""

    sent: float
    took: float
    instance: int
    key: str
    status: int | None
    allowed: bool
    degraded: bool
    error: str | None = None


class Load:
    """See the module."""

    def __init__(
        self,
        urls: Sequence[str],
        checks: Callable[[int], Check],
        *,
        seconds: float,
        requests: int = 1_000_000,
        concurrency: int = 24,
        timeout: float = 5.0,
    ) -> None:
        self.urls = list(urls)
        self.checks = checks
        self.seconds = seconds
        self.requests = requests
        self.concurrency = concurrency
        self.timeout = timeout
        self.answers: list[Answer] = []
        self.started = time.monotonic()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    def now(self) -> float:
        """Seconds since the load began, on the clock of ``Answer.sent``."""
        return time.monotonic() - self.started

    def stop(self) -> None:
        self._stopping.set()

    def result(self) -> list[Answer]:
        self._thread.join(self.seconds + self.timeout + 30)
        assert not self._thread.is_alive(), "the load did not stop"
        return sorted(self.answers, key=lambda one: one.sent)

    async def _run(self) -> None:
        # Idle connections kept less long than the service keeps them, as its own client does:
        # one reused as the service closes it would fail the call.
        limits = httpx.Limits(
            max_connections=self.concurrency,
            max_keepalive_connections=None,
            keepalive_expiry=KEEPALIVE_EXPIRY,
        )
        clients = [
            httpx.AsyncClient(base_url=url, limits=limits, timeout=self.timeout)
            for url in self.urls
        ]
        counter = itertools.count()
        end = self.started + self.seconds

        async def work() -> None:
            while not self._stopping.is_set() and time.monotonic() < end:
                n = next(counter)
                if n >= self.requests:
                    return
                await self._one(clients, n)

        try:
            await asyncio.gather(*(work() for _ in range(self.concurrency)))
        finally:
            for client in clients:
                await client.aclose()

    async def _one(self, clients: list[httpx.AsyncClient], n: int) -> None:
        instance = n % len(clients)
        check = self.checks(n)
        sent = self.now()
        try:
            response = await clients[instance].post("/v1/check", json=check)
        except httpx.HTTPError as error:
            answer = Answer(
                sent, self.now() - sent, instance, check["key"], None, False, False,
                type(error).__name__,
            )  # fmt: skip
        else:
            body = response.json() if response.status_code in (200, 429) else {}
            answer = Answer(
                sent, self.now() - sent, instance, check["key"], response.status_code,
                bool(body.get("allowed")), bool(body.get("degraded")),
            )  # fmt: skip
        self.answers.append(answer)


def summary(answers: Iterable[Answer]) -> dict[str, Any]:
    """What clients saw: how many answers of each status or error, how many degraded (and of
    those allowed), and the answers' times (p50, p99, max, in ms)."""
    answers = list(answers)
    took = sorted(one.took for one in answers) or [0.0]
    seen = Counter(str(one.status) if one.status is not None else str(one.error) for one in answers)
    return {
        "requests": len(answers),
        "answers": dict(sorted(seen.items())),
        "degraded": sum(one.degraded for one in answers),
        "degraded_allowed": sum(one.degraded and one.allowed for one in answers),
        "p50_ms": round(1000 * statistics.median(took), 1),
        "p99_ms": round(1000 * took[min(len(took) - 1, int(0.99 * len(took)))], 1),
        "max_ms": round(1000 * took[-1], 1),
    }


def between(answers: Iterable[Answer], start: float, end: float) -> list[Answer]:
    """The answers to requests sent from ``start`` to ``end`` (seconds since the load began)."""
    return [one for one in answers if start <= one.sent < end]


def allowed(answers: Iterable[Answer], key: str) -> int:
    return sum(one.allowed for one in answers if one.key == key)


def report(case: str, figures: dict[str, Any]) -> None:
    """Print a case's measured figures, one per line, for the reliability page."""
    print(f"\n[chaos] {case}")
    for name, value in figures.items():
        print(f"[chaos]   {name}: {value}")
