"""The reference's integration scripts, run by bash through real Envoys in front of
``ratekeeper serve``, as envoyproxy/ratelimit's own integration test runs them.

Its ``integration-test/docker-compose-integration-test.yml`` runs the service with a handful
of variables, a Redis, a StatsD exporter, Envoy's example proxy in front of it and a second
Envoy (its example mock) as the application behind the proxy, and ``run-all.sh`` runs every
``integration-test/scripts/*.sh`` in turn. Here the same runs on loopback:

- ``ratekeeper serve`` with no flag, only those variables, hosts and ports made the tests'
  (``RESPONSE_DYNAMIC_METADATA=true``, ``RUNTIME_WATCH_ROOT=false``, ``LOG_LEVEL=debug``,
  ``REDIS_SOCKET_TYPE=tcp``, ``REDIS_URL``, ``RUNTIME_ROOT``, ``RUNTIME_SUBDIRECTORY``,
  ``USE_STATSD=true``, ``STATSD_HOST``, ``STATSD_PORT``); the runtime directory holds the
  reference's example configurations (``tests/fixtures/rules/envoy/examples``) where the
  compose file mounts them, ``RUNTIME_ROOT/ratelimit/config``; a real redis-server; StatsD
  goes to a TCP listener that reads and drops what it is sent;
- the proxy: Envoy running ``tests/fixtures/envoy_ratelimit/proxy.yaml``, the mock: Envoy
  running ``mock.yaml`` there (its two listeners answer ``Hello World from Service 1`` and
  ``... 2``), both with only their addresses and ports changed, and the rate-limit filter's
  timeout raised from Envoy's default 20 ms to 2 s (the example does not set it; an answer
  later than that, on a machine the tests share, would let a request through undecided);
- the scripts: copies in ``tests/fixtures/envoy_ratelimit/scripts``, each checking every step
  and reading the proxy's address from ``PROXY`` (their README says what changed), run by bash
  in ``run-all.sh``'s order. Each starts with ``ROOM`` seconds left in the minute at least
  (the example's limits are per minute, in fixed windows), and ``token-quota.sh`` at the start
  of a minute: the last request of ``quota.sh`` debits service_2's bucket, which it checks
  from empty, in the same minute otherwise.

After the run, every call Envoy made to ratekeeper was answered (none failed and let through),
and every request of ``multiservice-tokenquota.sh`` was routed by the metadata ratekeeper
answered (Envoy's subset load balancer picked a subset each time, never fell back).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.gateways import EnvoyServer, http_request
from tests.processes import free_ports
from tests.servers import RedisServer, command
from tests.service.served import Served

pytestmark = [pytest.mark.slow, pytest.mark.serial]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLES = FIXTURES / "rules" / "envoy" / "examples"
REFERENCE = FIXTURES / "envoy_ratelimit"
SCRIPTS = REFERENCE / "scripts"
#: ``run-all.sh``'s order (``/test/scripts/*``), less the one whose metrics ratekeeper does
#: not serve yet (``test_value_included_in_stats_key_when_unspecified``).
RUN_ALL = [
    "multiservice-tokenquota.sh",
    "quota.sh",
    "replaces.sh",
    "simple-get.sh",
    "token-quota.sh",
    "trigger-ratelimit.sh",
    "trigger-shadow-mode-key.sh",
]
STATS_SCRIPT = "value-included-in-stats-key-when-unspecified.sh"
#: The scripts that check buckets debited by an earlier script in the same minute.
FRESH_MINUTE = {"token-quota.sh"}
#: Seconds a script needs left in the current minute before its own wait, if any.
ROOM = 15.0
#: How many times ``multiservice-tokenquota.sh`` runs in a row, each on empty buckets.
REPEATS = 5


class Sink:
    """A TCP listener on a free loopback port that takes every connection and drops what it
    reads: a StatsD server for a service told to send StatsD over TCP."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._drain, args=(connection,), daemon=True).start()

    def _drain(self, connection: socket.socket) -> None:
        with connection:
            while data := connection.recv(65536):
                self.received += len(data)

    def stop(self) -> None:
        self.server.close()
        self.thread.join(timeout=5)


def mock_config(service_1: int, service_2: int, admin: int) -> str:
    """The reference's example mock on loopback: Service 1 on ``service_1``, Service 2 on
    ``service_2``, its admin on ``admin``."""
    text = (REFERENCE / "mock.yaml").read_text()
    for old, new in [
        ("port_value: 9999", f"port_value: {service_1}"),
        ("port_value: 10001", f"port_value: {service_2}"),
        ("port_value: 8001", f"port_value: {admin}"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    assert text.count("address: 0.0.0.0") == 3
    return text.replace("address: 0.0.0.0", "address: 127.0.0.1")


def proxy_config(
    port: int, admin: int, ratekeeper_grpc: int, service_1: int, service_2: int
) -> str:
    """The reference's example proxy on loopback: its listener on ``port``, its admin on
    ``admin``, its ``ratelimit`` cluster at ratekeeper's gRPC port, ``envoy-mock:9999`` and
    ``:10001`` the mock's two services; and the rate-limit filter's timeout 2 s."""
    text = (REFERENCE / "proxy.yaml").read_text()
    for old, new in [
        ("domain: rl\n", "domain: rl\n                      timeout: 2s\n"),
        ("port_value: 8001", f"port_value: {admin}"),
        ("port_value: 8888", f"port_value: {port}"),
        ("address: ratelimit\n", "address: 127.0.0.1\n"),
        ("port_value: 8081", f"port_value: {ratekeeper_grpc}"),
        ("port_value: 10001", f"port_value: {service_2}"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    for old, new, count in [
        ("address: 0.0.0.0", "address: 127.0.0.1", 2),
        ("address: envoy-mock", "address: 127.0.0.1", 3),
        ("port_value: 9999", f"port_value: {service_1}", 2),
    ]:
        assert text.count(old) == count, old
        text = text.replace(old, new)
    return text


@dataclass
class Stack:
    """What the scripts run against: ratekeeper, its Redis, the two Envoys."""

    redis: RedisServer
    served: Served
    proxy: EnvoyServer
    mock: EnvoyServer
    sink: Sink
    directory: Path

    def run(self, script: str, **environ: str) -> subprocess.CompletedProcess[str]:
        """``bash script`` with the proxy's address in ``PROXY``; its output kept."""
        return subprocess.run(
            ["bash", str(SCRIPTS / script)],
            env={"PATH": os.environ["PATH"], "PROXY": f"127.0.0.1:{self.proxy.port}", **environ},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def counters(self, pattern: str) -> dict[str, int]:
        """The proxy's counters whose names match ``pattern`` (a regular expression with one
        group, the part kept), summed by that part."""
        text = http_request(self.proxy.admin_port, "/stats").body.decode()
        found: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            matched = re.fullmatch(pattern, name)
            if matched is not None and value.isdigit():
                found[matched[1]] = found.get(matched[1], 0) + int(value)
        return found

    def ratelimit_calls(self) -> dict[str, int]:
        """Envoy's counts of its rate-limit calls by outcome (``ok``, ``over_limit``,
        ``error``, ``failure_mode_allowed``), over every route's cluster."""
        return self.counters(r"cluster\.[^.]+\.ratelimit\.(\w+)")

    def subsets(self) -> dict[str, int]:
        """The multiservice cluster's subset load balancer: ``lb_subsets_selected`` and
        ``lb_subsets_fallback``, how often it found the subset the request's metadata named,
        and how often it fell back to any endpoint."""
        return self.counters(r"cluster\.multiservice\.(lb_subsets_(?:selected|fallback))")

    def empty_buckets(self) -> None:
        command(self.redis.port, "FLUSHALL")


def reference_environment(data: Path, redis: RedisServer, statsd: Sink) -> dict[str, str]:
    """The ratelimit service's environment in the reference's integration test, its hosts
    and ports made the tests'."""
    return {
        "USE_STATSD": "true",
        "STATSD_HOST": "127.0.0.1",
        "STATSD_PORT": str(statsd.port),
        "LOG_LEVEL": "debug",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": f"127.0.0.1:{redis.port}",
        "RUNTIME_ROOT": str(data),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "RUNTIME_WATCH_ROOT": "false",
        "RESPONSE_DYNAMIC_METADATA": "true",
    }


@contextmanager
def running(directory: Path, **more: str) -> Iterator[Stack]:
    """The stack, ratekeeper's environment the reference's and ``more``."""
    config = directory / "data" / "ratelimit" / "config"  # the compose file's mount
    config.mkdir(parents=True)
    for example in sorted(EXAMPLES.glob("*.yaml")):
        shutil.copy(example, config / example.name)
    with ExitStack() as started:  # each server stopped, last started first, whatever fails
        sink = Sink()
        started.callback(sink.stop)
        redis = RedisServer(directory / "redis")
        started.callback(redis.stop)
        served = Served(
            directory,
            environ={**reference_environment(directory / "data", redis, sink), **more},
            stderr=subprocess.PIPE,
            reference_addresses=True,
        )
        started.callback(served.kill)
        service_1, service_2, mock_admin, port, admin = free_ports(5)
        mock = EnvoyServer(
            directory / "mock",
            mock_config(service_1, service_2, mock_admin),
            port=service_1,
            admin_port=mock_admin,
        )
        started.callback(mock.stop)
        proxy = EnvoyServer(
            directory / "proxy",
            proxy_config(port, admin, served.grpc, service_1, service_2),
            port=port,
            admin_port=admin,
        )
        started.callback(proxy.stop)
        yield Stack(redis, served, proxy, mock, sink, directory)
        proxy.stop()
        mock.stop()
        status = served.stop()  # SIGTERM: exits 0 once it has answered every call
    log = served.log()
    assert status == 0, log[-3000:]
    assert "reading envoyproxy/ratelimit's variables and runtime directory" in log
    assert "Traceback" not in log


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running(tmp_path_factory.mktemp("reference-scripts")) as built:
        yield built


def with_room(fresh: bool = False) -> None:
    """Wait for the next minute unless ``ROOM`` seconds are left in this one (or, ``fresh``,
    whatever is left)."""
    left = 60.0 - time.time() % 60.0
    if fresh or left < ROOM:
        time.sleep(left + 0.2)


def passes(stack: Stack, script: str, **environ: str) -> str:
    """Run ``script``; its output, once it has exited 0."""
    ran = stack.run(script, **environ)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, f"{script} failed ({ran.returncode}):\n{output}"
    return output


def test_the_references_scripts_pass_in_run_alls_order(stack: Stack) -> None:
    stack.empty_buckets()
    calls, subsets = stack.ratelimit_calls(), stack.subsets()
    outputs = {}
    for script in RUN_ALL:
        with_room(fresh=script in FRESH_MINUTE)
        outputs[script] = passes(stack, script)
    waited = "Waiting for the next minute, when the quota buckets are refreshed\n"
    assert outputs["multiservice-tokenquota.sh"] == waited
    assert outputs["simple-get.sh"] == ""
    # Every call Envoy made was answered by ratekeeper: none failed and was let through.
    now = stack.ratelimit_calls()
    made = {name: now[name] - calls.get(name, 0) for name in now}
    assert set(made) <= {"ok", "over_limit"}, made
    assert made["over_limit"] > 0
    # The 6 requests of multiservice-tokenquota.sh that were routed went where the answer's
    # metadata said: to the subset it named, never to any endpoint.
    routed = stack.subsets()
    assert routed.get("lb_subsets_selected", 0) - subsets.get("lb_subsets_selected", 0) == 6
    assert routed.get("lb_subsets_fallback", 0) == subsets.get("lb_subsets_fallback", 0)
    # USE_STATSD, STATSD_HOST and STATSD_PORT: the statistics went to the listener there.
    assert stack.sink.received > 0


@pytest.mark.timeout(REPEATS * 75 + 90)  # each run waits for the next minute
def test_multiservice_tokenquota_passes_every_time(stack: Stack) -> None:
    """Routed 1, 1, 2, 2, 2 by the metadata, the 6th refused, the 7th to Service 1 in the
    next minute: ``REPEATS`` runs in a row, each on empty buckets."""
    for run in range(REPEATS):
        stack.empty_buckets()
        before = stack.subsets()
        with_room()
        passes(stack, "multiservice-tokenquota.sh")
        after = stack.subsets()
        selected = after.get("lb_subsets_selected", 0) - before.get("lb_subsets_selected", 0)
        assert selected == 6, f"run {run + 1}: {before} -> {after}"
        assert after.get("lb_subsets_fallback", 0) == before.get("lb_subsets_fallback", 0)


def test_value_included_in_stats_key_when_unspecified(tmp_path: Path) -> None:
    """The script reads the reference's statistics in Prometheus's form
    (``ratelimit_service_rate_limit_over_limit`` with the descriptor's value in its key),
    which the reference's integration test gets from a statsd-exporter: here ratekeeper serves
    them itself, told to as the reference is, ``USE_PROMETHEUS=true`` and ``PROMETHEUS_ADDR``
    (beside the compose file's ``USE_STATSD``, still sent to the listener)."""
    (port,) = free_ports(1)
    with running(tmp_path, USE_PROMETHEUS="true", PROMETHEUS_ADDR=f"127.0.0.1:{port}") as stack:
        with_room()
        output = passes(stack, STATS_SCRIPT, STATS_URL=f"http://127.0.0.1:{port}/metrics")
    assert output == "Length: 1\n1\n"
