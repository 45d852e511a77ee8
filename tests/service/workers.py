"""The worker processes of a real ``ratekeeper serve --workers N``, as the tests see them from
outside: their pids, the metrics directory in their environment, each one's own decisions in
its file, when each last published its dashboard record; a client that any worker may answer,
a connection held on each worker, and a scrape's samples parsed as Prometheus parses them."""

from __future__ import annotations

import http.client
import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from ratekeeper.service.observe.multiprocess import VARIABLE
from tests.service.served import Served

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> tuple[Samples, dict[str, tuple[str, str]]]:
    """Every sample by name and sorted labels, and every family's type and help by name."""
    found: Samples = {}
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = (family.type, family.documentation)
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found, families


def worker_pids(served: Served) -> list[int]:
    """The pids of the serving process's uvicorn workers, from ``/proc``."""
    pids = []
    for task in Path(f"/proc/{served.process.pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError):  # ended meanwhile
                continue
            if b"spawn_main" in command:  # a zombie's is empty
                pids.append(int(child))
    return sorted(pids)


def metrics_directory(pid: int) -> Path:
    """The multiprocess directory in worker ``pid``'s environment."""
    for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        name, _, value = entry.decode().partition("=")
        if name == VARIABLE:
            return Path(value)
    raise AssertionError(f"worker {pid} has no {VARIABLE}")


def decisions_by_worker(directory: Path, pids: list[int]) -> dict[int, float]:
    """Each worker's own decisions, read from its file alone."""
    counted = {}
    for pid in pids:
        merged = MultiProcessCollector.merge([str(directory / f"counter_{pid}.db")])
        counted[pid] = sum(
            sample.value
            for family in merged
            if family.name == "ratekeeper_decisions"
            for sample in family.samples
        )
    return counted


def fresh(url: str) -> httpx.Client:
    """A client opening a connection of its own for each request: any worker may answer."""
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.Client(base_url=url, timeout=30, limits=limits)


def published_at(directory: Path, pid: int) -> float:
    """When worker ``pid`` last wrote its record (0 if it has not yet)."""
    path = directory / f"dashboard_{pid}.json"
    return float(json.loads(path.read_text())["at"]) if path.exists() else 0.0


def owner(port: int, client_port: int, pids: list[int]) -> int | None:
    """The worker among ``pids`` holding the accepted end of the loopback connection from
    ``client_port`` to ``port`` (from ``/proc/net/tcp*`` and each worker's descriptors)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if int(local.rsplit(":", 1)[1], 16) == port and (
                int(remote.rsplit(":", 1)[1], 16) == client_port
            ):
                inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) in inodes:
                    return pid
            except FileNotFoundError:  # closed meanwhile
                continue
    return None


def on_each_worker(
    url: str, pids: list[int], attempts: int = 200
) -> dict[int, http.client.HTTPConnection]:
    """A kept-alive connection answered by each worker in ``pids``: connections are opened
    (each asked ``/healthz`` once, so that a worker has accepted it) until every worker holds
    one; the others are closed. The kernel gives a new connection to whichever worker accepts
    first, so this may take a few."""
    address = urlsplit(url)
    held: dict[int, http.client.HTTPConnection] = {}
    for _ in range(attempts):
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
        connection.request("GET", "/healthz")
        connection.getresponse().read()
        pid = owner(address.port, connection.sock.getsockname()[1], pids)
        if pid is None or pid in held:
            connection.close()
        else:
            held[pid] = connection
        if len(held) == len(pids):
            return held
    for connection in held.values():
        connection.close()
    raise AssertionError(f"no connection reached every worker in {attempts} attempts")
