"""Redis commands a decision under load: ``python -m benchmarks.service.redis_commands``.

``ratekeeper serve --store redis://…`` on a redis-server of the benchmark's own, on each server
stack (uvicorn with grpc.aio beside it, and ``--server pyvoy`` when pyvoy is installed), pinned
to CPU 0 with the load generator on CPU 1 (``servers.cpus``), ``--instances 1`` so that no roll
call of the fleet writes to the store. One rule (``client``, never reached), one descriptor:
HTTP ``POST /v1/check`` under wrk and gRPC ``ShouldRateLimit`` under h2load, 64 connections.
Around each run, ``INFO commandstats`` (which counts a script's own calls): the commands a
decision, by name.

A decision of one descriptor on a fixed window is one hit of a batch script run (``FCALL``),
which reads the server's clock once (``TIME``) and reads and writes the hit's key (``GET``,
``SET``): a batch of ``b`` hits costs ``2 + 2 / b`` commands a decision. One call at a time,
every door sends exactly four (``tests/service/test_redis_commands.py``); under load the batch
holds the calls that came in while the one before was on its way, so the figure is how many
calls a stack hands over together. ``--seconds`` sets each run's length.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import report
from benchmarks.redis_store.server import RedisServer
from benchmarks.service import load
from benchmarks.service.servers import GRPC_METHOD, Server, cpus
from benchmarks.service.suite import pyvoy_installed
from ratekeeper.service.proto import rls_pb2

RULES = """
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 1000000000}
"""
CONNECTIONS = 64
COMMANDS = ("fcall", "time", "get", "set")


def commands(redis: RedisServer) -> Counter[str]:
    """Every command the server has run, by name."""
    stats = redis.admin.info("commandstats")
    return Counter(
        {name.removeprefix("cmdstat_"): int(one["calls"]) for name, one in stats.items()}
    )


def measure(server: Server, redis: RedisServer, door: str, seconds: float) -> list[str]:
    """One door's run on ``server``: its row of the table."""
    value = f"{door}-{time.time_ns()}"
    load_cpu = cpus()[1]
    if door == "HTTP":
        entries = [{"key": "client", "value": value}]
        body = json.dumps({"domain": "bench", "descriptors": [{"entries": entries}]}).encode()

        def run(length: float) -> load.Load:
            url = server.url + "/v1/check"
            return load.wrk(url, body, connections=CONNECTIONS, seconds=length, cpus=load_cpu)
    else:
        request = rls_pb2.RateLimitRequest(domain="bench")
        request.descriptors.add().entries.add(key="client", value=value)
        data = load.grpc_frame(request.SerializeToString())
        if load.grpc_status(server.grpc_url + GRPC_METHOD, data) != "0":
            raise RuntimeError(f"{server.name}: ShouldRateLimit is not answered OK")

        def run(length: float) -> load.Load:
            url = server.grpc_url + GRPC_METHOD
            return load.h2load(url, data, connections=CONNECTIONS, seconds=length, cpus=load_cpu)

    run(1.0)  # warm-up
    before = commands(redis)
    timed = run(seconds)
    sent = commands(redis)
    sent.subtract(before)
    if timed.failures:
        raise RuntimeError(f"{server.name} {door}: {timed.failures} answers were not successes")
    per = {name: sent[name] / timed.requests for name in COMMANDS}
    hits = per["get"] / per["fcall"] if per["fcall"] else float("nan")
    total = sum(count for name, count in sent.items() if name != "info") / timed.requests
    return [
        server.name, door, report.rate(timed.rate), *(f"{per[name]:.3f}" for name in COMMANDS),
        f"{total:.3f}", f"{hits:.1f}",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.service.redis_commands", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="each run's length (4)")
    args = parser.parse_args(argv)
    absent = load.missing()
    if absent:
        print(f"missing: apt-get install {' '.join(absent)}", file=sys.stderr)
        return 2
    stacks = {"uvicorn + grpc.aio": ()}
    if pyvoy_installed():
        stacks["pyvoy"] = ("--server", "pyvoy")
    rows = []
    command = shlex.join([sys.executable, "-m", "benchmarks.service.redis_commands", *sys.argv[1:]])
    with (
        tempfile.TemporaryDirectory(prefix="ratekeeper-redis-commands-") as name,
        RedisServer() as redis,
    ):
        directory = Path(name)
        (directory / "rules.yaml").write_text(RULES)
        for stack, flags in stacks.items():
            serve = [
                sys.executable, "-m", "ratekeeper.cli", "serve", "--store", redis.url,
                "--rules", "rules.yaml", "--config", "sqlite:///config.db", "--instances", "1",
                *flags,
            ]  # fmt: skip
            with Server(stack, serve, directory, cpus()[0], grpc_on_http=bool(flags)) as server:
                rows += [measure(server, redis, door, args.seconds) for door in ("HTTP", "gRPC")]
    headers = [
        "stack", "door", "decisions/s", *(f"{name.upper()} / decision" for name in COMMANDS),
        "all commands / decision", "hits a batch",
    ]  # fmt: skip
    print(f"- Command: `{command}`")
    print(f"- Date: {datetime.now(UTC).isoformat(timespec='seconds')}; load {report.load()}")
    print(f"- {CONNECTIONS} connections, {args.seconds:g} s a run after 1 s of warm-up\n")
    print("\n".join(report.table(headers, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
