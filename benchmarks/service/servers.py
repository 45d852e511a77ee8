"""The server processes of the service benchmark, each on free loopback ports, stopped by pid.

``Server`` runs ``ratekeeper serve`` or the hello world (``benchmarks.service.baseline``) for
the length of a ``with`` block; ``cpus`` says where the servers and the load generator run,
``cpu_seconds`` how much CPU a process has used, ``descendants`` the processes it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import httpx

import ratekeeper
from benchmarks.redis_store.server import free_port
from benchmarks.trials import BenchmarkError
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


class Server:
    """A server process of the benchmark's (``ratekeeper serve`` or the hello world) on free
    loopback ports, for the length of a ``with`` block; stopped by its pid."""

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
        self.http_port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        port = self.http_port if grpc_on_http else self.grpc_port
        self.grpc_address = f"127.0.0.1:{port}"
        self.grpc_url = f"http://{self.grpc_address}"
        addresses = ["--http", f"127.0.0.1:{self.http_port}"]
        if not grpc_on_http:
            addresses += ["--grpc", self.grpc_address]
        self.log = directory / f"{name}.log"
        pinned = ["taskset", "-c", cpu] if cpu else []
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [*pinned, *command, *addresses],
                cwd=directory,
                env=environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.channel = grpc.insecure_channel(self.grpc_address)
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def __enter__(self) -> Server:
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchmarkError(f"{self.name} exited:\n{self.log.read_text()[-2000:]}")
            try:
                if self.client.get("/readyz", timeout=1).status_code == 200:
                    grpc.channel_ready_future(self.channel).result(timeout=10)
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise BenchmarkError(f"{self.name} was not ready in 60 s:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM by pid (SIGKILL if it lingers), and reap it."""
        self.client.close()
        self.channel.close()
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

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
