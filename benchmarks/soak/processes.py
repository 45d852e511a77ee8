"""The soak's servers: ``ratekeeper serve --workers 2`` on free loopback ports, and what each
of its processes holds.

The service is one ``serve`` with two worker processes rather than two instances: that is how
one host runs it, the workers share one port (so one wrk drives both), and each worker's RSS is
read on its own from ``/proc``. It is stopped by its pid (SIGTERM, then SIGKILL), as the
benchmarks' other servers are.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from benchmarks.redis_store.server import free_port
from benchmarks.trials import BenchmarkError

RULES = Path(__file__).with_name("rules.yaml")


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes, from ``/proc``."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.split("/")[2]))
    return sorted(found)


def rss_mb(pid: int) -> float:
    """The resident memory of process ``pid``, in MB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Service:
    """``ratekeeper serve`` on Redis with ``workers`` processes, for a ``with`` block."""

    def __init__(self, store: str, directory: Path, *, workers: int, extra: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.log = directory / "serve.log"
        command = [
            sys.executable, "-m", "ratekeeper.cli", "serve",
            "--store", store, "--rules", str(RULES),
            "--config", f"sqlite:///{directory / 'overrides.db'}",
            "--http", f"127.0.0.1:{self.port}", "--grpc", f"127.0.0.1:{free_port()}",
            "--workers", str(workers), *extra,
        ]  # fmt: skip
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=directory,
                env=clean,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def __enter__(self) -> Service:
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
        with httpx.Client(base_url=self.url, timeout=1) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise BenchmarkError(f"serve exited:\n{self.log.read_text()[-2000:]}")
                with contextlib.suppress(httpx.TransportError):
                    ready = client.get("/readyz").status_code == 200
                    if ready and len(self.worker_pids()) >= self.workers:
                        return
                time.sleep(0.1)
        raise BenchmarkError(f"serve was not ready in 60 s:\n{self.log.read_text()[-2000:]}")

    def worker_pids(self) -> list[int]:
        """The worker processes (uvicorn's, beside its supervisor), else the one process."""
        if self.workers == 1:
            return [self.process.pid]
        return [pid for pid in children(self.process.pid) if _is_worker(pid)]

    def rss(self) -> dict[str, float]:
        """Each process's RSS in MB: the supervisor and every worker, by name."""
        sizes = {"supervisor": rss_mb(self.process.pid)} if self.workers > 1 else {}
        for number, pid in enumerate(self.worker_pids(), 1):
            sizes[f"worker {number}"] = rss_mb(pid)
        return sizes

    def stop(self) -> None:
        """SIGTERM by pid (SIGKILL if it lingers), and reap it."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(40)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def _is_worker(pid: int) -> bool:
    """Whether ``pid`` is one of uvicorn's workers (started by multiprocessing's spawn), not
    multiprocessing's resource tracker."""
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
