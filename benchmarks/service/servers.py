"""The server processes of the service benchmark, each on free loopback ports, stopped by pid.

``Server`` runs ``ratekeeper serve`` or the hello world (``benchmarks.service.baseline``) for
the length of a ``with`` block, on the harness the tests use (``tests/processes.py``); ``cpus``
says where the servers and the load generator run, ``cpu_seconds`` how much CPU a process has
used, ``descendants`` the processes it started.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import grpc
import httpx
from tests.processes import ServerProcess, free_ports

import ratekeeper
from ratekeeper.service.proto import rls_pb2

#: The repository's root: the servers run elsewhere, and import ``benchmarks`` from it.
ROOT = Path(__file__).resolve().parents[2]
#: Where the servers import ``ratekeeper`` from: where the benchmark itself imported it (the
#: source ``report.source()`` names), not the copy a virtualenv may have installed.
SOURCE = Path(ratekeeper.__file__).resolve().parents[1]
GRPC_METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def cpus() -> tuple[str | None, str | None]:
    """The CPUs of the servers and of the load generator, or None (not pinned)."""
    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return None, None
    return "0", "1"


def environment() -> dict[str, str]:
    """The servers' environment: this one without ``RATEKEEPER_*`` variables, importing
    ``ratekeeper`` from ``SOURCE`` and ``benchmarks`` from ``ROOT``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")}
    clean["PYTHONPATH"] = os.pathsep.join([str(SOURCE), str(ROOT)])
    return clean


class Server(ServerProcess):
    """A server process of the benchmark's (``ratekeeper serve`` or the hello world) on free
    loopback ports, in a session of its own, pinned to ``cpu``. It starts at once, so that
    several start together; entering its ``with`` block waits until ``/readyz`` answers 200
    and its gRPC channel is ready, and leaving it stops it by its pid."""

    ready_timeout = 60.0
    stop_timeout = 20.0

    def __init__(
        self,
        name: str,
        command: list[str],
        directory: Path,
        cpu: str | None,
        *,
        grpc_on_http: bool = False,
    ) -> None:
        """``grpc_on_http``: the server answers gRPC on its HTTP address (``--server pyvoy``)."""
        self.name = name
        self.command = command
        self.directory = directory
        self.cpu = cpu
        self.grpc_on_http = grpc_on_http
        self.http_port, self.grpc_port = free_ports(2)
        self.port = self.http_port
        self.url = f"http://127.0.0.1:{self.http_port}"
        port = self.http_port if grpc_on_http else self.grpc_port
        self.grpc_address = f"127.0.0.1:{port}"
        self.grpc_url = f"http://{self.grpc_address}"
        self.log = directory / f"{name}.log"
        self.channel = grpc.insecure_channel(self.grpc_address)
        self.client = httpx.Client(base_url=self.url, timeout=10)
        self.launch()

    def _launch(self) -> subprocess.Popen[bytes]:
        addresses = ["--http", f"127.0.0.1:{self.http_port}"]
        if not self.grpc_on_http:
            addresses += ["--grpc", self.grpc_address]
        pinned = ["taskset", "-c", self.cpu] if self.cpu else []
        with self.log.open("wb") as log:
            return subprocess.Popen(
                [*pinned, *self.command, *addresses],
                cwd=self.directory,
                env=environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _answers(self, pid: int) -> bool:
        try:
            if self.client.get("/readyz", timeout=1).status_code != 200:
                return False
        except httpx.TransportError:
            return False
        try:
            grpc.channel_ready_future(self.channel).result(timeout=10)
        except grpc.FutureTimeoutError:
            return False
        return True

    def _log(self) -> Path:
        return self.log

    def stop(self) -> None:
        """SIGTERM by pid (SIGKILL if it lingers), and reap it."""
        self.client.close()
        self.channel.close()
        super().stop()

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        answer = self.client.post(path, json=body)
        return answer.status_code, answer.json()

    def should_rate_limit(self, request: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        call = self.channel.unary_unary(
            GRPC_METHOD,
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString,
        )
        response: rls_pb2.RateLimitResponse = call(request, timeout=10)
        return response


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system, all threads) process ``pid`` has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` and its ``descendants`` have used, in seconds."""
    return sum(cpu_seconds(one) for one in (pid, *descendants(pid)))


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (pyvoy runs an Envoy; ``ratekeeper serve
    --workers N`` its workers)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [one for child in children for one in (int(child), *descendants(int(child)))]
