"""The decision service under load: ``python -m benchmarks --service``.

In one run, the real ``ratekeeper serve`` process (on the memory store, and on a Redis store
whose redis-server the benchmark starts on a free loopback port) against a hello world on the
same server stack (``benchmarks.service.baseline``: a raw ASGI app on uvicorn with the options
of ``ratekeeper serve``, and a ``grpc.aio`` ``ShouldRateLimit`` that decides nothing, on the
same event loop):

- HTTP ``POST /v1/check`` under wrk: a key with its limit, and a domain with one descriptor
  matched by a rule, on each store; and a key already over its limit (every answer a 429);
- gRPC ``envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`` under h2load, one
  descriptor matched by a rule, on each store; and one already over its limit.

A Starlette app of one route answering the same hello is measured too, for reference. Some
rows time production options as users run them, each on a server of its own started with the
option, right after the same row without it: the HTTP key on memory with ``--access-log``; the
gRPC descriptor on memory, allowed and refused, with ``--envoy-headers``; and the HTTP key, the
HTTP descriptor and the gRPC descriptor on memory with ``--dashboard`` (and its admin token),
each twice: with nobody looking, and with the dashboard's page open, asking ``/v1/stats`` once
a second (``benchmarks.service.page``). Each prints its ratio to the row without the option
and to the hello world, measured in the same run. ``--workers`` has no row: the servers share
one CPU, where two workers only take turns (see docs/benchmarks.md);
``benchmarks.service.workers`` measures it. When pyvoy (the ``pyvoy`` extra) is installed, the
``--server pyvoy`` rows run too: the HTTP key and the gRPC descriptor on memory, the gRPC
descriptor on Redis, and the gRPC hello world on pyvoy (``benchmarks.service.pyvoy_hello``);
a table of their own sets the gRPC rows against both gRPC hello worlds.

Every row runs ``connections`` connections for ``seconds`` after a warm-up, the rows taking
turns round by round (in reverse order every other round), each keeping its best round. The
ratio is a row's requests per second over its surface's hello world's; the CPU ratio is the
hello world's server CPU time per request over the row's, which other work on the machine
disturbs less (it cannot starve the load generator into flattering the rows).

No row can time the wrong path. Each measurement counts a fresh key. Before it, one request
through a real client (httpx, grpcio) must get the answer meant (allowed, not degraded; or
refused; a gRPC answer with the rate-limit headers in its ``response_headers_to_add`` exactly
when its server runs ``--envoy-headers``), and nghttp must read ``grpc-status: 0`` in the
trailers of the very request h2load sends. During it, every answer must be 2xx (a 429 on the
refusing rows) with no socket error. After it, the key's count (read with ``POST /v1/peek``)
must hold at least every request the load generator completed: an error answered instead of a
decision counts nothing; with ``--access-log``, the server's log file must hold a line for
each of them; with ``--dashboard``, its ``/v1/top`` must count them on the key, and the open
page's every poll must be answered 200. Anything else stops the run with an error.

With two or more CPUs and ``taskset``, the servers run on CPU 0, the load generator and
redis-server on CPU 1.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path

from benchmarks import report
from benchmarks.redis_store.server import RedisServer
from benchmarks.report import Output
from benchmarks.service import load
from benchmarks.service.load import LoadError
from benchmarks.service.measurement import (
    BASELINE,
    OPTIONS,
    PYVOY,
    REDIS,
    ROWS,
    RULES,
    SERVICE_QUICK,
    SHAPES,
    Measured,
    Measurement,
    Row,
    ServiceSizes,
)
from benchmarks.service.servers import Server, cpus
from benchmarks.trials import BenchmarkError

#: The target: a row's requests per second over its surface's hello world's.
TARGET = 0.6
#: The gRPC rows without options (``--service --grpc``).
GRPC_ROWS = tuple(row for row in ROWS if row.surface == "gRPC" and not row.option)
HEADERS = [
    "surface", "request", "store", "option", "requests/s", "p50 ms", "p99 ms", "/ hello world",
    f"≥ {TARGET:g}x", "CPU µs / request", "CPU ratio", "each round (requests/s)",
]  # fmt: skip


def _stack(baseline_log: Path) -> str:
    for line in baseline_log.read_text().splitlines():
        if line.startswith("ready "):
            _, loop, protocol = line.split()
            return f"event loop {loop}, HTTP protocol {protocol}"
    return "unknown"


def _versions() -> str:
    names = ("uvicorn", "uvloop", "httptools", "starlette", "grpcio", "protobuf", "redis")
    found = []
    for name in names:
        try:
            found.append(f"{name} {version(name)}")
        except Exception:
            found.append(f"{name} not installed")
    return ", ".join(found)


def _tool_versions() -> str:
    wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
    h2 = subprocess.run(["h2load", "--version"], capture_output=True, text=True, check=False)
    first = (wrk.stdout or wrk.stderr).split(" Copyright")[0].strip()
    return f"{first}; {h2.stdout.strip()}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def run(out: Output, sizes: ServiceSizes, rows: Sequence[Row] = ROWS) -> None:
    """Run ``rows`` (by default every row), round by round, and print the tables. A row with
    an option needs the same row without it among ``rows``, and every surface its hello world."""
    absent = load.missing()
    if absent:
        raise BenchmarkError(
            f"missing load generators: apt-get install {' '.join(absent)} "
            "(bash scripts/bench.sh --service installs them)"
        )
    server_cpu, load_cpu = cpus()
    if not pyvoy_installed():
        rows = [row for row in rows if row.option != PYVOY]
    out.emit("# ratekeeper benchmarks: the decision service", "", *report.machine())
    out.emit("", "## The decision service under load", "")
    with tempfile.TemporaryDirectory(prefix="ratekeeper-bench-service-") as name:
        directory = Path(name)
        (directory / "rules.yaml").write_text(RULES)
        measured = _measure(out, sizes, rows, directory, (server_cpu, load_cpu))
        stack = _stack(directory / "baseline.log")
    _emit(out, sizes, measured, stack, (server_cpu, load_cpu))
    _emit_options(out, measured)
    _emit_pyvoy(out, measured)
    if not pyvoy_installed():
        out.emit("", "(No `--server pyvoy` rows: pyvoy, the `pyvoy` extra, is not installed.)")


def pyvoy_installed() -> bool:
    """Whether pyvoy (the ``pyvoy`` extra) is installed beside this Python."""
    return Path(sys.executable).with_name("pyvoy").exists()


def _command(row: Row, redis_url: str) -> list[str]:
    """The command of the server ``row`` runs on."""
    if row.server == BASELINE and row.option == PYVOY:
        return [sys.executable, "-m", "benchmarks.service.pyvoy_hello"]
    if row.server == BASELINE:
        return [sys.executable, "-m", "benchmarks.service.baseline"]
    store = redis_url if row.server == REDIS else "memory://"
    return [
        sys.executable, "-m", "ratekeeper.cli", "serve", "--store", store,
        "--rules", "rules.yaml", "--config", "sqlite:///config.db",
        *row.arguments,
    ]  # fmt: skip


def _log_name(instance: str) -> str:
    """The name of a server (and of its log file), from its row's ``instance``."""
    return "baseline" if instance == BASELINE else instance.replace(" --", "-")


def _measure(
    out: Output,
    sizes: ServiceSizes,
    rows: Sequence[Row],
    directory: Path,
    pinned: tuple[str | None, str | None],
) -> dict[Row, Measured]:
    server_cpu, load_cpu = pinned
    measured = {row: Measured() for row in rows}
    with ExitStack() as stack:
        redis_url = ""
        if any(row.server == REDIS for row in rows):
            redis_server = stack.enter_context(RedisServer())
            redis_url, process = redis_server.url, redis_server.process
            if load_cpu is not None and process is not None:
                command = ["taskset", "-pc", load_cpu, str(process.pid)]
                subprocess.run(command, capture_output=True, check=True)
        servers: dict[str, Server] = {}
        for row in rows:  # one server per store and option, in the order of the rows
            if row.instance not in servers:
                name, command = _log_name(row.instance), _command(row, redis_url)
                server = Server(
                    name, command, directory, server_cpu, grpc_on_http=row.option == PYVOY
                )
                servers[row.instance] = stack.enter_context(server)
        for round_number in range(sizes.rounds):
            order = rows if round_number % 2 == 0 else rows[::-1]
            for index, row in enumerate(order):
                out.progress(f"round {round_number + 1}/{sizes.rounds}: {row.label}")
                tag = f"r{round_number}-{index}"
                measurement = Measurement(row, servers[row.instance], sizes, tag)
                try:
                    measured[row].results.append(measurement.run(load_cpu))
                except LoadError as error:
                    raise BenchmarkError(f"{row.label}: {error}") from None
    return measured


def _emit(
    out: Output,
    sizes: ServiceSizes,
    measured: dict[Row, Measured],
    stack: str,
    pinned: tuple[str | None, str | None],
) -> None:
    server_cpu, load_cpu = pinned
    instances = len({row.instance for row in measured})
    pinning = (
        f"the {instances} server processes on CPU {server_cpu} (`taskset`), the load generator "
        f"and redis-server on CPU {load_cpu}"
        if server_cpu is not None
        else "nothing pinned (fewer than 2 CPUs, or no taskset)"
    )
    out.emit(
        f"- Server stack (both): uvicorn with `ratekeeper serve`'s options, {stack}; gRPC "
        "`grpc.aio` on the same event loop. One process each.",
        f"- Libraries: {_versions()}",
        f"- Load generators: {_tool_versions()}",
        f"- Pinning: {pinning}.",
        f"- {sizes.connections} connections (h2load: one stream each), one generator thread; "
        f"{sizes.seconds:g} s per measurement after {sizes.warmup:g} s of warm-up; "
        f"{sizes.rounds} round(s), each row's best kept.",
        "",
    )
    baselines = _hellos(measured)
    rows = []
    for row, result in measured.items():
        baseline = baselines[row.surface]
        best = result.best.load
        ratio = best.rate / baseline.best.load.rate
        target = report.MISSING
        if row.server != BASELINE and not row.refused:
            target = "✓" if ratio >= TARGET else "✗"
        rounds = ", ".join(f"{one.load.rate:,.0f}" for one in result.results)
        rows.append([
            row.surface, row.shape, row.server, row.setting or report.MISSING, f"{best.rate:,.0f}",
            _ms(best.p50), _ms(best.p99),
            f"{ratio:.2f}x", target, f"{result.cpu * 1e6:,.0f}",
            f"{baseline.cpu / result.cpu:.2f}x", rounds,
        ])  # fmt: skip
    out.emit(*report.table(HEADERS, rows))
    out.emit(
        "",
        "*/ hello world* is the row's requests per second over its surface's hello world's (best "
        "round each), against the target. *CPU µs / request* is the server process's CPU time "
        "(user and system, all threads, from `/proc`) over the timed run, per request, the "
        "least over the rounds; *CPU ratio* is the hello world's over the row's: it is what the "
        "throughput ratio would be on an otherwise idle CPU, and is less disturbed by other "
        "work on the machine. *Each round* shows how far the rounds spread.",
    )
    out.emit("", "Requests:", "")
    for (surface, shape), text in SHAPES.items():
        if any((row.surface, row.shape) == (surface, shape) for row in measured):
            out.emit(f"- {surface} {shape}: {text}")


def _hellos(measured: dict[Row, Measured]) -> dict[str, Measured]:
    """Each surface's hello world on ``ratekeeper serve``'s own stack (no option)."""
    return {
        row.surface: measured[row] for row in measured if row.shape == "hello" and not row.option
    }


#: The table of the ``--server pyvoy`` rows.
PYVOY_HEADERS = [
    "request", "store", "requests/s", "CPU µs / request", "/ grpc.aio hello",
    "CPU ratio to grpc.aio hello", "/ pyvoy hello", "CPU ratio to pyvoy hello",
]  # fmt: skip


def _emit_pyvoy(out: Output, measured: dict[Row, Measured]) -> None:
    """The gRPC rows on ``--server pyvoy`` against both hello worlds of the same run: grpc.aio's
    (``ratekeeper serve``'s default stack) and the raw ASGI one on pyvoy."""
    on_pyvoy = [row for row in measured if row.option == PYVOY and row.surface == "gRPC"]
    hellos = [row for row in on_pyvoy if row.server == BASELINE]
    if not hellos:
        return
    aio, pyvoy = _hellos(measured)["gRPC"], measured[hellos[0]]
    rows = []
    for row in on_pyvoy:
        result = measured[row]
        rate = result.best.load.rate
        rows.append([
            row.shape, row.server, f"{rate:,.0f}", f"{result.cpu * 1e6:,.0f}",
            f"{rate / aio.best.load.rate:.2f}x", f"{aio.cpu / result.cpu:.2f}x",
            f"{rate / pyvoy.best.load.rate:.2f}x", f"{pyvoy.cpu / result.cpu:.2f}x",
        ])  # fmt: skip
    out.emit("", "### gRPC on `--server pyvoy`", "")
    out.emit(*report.table(PYVOY_HEADERS, rows))
    out.emit(
        "",
        "Each row against the gRPC hello world on grpc.aio (the table above's) and the same hello "
        "world as a raw ASGI app on pyvoy, measured in the same run: throughput (best round "
        "each) and CPU ratio (the hello world's CPU time a request over the row's).",
    )


#: The table of what each option costs.
OPTION_HEADERS = [
    "surface", "request", "store", "option", "requests/s (without → with)",
    "/ without the option", "CPU µs / request (without → with)", "CPU / without",
    "/ hello world (without → with)", "CPU ratio to hello world (without → with)",
]  # fmt: skip


def _emit_options(out: Output, measured: dict[Row, Measured]) -> None:
    """What each option costs: its rows against the same rows without it and the hello world,
    measured in the same run."""
    options = [row for row in measured if row.option]
    if not options:
        return
    baselines = _hellos(measured)
    rows = []
    for row in options:
        with_, without, hello = measured[row], measured[row.without], baselines[row.surface]
        rate, bare = with_.best.load.rate, without.best.load.rate
        hello_rate = hello.best.load.rate
        rows.append([
            row.surface, row.shape, row.server, row.setting, f"{bare:,.0f} → {rate:,.0f}",
            f"{rate / bare:.2f}x", f"{without.cpu * 1e6:,.0f} → {with_.cpu * 1e6:,.0f}",
            f"{without.cpu / with_.cpu:.2f}x",
            f"{bare / hello_rate:.2f}x → {rate / hello_rate:.2f}x",
            f"{hello.cpu / without.cpu:.2f}x → {hello.cpu / with_.cpu:.2f}x",
        ])  # fmt: skip
    out.emit("", "### What each production option costs", "")
    out.emit(*report.table(OPTION_HEADERS, rows))
    out.emit(
        "",
        "*/ without the option* is the row's requests per second over the same row's on the "
        "server without the option (best round each); *CPU / without* is the server's CPU time "
        "per request without the option over with it (below 1x: the option costs CPU). The "
        "hello-world ratios are those of the table above, without and with the option.",
        "",
        "Options:",
        "",
    )
    for option, text in OPTIONS.items():
        if any(row.option == option for row in options):
            out.emit(f"- `{option}`: {text}")


__all__ = ["GRPC_ROWS", "ROWS", "SERVICE_QUICK", "ServiceSizes", "run"]
