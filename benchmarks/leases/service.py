"""Leased quotas through the service: 3 ``ratekeeper serve`` instances sharing one Redis,
behind nginx running the shipped ``deploy/nginx/ratekeeper.conf`` (``benchmarks.leases.nginx``),
driven by wrk through nginx's ``auth_request`` path.

Each request to nginx's ``/`` is one ``GET /v1/nginx`` to one instance (nginx spreads them
round robin), whose descriptor ``remote_address`` (127.0.0.1, wrk's address) is the hot key.
Two runs, side by side: the rule ``sync: exact``, then ``sync: leased``, each on fresh instances
and an emptied database. Around each run the server's ``INFO commandstats`` is read and the
key's state sampled straight from Redis (``benchmarks.leases.sampler``); nginx's access log
gives the requests it let through per second.
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.leases.nginx import Nginx
from benchmarks.leases.sampler import Sampler, commands, own_commands
from benchmarks.redis_store.server import RedisServer
from benchmarks.service import load
from benchmarks.service.servers import Server
from benchmarks.trials import BenchmarkError

#: ``ratekeeper serve`` instances behind nginx, and wrk's connections to nginx.
INSTANCES = 3
CONNECTIONS = 32
RULES = """\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {{unit: second, requests_per_unit: {amount}, sync: {sync}}}
"""


@dataclass(frozen=True)
class ServiceRun:
    """One wrk run through nginx."""

    sync: str
    requests: int
    rate: float
    refused: int  # answers other than 200 (429s), socket errors included
    commands: int
    scripts: int
    store_worst: float  # the largest count the store held in a window
    passed_worst: int  # the most requests nginx let through in a whole second of the run
    passed_seconds: int  # whole seconds of the run
    by_name: dict[str, int]  # the commands, by name

    @property
    def per_decision(self) -> float:
        return self.commands / self.requests if self.requests else float("nan")

    @property
    def scripts_per_decision(self) -> float:
        return self.scripts / self.requests if self.requests else float("nan")


def measure(
    server: RedisServer, amount: int, seconds: int, directory: Path, progress: Any
) -> list[ServiceRun]:
    """The exact run, then the leased one."""
    runs = []
    for sync in ("exact", "leased"):
        progress(f"leases: service, {sync} ({INSTANCES} instances behind nginx, {seconds} s)")
        server.flush()
        place = directory / sync
        place.mkdir()
        rules = place / "rules.yaml"
        rules.write_text(RULES.format(amount=amount, sync=sync))
        runs.append(_run(server, sync, amount=amount, seconds=seconds, place=place, rules=rules))
    return runs


def _command(url: str, rules: Path, index: int) -> list[str]:
    return [
        sys.executable, "-m", "ratekeeper.cli", "serve", "--store", url,
        "--rules", str(rules), "--config", f"sqlite:///config-{index}.db",
        "--instances", str(INSTANCES),
    ]  # fmt: skip


def _run(
    server: RedisServer, sync: str, *, amount: int, seconds: int, place: Path, rules: Path
) -> ServiceRun:
    with ExitStack() as stack:
        started = []  # all three start at once, then each is waited for
        for i in range(INSTANCES):
            started.append(Server(f"serve-{i}", _command(server.url, rules, i), place, None))
            stack.callback(started[-1].stop)
        instances = [stack.enter_context(one) for one in started]
        nginx = stack.enter_context(Nginx(place / "nginx", [one.http_port for one in instances]))
        first = httpx.get(nginx.url, timeout=5)
        if first.status_code != 200 or "x-ratelimit-limit" not in first.headers:
            raise BenchmarkError(f"nginx answered {first.status_code} {dict(first.headers)}")
        key = _state_key(server)
        sampler = Sampler(
            server.url, key, algorithm="fixed_window", capacity=amount, interval=1.0 / amount
        )
        before = server.admin.info("commandstats")
        start = time.time()
        with sampler:
            ran = load.parse_wrk(
                load._run(
                    ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency", nginx.url],
                    seconds + 30,
                )
            )
        end = time.time()
        after = server.admin.info("commandstats")
        nginx.stop()
        passed = nginx.passed(start, end)
    full = list(range(int(start) + 1, int(end)))
    total, scripts, by_name = commands(before, after, own_commands(sampler))
    return ServiceRun(
        sync=sync,
        requests=ran.requests,
        rate=ran.rate,
        refused=ran.failures,
        commands=total,
        scripts=scripts,
        store_worst=max(sampler.counts.values(), default=0.0),
        passed_worst=max((passed[second] for second in full), default=0),
        passed_seconds=len(full),
        by_name=dict(by_name.most_common()),
    )


def _state_key(server: RedisServer) -> str:
    """The one state key the first request wrote."""
    keys: list[str] = [
        name.decode() for name in server.admin.scan_iter(count=100) if not name.endswith(b":s")
    ]
    if len(keys) != 1:
        raise BenchmarkError(f"expected one state key in Redis after one request, found {keys}")
    return keys[0]
