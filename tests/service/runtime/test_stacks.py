"""Every behaviour of the default stack (uvicorn with grpc.aio) on ``--server pyvoy`` too: each
test runs on both, as a real ``ratekeeper serve`` process (pyvoy's skipped when pyvoy, the
``pyvoy`` extra, is not installed).

- **Probes and health**: ``/healthz`` and ``/readyz`` answer 200; the gRPC health service says
  ``SERVING`` for the server and the rate-limit service, and ``Watch`` sends it.
- **The bound on a message**: a gRPC message over 4 MiB is ``RESOURCE_EXHAUSTED`` in
  grpc.aio's words (which it starts with ``SERVER: ``), and the server goes on answering.
- **Deadlines, and the bound on decisions in flight**, while the store hangs (Redis stopped,
  ``--max-in-flight 1``): a call sent with ``grpc-timeout: 300m`` by a client that keeps no
  deadline of its own (nghttp) is answered ``DEADLINE_EXCEEDED`` by the server and frees its
  place; a call that holds the one place makes the next one ``UNAVAILABLE`` at once, with
  ``retry-after``; once Redis runs again, the held call is answered ``OK``.
- **The wait bound** (``--max-wait``): the process running the event loop (uvicorn's, or
  pyvoy's Envoy) stopped for half a second while idle sheds nothing after (one late reading
  is a stall it recovered from); starved of CPU (3 ms in every 150), its loop behind at every
  reading, it sheds a share of the gRPC calls (``UNAVAILABLE``, naming the wait), counted in
  ``ratekeeper_requests_shed_total``, and a second or two later lets every call in again.
- **Metrics and the dashboard add up**: decisions over HTTP and gRPC, on several connections,
  are each counted once in ``/metrics`` and in the dashboard's ``/v1/top``, on Redis, with
  ``--workers 2`` on the default stack (each worker answers some) and one pyvoy instance.

SIGTERM's drain on both stacks is in ``test_graceful_stop.py``; the health service following
the rules and the store in ``tests/service/test_healthcheck.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from tests.gateways import pyvoy_binary
from tests.servers import RedisServer, wait_until
from tests.service.served import Served

pytestmark = [pytest.mark.slow]

RULES = """
domain: stacks
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000, name: per_user}
"""
TOKEN = "stacks-admin-token-0123456789abcdef"
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OK = rls_pb2.RateLimitResponse.OK
SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(params=["uvicorn", "pyvoy"])
def server(request: pytest.FixtureRequest) -> str:
    if request.param == "pyvoy" and pyvoy_binary() is None:
        pytest.skip("pyvoy is not installed (the pyvoy extra)")
    name: str = request.param
    return name


def serve(directory: Path, server: str, *flags: str) -> Served:
    directory.mkdir(exist_ok=True)
    (directory / "rules.yaml").write_text(RULES)
    return Served(directory, "--server", server, "--rules", "rules.yaml", *flags)


def request(user: str = "alice") -> rls_pb2.RateLimitRequest:
    entry = ratelimit_pb2.RateLimitDescriptor.Entry(key="user", value=user)
    descriptor = ratelimit_pb2.RateLimitDescriptor(entries=[entry])
    return rls_pb2.RateLimitRequest(domain="stacks", descriptors=[descriptor])


def metric(served: Served, name: str, *, live: bool = False) -> float | None:
    """The sum of ``name``'s samples in ``served``'s ``/metrics`` (0 when it has none).
    ``live``: None when the answer is a copy (an ``Age`` header): uvicorn's door answers
    ``/metrics`` from a copy of at most a few seconds while the process sheds."""
    answer = httpx.get(f"{served.url}/metrics", timeout=10)
    if live and "age" in answer.headers:
        return None
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in answer.text.splitlines()
        if line.startswith((f"{name} ", f"{name}{{"))
    )


def loop_process(served: Served, server: str) -> int:
    """The pid of the process whose event loop decides: pyvoy runs Python in its Envoy, the
    service's child; uvicorn with one worker in the service's own process."""
    if server == "uvicorn":
        return served.process.pid
    pid = served.process.pid
    (child,) = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(child)


def test_the_probes_and_the_health_service_answer(tmp_path: Path, server: str) -> None:
    served = serve(tmp_path, server)
    try:
        healthz = httpx.get(f"{served.url}/healthz", timeout=10)
        readyz = httpx.get(f"{served.url}/readyz", timeout=10)
        with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            names = ("", "envoy.service.ratelimit.v3.RateLimitService")
            checked = [
                health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
                for name in names
            ]
            watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
            watched = next(iter(watch)).status
            watch.cancel()
    finally:
        assert served.stop() == 0
    assert (healthz.status_code, healthz.json()) == (200, {"status": "ok"})
    assert readyz.status_code == 200
    assert checked == [SERVING, SERVING]
    assert watched == SERVING


def test_a_message_over_4_mib_is_resource_exhausted(tmp_path: Path, server: str) -> None:
    served = serve(tmp_path, server)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
            raw = channel.unary_unary(METHOD)
            with pytest.raises(grpc.RpcError) as raised:
                raw(b"\x0a" + b"\x00" * (4 * 1024 * 1024), timeout=10)
            after = rls_pb2_grpc.RateLimitServiceStub(channel).ShouldRateLimit(
                request(), timeout=10
            )
    finally:
        assert served.stop() == 0
    error = raised.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    # grpc.aio puts "SERVER: " before it
    assert error.details().endswith(  # type: ignore[attr-defined]
        "Received message larger than max (4194305 vs. 4194304)"
    )
    assert after.overall_code == OK


@pytest.fixture
def hanging(tmp_path: Path, server: str) -> Iterator[tuple[Served, RedisServer]]:
    """The service on a Redis that is stopped (SIGSTOP) once the test says so, waiting 30 s
    for it, with one decision in flight at most."""
    redis = RedisServer(tmp_path / "redis")
    store = f"{redis.url}?timeout=30"  # a decision waits for Redis, not for a timeout
    served = serve(tmp_path / "service", server, "--store", store, "--max-in-flight", "1")
    try:
        yield served, redis
    finally:
        os.kill(redis.pid, signal.SIGCONT)
        served.stop()
        redis.stop()


def _nghttp_status(port: int, timeout: str) -> tuple[str, float]:
    """The ``grpc-status`` a call sent by nghttp with ``grpc-timeout: timeout`` is answered,
    and the seconds it took: nghttp keeps no deadline of its own."""
    frame = request("deadline").SerializeToString()
    body = Path(os.environ.get("TMPDIR", "/tmp")) / f"stacks-{os.getpid()}-{port}.bin"
    body.write_bytes(b"\x00" + len(frame).to_bytes(4, "big") + frame)
    headers = ["content-type: application/grpc", "te: trailers", f"grpc-timeout: {timeout}"]
    command = ["nghttp", "-v", "-d", str(body)]
    for header in headers:
        command += ["-H", header]
    started = time.monotonic()
    try:
        done = subprocess.run(
            [*command, f"http://127.0.0.1:{port}{METHOD}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        body.unlink()
    took = time.monotonic() - started
    statuses = [
        line.rsplit("grpc-status: ", 1)[1].strip()
        for line in done.stdout.splitlines()
        if "grpc-status: " in line and "recv" in line
    ]
    assert statuses, done.stdout[-2000:]
    return statuses[-1], took


@pytest.mark.skipif(shutil.which("nghttp") is None, reason="nghttp (nghttp2-client) is needed")
def test_deadlines_and_the_bound_on_decisions_in_flight_while_the_store_hangs(
    hanging: tuple[Served, RedisServer],
) -> None:
    served, redis = hanging
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        assert stub.ShouldRateLimit(request(), timeout=10).overall_code == OK
        os.kill(redis.pid, signal.SIGSTOP)
        status, took = _nghttp_status(served.grpc_port, "300m")
        assert status == "4"  # DEADLINE_EXCEEDED, from the server
        assert 0.25 < took < 5
        wait_until(
            lambda: metric(served, "ratekeeper_decisions_in_flight") == 0,
            10,
            "the call past its deadline to leave its place",
        )
        held = stub.ShouldRateLimit.future(request("held"), timeout=60)
        wait_until(
            lambda: metric(served, "ratekeeper_decisions_in_flight") == 1,
            10,
            "one decision in flight",
        )
        with pytest.raises(grpc.RpcError) as raised:
            stub.ShouldRateLimit(request("shed"), timeout=10)
        shed = raised.value
        assert shed.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert "overloaded" in shed.details()  # type: ignore[attr-defined]
        trailers = dict(shed.trailing_metadata() or ())  # type: ignore[attr-defined]
        assert trailers.get("retry-after") == "1"
        wait_until(
            lambda: (metric(served, "ratekeeper_requests_shed_total") or 0) >= 1,
            10,
            "the shed call counted",
        )
        os.kill(redis.pid, signal.SIGCONT)
        assert held.result(timeout=30).overall_code == OK


@contextmanager
def deciding(
    tmp_path: Path, server: str
) -> Iterator[tuple[Served, rls_pb2_grpc.RateLimitServiceStub, int]]:
    """A service on ``server`` that has answered one call ``OK``, a stub on its gRPC port,
    and the pid of the process whose loop decides (``loop_process``); stopped after, exit 0."""
    served = serve(tmp_path, server)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
            stub = rls_pb2_grpc.RateLimitServiceStub(channel)
            assert stub.ShouldRateLimit(request(), timeout=10).overall_code == OK
            yield served, stub, loop_process(served, server)
    finally:
        assert served.stop() == 0


def _calls(
    stub: rls_pb2_grpc.RateLimitServiceStub, count: int
) -> tuple[list[grpc.StatusCode], list[str]]:
    """``count`` calls, one after another: each one's code, and the details of each refused."""
    codes: list[grpc.StatusCode] = []
    details: list[str] = []
    for _ in range(count):
        try:
            stub.ShouldRateLimit(request(), timeout=10)
            codes.append(grpc.StatusCode.OK)
        except grpc.RpcError as error:
            codes.append(error.code())  # type: ignore[attr-defined]
            details.append(error.details())  # type: ignore[attr-defined]
    return codes, details


def test_a_process_stopped_while_idle_sheds_nothing_after(tmp_path: Path, server: str) -> None:
    # A busy host or a CPU quota can hold an idle process for a while: its loop reads one late
    # timer, then is on time again. Nothing waited behind it, and nothing is shed.
    with deciding(tmp_path, server) as (served, stub, pid):
        for _ in range(3):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.5)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.02)  # the loop's first reading after: half a second late
            codes, _ = _calls(stub, 3)
            assert codes == [grpc.StatusCode.OK] * 3
        shed = metric(served, "ratekeeper_requests_shed_total")
    assert shed == 0


def test_a_process_starved_of_cpu_sheds_a_share_then_lets_all_in(
    tmp_path: Path, server: str
) -> None:
    # The process runs 3 ms in every 150 (less than a reading's 10 ms): its loop is behind at
    # every reading, and it sheds while calls come from four clients, one after another each.
    with deciding(tmp_path, server) as (served, stub, pid):
        starving = True

        def calls() -> tuple[list[grpc.StatusCode], list[str]]:
            codes: list[grpc.StatusCode] = []
            details: list[str] = []
            while starving:
                one, why = _calls(stub, 1)
                codes += one
                details += why
            return codes, details

        with ThreadPoolExecutor(4) as pool:
            clients = [pool.submit(calls) for _ in range(4)]
            try:
                ends = time.monotonic() + 2.0
                while time.monotonic() < ends:
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(0.15)
                    os.kill(pid, signal.SIGCONT)
                    time.sleep(0.003)
            finally:  # running again, and the clients stop, whatever happened
                os.kill(pid, signal.SIGCONT)
                starving = False
            results = [client.result(timeout=60) for client in clients]
        codes = [code for one, _ in results for code in one]
        details = [why for _, whys in results for why in whys]
        wait_until(
            lambda: metric(served, "ratekeeper_decisions_admitted_share", live=True) == 1,
            10,
            "every decision let in again",
        )
        shed = metric(served, "ratekeeper_requests_shed_total")
        after = [stub.ShouldRateLimit(request(), timeout=10) for _ in range(5)]
    assert grpc.StatusCode.UNAVAILABLE in codes, codes
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}
    assert all("longer than the 0.1 s" in one for one in details), details
    assert shed == codes.count(grpc.StatusCode.UNAVAILABLE)
    assert [one.overall_code for one in after] == [OK] * 5


def test_decisions_add_up_in_the_metrics_and_the_dashboard(
    tmp_path: Path, server: str, redis_server: RedisServer
) -> None:
    workers = ("--workers", "2") if server == "uvicorn" else ()
    # --max-wait 2: a worker just started, on a machine busy with other tests, reads its loop
    # as behind the default 0.1 s and sheds a share of calls (the wait bound's own test is above)
    flags = ("--store", redis_server.url, *workers, "--max-wait", "2")
    served = serve(tmp_path, server, *flags, "--dashboard", "--admin-token", TOKEN)
    user = f"sum-{time.time_ns()}"
    body = {"domain": "stacks", "descriptors": [{"entries": [{"key": "user", "value": user}]}]}
    try:
        before = metric(served, "ratekeeper_decisions_total") or 0

        def over_http(_: int) -> int:
            with httpx.Client(timeout=10) as client:  # a connection each: each worker some
                return client.post(f"{served.url}/v1/check", json=body).status_code

        def over_grpc(_: int) -> int:
            with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
                stub = rls_pb2_grpc.RateLimitServiceStub(channel)
                return int(stub.ShouldRateLimit(request(user), timeout=10).overall_code)

        with ThreadPoolExecutor(4) as pool:
            http = list(pool.map(over_http, range(20)))
            calls = list(pool.map(over_grpc, range(20)))
        wait_until(
            lambda: (metric(served, "ratekeeper_decisions_total") or 0) - before == 40,
            15,
            "/metrics to count the 40 decisions",
        )
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        page = httpx.get(f"{served.url}/dashboard", headers=bearer, timeout=10)

        def counted() -> int:
            top = httpx.get(f"{served.url}/v1/stats", headers=bearer, timeout=10).json()["top"]
            keys = {one["key"]: one["count"] for one in top["requests"]["keys"]}
            return int(keys.get(f"user:{user}", 0))

        wait_until(lambda: counted() == 40, 15, "the dashboard to count the 40 decisions")
    finally:
        assert served.stop() == 0
    assert http == [200] * 20
    assert calls == [OK] * 20
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
