"""SIGTERM to ``ratekeeper serve`` with requests in flight: each is answered, then it exits 0.

"In flight" when the signal arrives means, for HTTP, a request written in full on a connection
the service had accepted: established and taken off the listen queue by the process (the
kernel's table says so: a connection still in the queue has no socket of the process yet). For
gRPC (one HTTP/2 connection, many calls), a call the client had started. Each of those gets its
whole answer, 200 or 429, or OK with the overall code. A connection still in the listen queue
when the service stops listening is reset, and a new one is refused; a gRPC call that starts
while the gRPC server stops fails ``UNAVAILABLE`` or ``CANCELLED``: clients and balancers
retry those elsewhere. Nothing is answered 5xx or cut short, nothing fails before the signal,
and the process exits 0.

- Under steady load: HTTP clients (each request on a connection of its own,
  ``http_load.exchange``) and gRPC clients that never pause, plus HTTP requests that sit
  half-sent (headers and part of the body: the service has begun to read them) across the
  signal and send the rest after it.
- Deciding: requests and calls that wait for the store (a Redis server pausing its writes)
  when the signal arrives, on each surface alone, so that each server's own graceful stop is
  what answers them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from tests.certificates import make_certificates
from tests.gateways import http_request, pyvoy_binary
from tests.servers import RedisServer, command, free_ports, wait_until
from tests.service.http_load import CLOSED, REFUSED, RESET, Exchange, Request, exchange
from tests.service.served import Served

RULES = """
domain: stop
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: second, requests_per_unit: 100, name: everyone}
"""
CHECK = Request(
    "POST",
    "/v1/check",
    (("Content-Type", "application/json"),),
    json.dumps(
        {
            "domain": "stop",
            "descriptors": [{"entries": [{"key": "generic_key", "value": "default"}]}],
        }
    ).encode(),
)
SHOULD = rls_pb2.RateLimitRequest(
    domain="stop",
    descriptors=[
        ratelimit_pb2.RateLimitDescriptor(
            entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="generic_key", value="default")]
        )
    ],
)
HTTP_CLIENTS = 32
GRPC_CLIENTS = 16
HALF_SENT = 16
#: Answers each kind of client has had before the signal, so that the load is steady.
WARM = 150
#: Seconds between the signal and the rest of the half-sent requests.
HELD = 0.3
#: Requests or calls waiting for the store when the signal comes, and seconds the store waits.
DECIDING = 20
PAUSE = 2.0
ANSWERED = {("OK", "OK"), ("OK", "OVER_LIMIT")}


@dataclass(frozen=True)
class Call:
    """One gRPC call: its status code's name and, when OK, the overall code's."""

    started: float
    ended: float
    code: str
    overall: str | None


@dataclass
class Stop:
    """What happened around the signal."""

    snapshot: float
    signalled: float
    accepted: set[int]  # client ports of the connections the service had accepted
    http: list[Exchange]
    half_sent: list[Exchange]
    grpc: list[Call]
    status: int


def accepted_ports(port: int) -> set[int]:
    """The client ports of the established connections to 127.0.0.1:``port`` that the
    listening process has accepted. In ``/proc/net/tcp``, a connection still in the listen
    queue has inode 0: no process holds a socket of it yet."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
        if state == "01" and int(local.split(":")[1], 16) == port and inode != "0":
            found.add(int(remote.split(":")[1], 16))
    return found


def in_flight(port: int) -> int:
    """The decisions under way in the service answering HTTP on ``port``, from its metrics."""
    for line in http_request(port, "/metrics").body.decode().splitlines():
        name, _, value = line.partition(" ")
        if name == "ratekeeper_decisions_in_flight":
            return int(float(value))
    return 0


async def http_client(port: int, done: list[Exchange], warm: asyncio.Event) -> None:
    while True:
        one = await exchange(port, CHECK, timeout=30)
        done.append(one)
        if len(done) >= WARM:
            warm.set()
        if not one.answered:  # refused, or reset while the service stops: it is gone
            return


async def call(stub: rls_pb2_grpc.RateLimitServiceStub) -> Call:
    started = time.monotonic()
    try:
        answer = await stub.ShouldRateLimit(SHOULD, timeout=30)
    except grpc.aio.AioRpcError as error:
        return Call(started, time.monotonic(), error.code().name, None)
    overall = rls_pb2.RateLimitResponse.Code.Name(answer.overall_code)
    return Call(started, time.monotonic(), "OK", overall)


async def grpc_client(port: int, done: list[Call], warm: asyncio.Event) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        while True:
            one = await call(stub)
            done.append(one)
            if len(done) >= WARM:
                warm.set()
            if one.code != "OK":  # the gRPC server has stopped
                return


async def stop_under_load(served: Served) -> Stop:
    http: list[Exchange] = []
    calls: list[Call] = []
    release = asyncio.Event()
    whole = CHECK.encode()
    half_sent = [
        asyncio.create_task(
            exchange(served.http, CHECK, timeout=30, pause=release, split=len(whole) - 5)
        )
        for _ in range(HALF_SENT)
    ]
    await asyncio.to_thread(
        wait_until, lambda: len(accepted_ports(served.http)) >= HALF_SENT, 10, "half-sent"
    )
    warm_http, warm_grpc = asyncio.Event(), asyncio.Event()
    clients = [
        *(
            asyncio.create_task(http_client(served.http, http, warm_http))
            for _ in range(HTTP_CLIENTS)
        ),
        *(
            asyncio.create_task(grpc_client(served.grpc, calls, warm_grpc))
            for _ in range(GRPC_CLIENTS)
        ),
    ]
    async with asyncio.timeout(60):
        await warm_http.wait()
        await warm_grpc.wait()
        snapshot = time.monotonic()
        accepted = accepted_ports(served.http)
        signalled = time.monotonic()
        os.kill(served.process.pid, signal.SIGTERM)
        await asyncio.sleep(HELD)
        release.set()
        held = await asyncio.gather(*half_sent)
        await asyncio.gather(*clients)
        status = await asyncio.to_thread(served.process.wait, 40)
    return Stop(snapshot, signalled, accepted, http, held, calls, status)


@dataclass
class Held:
    """Requests and calls that waited for the store across the signal, and the exit status."""

    signalled: float
    http: list[Exchange]
    grpc: list[Call]
    status: int


async def stop_while_deciding(
    served: Served,
    redis_port: int,
    surface: str,
    credentials: grpc.ChannelCredentials | None = None,
) -> Held:
    """``DECIDING`` requests (``surface`` ``"http"``) or calls (``"grpc"``) wait for the
    store, which pauses its writes for ``PAUSE`` seconds; the signal comes while they wait.
    With ``credentials``, the calls go over TLS (to localhost, the certificate's name)."""
    channel_ = (
        grpc.aio.insecure_channel(f"127.0.0.1:{served.grpc_port}")
        if credentials is None
        else grpc.aio.secure_channel(f"localhost:{served.grpc_port}", credentials)
    )
    async with channel_ as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        assert (await exchange(served.http, CHECK)).status == 200  # scripts loaded
        assert (await call(stub)).code == "OK"  # the channel connected
        command(redis_port, "CLIENT", "PAUSE", str(int(PAUSE * 1000)), "WRITE")
        paused = time.monotonic()
        http: list[asyncio.Task[Exchange]] = []
        calls: list[asyncio.Task[Call]] = []
        if surface == "http":
            http = [asyncio.create_task(exchange(served.http, CHECK)) for _ in range(DECIDING)]
            await asyncio.to_thread(
                wait_until,
                lambda: len(accepted_ports(served.http)) >= DECIDING,
                10,
                "connections accepted",
            )
        else:
            calls = [asyncio.create_task(call(stub)) for _ in range(DECIDING)]
        await asyncio.to_thread(
            wait_until, lambda: in_flight(served.http) >= DECIDING, PAUSE, "decisions under way"
        )
        await asyncio.sleep(PAUSE / 10)  # read, and waiting for the store
        signalled = time.monotonic()
        os.kill(served.process.pid, signal.SIGTERM)
        assert signalled < paused + PAUSE
        answered = await asyncio.gather(*http)
        called = await asyncio.gather(*calls)
        status = await asyncio.to_thread(served.process.wait, 40)
    return Held(signalled, answered, called, status)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    rules = tmp_path / "stop.yaml"
    rules.write_text(RULES)
    with (tmp_path / "serve.log").open("wb") as log:
        service = Served(tmp_path, "--rules", str(rules), stderr=log)
    try:
        yield service
    finally:
        service.kill()


@pytest.mark.slow
@pytest.mark.serial
def test_sigterm_under_load_answers_what_was_in_flight_and_exits_0(served: Served) -> None:
    stop = asyncio.run(stop_under_load(served))

    assert stop.status == 0
    assert {one.status for one in stop.half_sent} <= {200, 429}
    assert all(one.answered for one in stop.half_sent), stop.half_sent

    in_flight = [
        one
        for one in stop.http
        if one.sent is not None
        and one.sent < stop.signalled
        and one.connected is not None
        and one.connected < stop.snapshot < one.ended
        and one.local_port in stop.accepted
    ]
    # Under load, most connections wait in the listen queue and few are accepted but not yet
    # answered at any one moment (often none): the half-sent requests are always among them.
    assert [one for one in in_flight if not one.answered] == []
    assert {one.status for one in stop.http if one.answered} <= {200, 429}
    failed = [one for one in stop.http if not one.answered]
    assert {one.error for one in failed} <= {REFUSED, RESET, CLOSED}
    assert all(one.ended > stop.signalled for one in failed)

    before = [one for one in stop.grpc if one.started < stop.signalled]
    assert {(one.code, one.overall) for one in before} <= ANSWERED
    after = {(one.code, one.overall) for one in stop.grpc if one.started > stop.signalled}
    assert after <= ANSWERED | {("UNAVAILABLE", None), ("CANCELLED", None)}


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("server", ["uvicorn", "pyvoy"])
@pytest.mark.parametrize("surface", ["http", "grpc"])
def test_sigterm_while_deciding_waits_for_the_decisions(
    tmp_path: Path, surface: str, server: str
) -> None:
    """On ``--server pyvoy`` too: Envoy stops listening, the requests under way are answered,
    then Envoy stops."""
    if server == "pyvoy" and pyvoy_binary() is None:
        pytest.skip("pyvoy is not installed (the pyvoy extra)")
    redis = RedisServer(tmp_path / "redis")
    rules = tmp_path / "stop.yaml"
    rules.write_text(RULES)
    store = f"{redis.url}?timeout={PAUSE * 5}"  # the store is slow, not down
    try:
        with (tmp_path / "serve.log").open("wb") as log:
            served = Served(
                tmp_path, "--server", server, "--store", store, "--rules", str(rules), stderr=log
            )
        try:
            held = asyncio.run(stop_while_deciding(served, redis.port, surface))
        finally:
            served.kill()
    finally:
        redis.stop()

    assert held.status == 0
    assert len(held.http) == (DECIDING if surface == "http" else 0)
    assert {one.status for one in held.http} <= {200, 429}
    assert all(one.answered and one.ended > held.signalled for one in held.http)
    assert len(held.grpc) == (DECIDING if surface == "grpc" else 0)
    assert {(one.code, one.overall) for one in held.grpc} <= ANSWERED
    assert all(one.ended > held.signalled for one in held.grpc)


@pytest.mark.slow
@pytest.mark.serial
def test_sigterm_over_mtls_waits_for_the_calls_in_flight(tmp_path: Path) -> None:
    files = make_certificates(tmp_path / "certificates", {"envoy": "DNS:envoy.mesh"})
    redis = RedisServer(tmp_path / "redis")
    rules = tmp_path / "stop.yaml"
    rules.write_text(RULES)
    tls = [
        *("--grpc-tls-cert", str(files["server.crt"]), "--grpc-tls-key", str(files["server.key"])),
        *("--grpc-tls-client-ca", str(files["ca.crt"]), "--grpc-tls-client-san", "envoy.mesh"),
    ]
    key, chain = files["envoy.key"].read_bytes(), files["envoy.crt"].read_bytes()
    credentials = grpc.ssl_channel_credentials(files["ca.crt"].read_bytes(), key, chain)
    store = f"{redis.url}?timeout={PAUSE * 5}"
    try:
        with (tmp_path / "serve.log").open("wb") as log:
            served = Served(tmp_path, "--store", store, "--rules", str(rules), *tls, stderr=log)
        try:
            held = asyncio.run(stop_while_deciding(served, redis.port, "grpc", credentials))
        finally:
            served.kill()
    finally:
        redis.stop()

    assert held.status == 0
    assert len(held.grpc) == DECIDING
    assert {(one.code, one.overall) for one in held.grpc} <= ANSWERED
    assert all(one.ended > held.signalled for one in held.grpc)


#: Runs ``ratekeeper serve`` (argv[1:]) in this process, sending itself SIGTERM the moment the
#: service logs where it will listen: before the server has started.
EARLY_SIGTERM = """
import logging, os, signal, sys
from ratekeeper.cli.main import main

class Stop(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("listening on"):
            os.kill(os.getpid(), signal.SIGTERM)

logging.getLogger("ratekeeper.service").addHandler(Stop())
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_before_the_server_has_started_stops_it_once_started(tmp_path: Path) -> None:
    """A SIGTERM between the service's start and the server's is not lost: the service still
    stops, cleanly (exit 0, "stopped" logged), rather than running on."""
    http, grpc_port = free_ports(2)
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            EARLY_SIGTERM,
            "serve",
            "--http",
            f"127.0.0.1:{http}",
            "--grpc",
            f"127.0.0.1:{grpc_port}",
        ],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert process.returncode == 0, process.stderr
    assert "stopped" in process.stderr.splitlines()[-1]
