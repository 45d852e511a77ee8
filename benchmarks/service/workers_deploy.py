"""The every-core benchmark's deployments of the service: their servers started (and pinned),
where Envoy asks them, their processes' CPU, and a wait until none sheds.

A deployment is a stack and its processes (``workers_envoy.Deployment``): ``ratekeeper serve
--workers N`` on uvicorn and grpc.aio, or N instances of ``ratekeeper serve --server pyvoy``,
each on ports of its own. A deployment of one process runs on the first CPU of ``cpus()``, and
the load generator, Envoy and redis-server on the second; a deployment of several processes
runs anywhere. Every server waits ``MAX_WAIT`` seconds before it sheds (``--max-wait``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from benchmarks.redis_store.server import RedisServer
from benchmarks.service.servers import Server, cpu_seconds, cpus, descendants
from benchmarks.service.workers_envoy import Deployment
from benchmarks.service.workers_report import AIO, PYVOY
from benchmarks.trials import BenchmarkError

#: The servers' ``--max-wait``: the cases measure capacity, not the shedding past it. A
#: deployment of two processes shares both cores with Envoy, wrk and Redis, where a request
#: may wait the scheduler's slices: at the default 0.1 s, a worker of ``--workers 2`` once
#: shed a share of an Envoy case's calls (Envoy's ``failure_mode_allowed``) in a full run.
MAX_WAIT = "2"


def start(
    up: ExitStack, deployment: Deployment, redis: RedisServer, directory: Path
) -> list[Server]:
    """The servers of ``deployment``, started (``up`` stops them): on the first CPU when they
    are one process (``cpus``), anywhere otherwise."""
    stack, workers = deployment
    cpu = cpus()[0] if workers == 1 else None
    base = [
        sys.executable, "-m", "ratekeeper.cli", "serve", "--store", redis.url,
        "--rules", "rules.yaml", "--config", "sqlite:///config.db", "--max-wait", MAX_WAIT,
    ]  # fmt: skip
    if stack == AIO:
        command = [*base, "--workers", str(workers)]
        return [up.enter_context(Server(f"{AIO}-{workers}", command, directory, cpu))]
    servers = [
        Server(f"{PYVOY}-{workers}-{n}", [*base, "--server", PYVOY], directory, cpu,
               grpc_on_http=True)
        for n in range(workers)
    ]  # fmt: skip
    return [up.enter_context(server) for server in servers]


def pin(pid: int, cpu: str) -> None:
    """Every thread of process ``pid`` on the CPUs ``cpu``."""
    subprocess.run(["taskset", "-a", "-pc", cpu, str(pid)], capture_output=True, check=True)


def endpoints(deployment: Deployment, servers: list[Server]) -> list[int]:
    """Where Envoy asks ``deployment``: its gRPC port, or each pyvoy instance's HTTP port."""
    return [server.http_port if deployment[0] == PYVOY else server.grpc_port for server in servers]


def server_cpu(servers: Sequence[Server]) -> dict[int, float]:
    """The CPU seconds of each of the servers' processes: each parent and those it started."""
    pids = [
        one for server in servers for one in (server.process.pid, *descendants(server.process.pid))
    ]
    return {pid: cpu_seconds(pid) for pid in pids}


def settle(servers: Sequence[Server], most: float = 10.0) -> None:
    """Wait until each of ``servers`` lets every decision in (``--max-wait``: a process whose
    event loop ran behind lets in a share for a second or two after), so that no check nor run
    starts on a process still shedding after the case before."""
    deadline = time.monotonic() + most
    while any(_admitted(server) < 1 for server in servers):
        if time.monotonic() > deadline:
            raise BenchmarkError(f"a server still sheds decisions after {most:g} s")
        time.sleep(0.1)


def _admitted(server: Server) -> float:
    """The share of decisions ``server`` lets in, from its ``/metrics`` (the least over its
    workers)."""
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith("ratekeeper_decisions_admitted_share "):
            return float(line.split()[1])
    raise BenchmarkError(f"{server.name}: no ratekeeper_decisions_admitted_share in /metrics")
