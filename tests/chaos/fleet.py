"""Three ``ratekeeper serve`` instances for the chaos cases, and what each says of itself.

``Fleet(directory, store, *flags)`` starts ``INSTANCES`` services on one request store, each
in a directory of its own with its log in ``serve.log``, and returns once each has counted
them all through the store (no ``--instances``: the fleet counts itself), so that a policy
that keeps limits in process holds each instance to its share. ``add()`` starts one more.
``metric(name)`` reads one counter from each instance's ``/metrics``; ``openings_logged()``
counts the breaker openings each log reports.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import RedisCluster, command
from tests.service.served import Served, instances, settle

INSTANCES = 3
#: A line of the breaker's log for an opening, the first or again after a probe; the
#: re-openings not logged (once a minute at most) are counted in the next one: "… 57 more",
#: or in the recovery's: "8 re-openings not logged".
OPENED = re.compile(r"circuit open")
MORE = re.compile(r"… (\d+) more in the last")
HIDDEN = re.compile(r"([\d,]+) re-openings? not logged")


class Fleet:
    """``INSTANCES`` services on ``store``; ``flags`` go to each, ``environ`` to each's
    environment."""

    def __init__(
        self,
        directory: Path,
        store: str,
        *flags: str,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.directory, self.store, self.flags = directory, store, flags
        self.environ = environ or {}
        self.logs = [self._log(index) for index in range(INSTANCES)]
        with ThreadPoolExecutor(INSTANCES) as pool:
            started = [pool.submit(self._start, index) for index in range(INSTANCES)]
        self.instances = [one.result() for one in started if one.exception() is None]
        failed = [one.exception() for one in started if one.exception() is not None]
        if failed:
            self.kill()
            raise failed[0] or RuntimeError("unreachable")
        self.wait_counted(INSTANCES)

    def _log(self, index: int) -> Path:
        return self.directory / f"ratekeeper-{index}" / "serve.log"

    def _start(self, index: int, ready: str = "/readyz") -> Served:
        log = self._log(index)
        log.parent.mkdir(parents=True)
        with log.open("wb") as out:  # the process keeps its own copy
            return Served(
                log.parent,
                "--store",
                self.store,
                *self.flags,
                environ=self.environ,
                stderr=out,
                ready=ready,
            )

    def add(self) -> Served:
        """One more instance, started even while the store fails (it waits for
        ``/healthz``, not for ``/readyz``)."""
        self.logs.append(self._log(len(self.instances)))
        one = self._start(len(self.instances), ready="/healthz")
        self.instances.append(one)
        return one

    def counted(self) -> list[dict[str, Any]]:
        """What each live instance's ``/readyz`` says of the fleet's size."""
        return [instances(one) for one in self.instances if _alive(one)]

    def wait_counted(self, size: int, timeout: float = 15.0) -> None:
        """Wait until every live instance has counted ``size`` through the store."""
        settle([one for one in self.instances if _alive(one)], size, timeout)

    @property
    def urls(self) -> list[str]:
        return [one.url for one in self.instances]

    def metric(self, name: str, labels: dict[str, str] | None = None) -> list[float]:
        """The sum of ``name``'s samples (those with ``labels``) on each live instance."""
        return [_metric(one, name, labels or {}) for one in self.instances if _alive(one)]

    def openings_logged(self) -> list[int]:
        return [openings(log.read_text(errors="replace")) for log in self.logs]

    def kill_one(self, index: int) -> None:
        """SIGKILL one instance, as a crash would."""
        process = self.instances[index].process
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def stop(self) -> list[int]:
        """SIGTERM each live instance, together; their exit statuses."""
        for one in self.instances:
            if _alive(one):
                one.process.send_signal(signal.SIGTERM)
        statuses = []
        for one in self.instances:
            try:
                statuses.append(one.process.wait(30))
            finally:
                one.kill()
        return statuses

    def kill(self) -> None:
        for one in self.instances:
            one.kill()


@contextmanager
def fleet(directory: Path, store: str, *flags: str, **options: dict[str, str]) -> Iterator[Fleet]:
    started = Fleet(directory, store, *flags, **options)
    try:
        yield started
    finally:
        started.kill()


def openings(log: str) -> int:
    """The breaker openings a log reports: each "circuit open" line, and those it or a
    recovery counts."""
    total = 0
    for line in log.splitlines():
        if OPENED.search(line):
            more = MORE.search(line)
            total += 1 + (int(more[1]) if more else 0)
        elif hidden := HIDDEN.search(line):
            total += int(hidden[1].replace(",", ""))
    return total


def _alive(one: Served) -> bool:
    return one.process.poll() is None


def _metric(one: Served, name: str, labels: dict[str, str]) -> float:
    text = httpx.get(f"{one.url}/metrics", timeout=10).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


class Timer:
    """Seconds since it was made; ``mark(name)`` notes when a phase began."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.start = clock()
        self.marks: dict[str, float] = {}

    def __call__(self) -> float:
        return self.clock() - self.start

    def mark(self, name: str) -> float:
        self.marks[name] = self()
        return self.marks[name]


def owners(cluster: RedisCluster, names: list[str]) -> dict[str, int]:
    """Which master's port holds each of ``names`` (a substring of its Redis key)."""
    found = {}
    for master in cluster.masters():
        for key in command(master.port, "KEYS", "*"):
            for name in names:
                if name in key:
                    found[name] = master.port
    return found
