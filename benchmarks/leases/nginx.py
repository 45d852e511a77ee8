"""nginx running the shipped ``deploy/nginx/ratekeeper.conf`` in front of several ``ratekeeper
serve`` instances, for the length of a ``with`` block, on the harness the tests use
(``tests/processes.py``); stopped by its pid.

The shipped file is changed only where it marks ``<- SET``: its listener, its application and
its ratekeeper upstream (one ``server`` line per instance). The main ``nginx.conf`` around it
keeps every file nginx writes in a temporary directory, logs each request's end time and status
(``$msec $status``), and serves the application itself: a second server block answering 200.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import httpx
from tests.processes import ServerProcess, free_ports

from benchmarks.trials import BenchmarkError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "nginx" / "ratekeeper.conf"


def render(ratekeeper_ports: list[int], port: int, application_port: int) -> str:
    """The shipped file with these addresses, each marked line replaced exactly once."""
    text = SHIPPED.read_text()
    servers = "\n    ".join(f"server 127.0.0.1:{one};" for one in ratekeeper_ports)
    for old, new in (
        ("listen 8000;", f"listen 127.0.0.1:{port};"),
        ("server 127.0.0.1:9000;", f"server 127.0.0.1:{application_port};"),
        ("server 127.0.0.1:8080;", servers),
    ):
        if text.count(old) != 1:
            raise BenchmarkError(f"{SHIPPED}: {old!r} occurs {text.count(old)} times, not once")
        text = text.replace(old, new)
    return text


def _main_conf(directory: Path, application_port: int) -> str:
    temp = directory / "temp"
    user = ""
    if os.geteuid() == 0:  # workers as root too, so that they can reach the directory
        user = "user root root;\n"
    return (
        f"{user}daemon off;\nmaster_process on;\nworker_processes 1;\n"
        f"pid {directory / 'nginx.pid'};\nerror_log {directory / 'error.log'} warn;\n"
        "events { worker_connections 1024; }\n"
        "http {\n"
        "    log_format ends '$msec $status';\n"
        f"    access_log {directory / 'access.log'} ends buffer=256k flush=1s;\n"
        f"    client_body_temp_path {temp / 'client_body'};\n"
        f"    proxy_temp_path {temp / 'proxy'};\n"
        f"    fastcgi_temp_path {temp / 'fastcgi'};\n"
        f"    uwsgi_temp_path {temp / 'uwsgi'};\n"
        f"    scgi_temp_path {temp / 'scgi'};\n"
        "    server {\n"
        f"        listen 127.0.0.1:{application_port};\n"
        "        access_log off;\n"
        '        location / { return 200 "hello\\n"; }\n'
        "    }\n"
        f"    include {directory / 'site.conf'};\n"
        "}\n"
    )


class Nginx(ServerProcess):
    """nginx on a free loopback port in front of ``ratekeeper_ports``, in a session of its own,
    for the length of a ``with`` block: ready once its pid file holds its pid and it answers.
    ``stop`` is nginx's fast shutdown (SIGTERM to the master, by pid); ``kill`` kills its whole
    group, the worker too."""

    name = "nginx"
    ready_timeout = 20.0

    def __init__(self, directory: Path, ratekeeper_ports: list[int]) -> None:
        binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
        if binary is None:
            raise BenchmarkError("nginx is not installed (apt-get install nginx)")
        self.binary = binary
        self.directory = directory
        (directory / "temp").mkdir(parents=True, exist_ok=True)
        self.port, application = free_ports(2)
        self.url = f"http://127.0.0.1:{self.port}/"
        (directory / "site.conf").write_text(render(ratekeeper_ports, self.port, application))
        self.main = directory / "nginx.conf"
        self.main.write_text(_main_conf(directory, application))

    def _launch(self) -> subprocess.Popen[bytes]:
        (self.directory / "nginx.pid").unlink(missing_ok=True)
        args = [self.binary, "-p", str(self.directory), "-c", str(self.main)]
        args += ["-e", str(self._log())]
        with (self.directory / "nginx.out").open("wb") as log:
            return subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _answers(self, pid: int) -> bool:
        try:
            if (self.directory / "nginx.pid").read_text().strip() != str(pid):
                return False
            httpx.get(self.url, timeout=1)
        except (OSError, httpx.TransportError):
            return False
        return True

    def _log(self) -> Path:
        return self.directory / "error.log"

    def kill(self) -> None:
        """SIGKILL to nginx's process group (the master and its worker), and reap the master."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def passed(self, since: float, until: float) -> Counter[int]:
        """The requests let through (200) per wall-clock second, by the time each ended, among
        those that ended between ``since`` and ``until`` (read once nginx has stopped)."""
        per_second: Counter[int] = Counter()
        path = self.directory / "access.log"
        if not path.exists():
            return per_second
        for line in path.read_text().splitlines():
            moment, _, status = line.partition(" ")
            ended = float(moment)
            if status == "200" and since <= ended < until:
                per_second[int(ended)] += 1
        return per_second
