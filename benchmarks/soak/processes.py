"""The soak's servers: ``ratekeeper serve --workers 2`` on free loopback ports, and what each
of its processes holds.

The service is one ``serve`` with two worker processes rather than two instances: that is how
one host runs it, the workers share one port (so one wrk drives both), and each worker's RSS is
read on its own from ``/proc``. It runs on the harness the tests use (``tests/processes.py``)
and is stopped by its pid (SIGTERM, then SIGKILL), as the benchmarks' other servers are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from tests.processes import ServerProcess, children, free_ports

RULES = Path(__file__).with_name("rules.yaml")


def rss_mb(pid: int) -> float:
    """The resident memory of process ``pid``, in MB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Service(ServerProcess):
    """``ratekeeper serve`` on Redis with ``workers`` processes, started at once in a session of
    its own; entering its ``with`` block waits until ``/readyz`` answers 200 and every worker
    runs, leaving it stops it by its pid."""

    name = "serve"
    ready_timeout = 60.0
    stop_timeout = 40.0

    def __init__(self, store: str, directory: Path, *, workers: int, extra: list[str]) -> None:
        self.port, grpc = free_ports(2)
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.directory = directory
        self.log = directory / "serve.log"
        self.command = [
            sys.executable, "-m", "ratekeeper.cli", "serve",
            "--store", store, "--rules", str(RULES),
            "--config", f"sqlite:///{directory / 'overrides.db'}",
            "--http", f"127.0.0.1:{self.port}", "--grpc", f"127.0.0.1:{grpc}",
            "--workers", str(workers), *extra,
        ]  # fmt: skip
        self.launch()

    def _launch(self) -> subprocess.Popen[bytes]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")}
        with self.log.open("wb") as log:
            return subprocess.Popen(
                self.command,
                cwd=self.directory,
                env=clean,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _answers(self, pid: int) -> bool:
        try:
            ready = httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False
        return ready and len(self.worker_pids()) >= self.workers

    def _log(self) -> Path:
        return self.log

    def worker_pids(self) -> list[int]:
        """The worker processes (uvicorn's, beside its supervisor), else the one process."""
        if self.workers == 1:
            return [self.pid]
        return [pid for pid in children(self.pid) if _is_worker(pid)]

    def rss(self) -> dict[str, float]:
        """Each process's RSS in MB: the supervisor and every worker, by name."""
        sizes = {"supervisor": rss_mb(self.pid)} if self.workers > 1 else {}
        for number, pid in enumerate(self.worker_pids(), 1):
            sizes[f"worker {number}"] = rss_mb(pid)
        return sizes


def _is_worker(pid: int) -> bool:
    """Whether ``pid`` is one of uvicorn's workers (started by multiprocessing's spawn), not
    multiprocessing's resource tracker."""
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
