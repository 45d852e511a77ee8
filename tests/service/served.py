"""``ratekeeper serve`` as a real process for the tests: started on free loopback ports (HTTP
and gRPC) in a directory of its own, ready once ``/readyz`` answers 200, stopped with SIGTERM
(killed if it does not end)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import httpx

from tests.servers import free_ports, wait_until


class Served:
    """``Served(directory, *flags, environ=...)``: ``.http`` and ``.grpc`` (ports), ``.url``,
    ``.process``. ``environ`` is added to this process's environment less its ``RATEKEEPER_*``
    variables; ``stderr`` is where the log goes (``subprocess.PIPE`` to read it after
    ``stop``). ``reference_addresses`` gives the addresses as envoyproxy/ratelimit's
    ``HOST``, ``PORT``, ``GRPC_HOST`` and ``GRPC_PORT`` variables rather than as flags; ``grpc``
    is a ``--grpc`` of its own (``unix:PATH``) in place of the free port. It has
    started once ``ready`` answers 200 (``/readyz``; ``/healthz`` for one started while its
    store is failing)."""

    def __init__(
        self,
        directory: Path,
        *flags: str,
        environ: Mapping[str, str] | None = None,
        stdout: int | IO[bytes] = subprocess.DEVNULL,
        stderr: int | IO[bytes] = subprocess.DEVNULL,
        reference_addresses: bool = False,
        ready: str = "/readyz",
        grpc: str | None = None,
    ) -> None:
        self.ready_path = ready  # what answers 200 once it has started
        self.http, self.grpc = free_ports(2)
        #: Where it answers gRPC: its gRPC port, or with ``--server pyvoy`` its HTTP port.
        self.grpc_port = self.http if "pyvoy" in flags else self.grpc
        self.url = f"http://127.0.0.1:{self.http}"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")}
        addresses = ["--http", f"127.0.0.1:{self.http}", "--grpc", grpc or f"127.0.0.1:{self.grpc}"]
        if reference_addresses:
            addresses = []
            clean.update(HOST="127.0.0.1", PORT=str(self.http))
            clean.update(GRPC_HOST="127.0.0.1", GRPC_PORT=str(self.grpc))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ratekeeper.cli", "serve", *flags, *addresses],
            cwd=directory,
            env={**clean, **(environ or {})},
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # its group: the workers it starts are stopped with it
        )
        try:
            wait_until(self._ready, 30, "ratekeeper serve")
        except BaseException:
            self.kill()
            self.process.communicate(timeout=10)  # its pipes closed: nothing reads them now
            raise

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"ratekeeper serve exited with {self.process.returncode}")
        try:
            return httpx.get(f"{self.url}{self.ready_path}", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, and wait for the exit status (killed if it has not ended by ``timeout``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL to the service and every process of its group (the workers of ``--workers``,
        which a killed supervisor would leave running), then wait for it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def log(self) -> str:
        """What the process wrote on its stderr pipe; call once it has ended."""
        _, stderr = self.process.communicate(timeout=10)
        return (stderr or b"").decode()


def instances(served: Served) -> dict[str, Any]:
    """What ``served``'s ``/readyz`` says of the processes sharing its store."""
    found: dict[str, Any] = httpx.get(f"{served.url}/readyz", timeout=10).json()["store"]
    return dict(found["instances"])


def settle(fleet: list[Served], size: int, timeout: float = 15.0) -> None:
    """Wait until every one of ``fleet`` has counted ``size`` instances through the store."""
    deadline = time.monotonic() + timeout
    while (seen := [instances(one) for one in fleet]) != [
        {"size": size, "source": "counted"}
    ] * len(fleet):
        assert time.monotonic() < deadline, f"expected {size} counted instances, saw {seen}"
        time.sleep(0.2)
