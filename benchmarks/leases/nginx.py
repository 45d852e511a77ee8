"""nginx running the shipped ``deploy/nginx/ratekeeper.conf`` in front of several ``ratekeeper
serve`` instances, for the length of a ``with`` block; stopped by its pid.

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
import time
from collections import Counter
from pathlib import Path
from types import TracebackType

import httpx

from benchmarks.redis_store.server import free_port
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


class Nginx:
    """nginx on a free loopback port in front of ``ratekeeper_ports``."""

    def __init__(self, directory: Path, ratekeeper_ports: list[int]) -> None:
        binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
        if binary is None:
            raise BenchmarkError("nginx is not installed (apt-get install nginx)")
        self.directory = directory
        (directory / "temp").mkdir(parents=True, exist_ok=True)
        self.port, application = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        (directory / "site.conf").write_text(render(ratekeeper_ports, self.port, application))
        main = directory / "nginx.conf"
        main.write_text(_main_conf(directory, application))
        with (directory / "nginx.out").open("wb") as log:
            self.process = subprocess.Popen(
                [binary, "-p", str(directory), "-c", str(main), "-e", str(directory / "error.log")],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def __enter__(self) -> Nginx:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise BenchmarkError(f"nginx exited: {self._errors()}")
            with contextlib.suppress(httpx.TransportError):
                httpx.get(self.url, timeout=1)
                return self
            time.sleep(0.05)
        self.stop()
        raise BenchmarkError(f"nginx did not answer in 20 s: {self._errors()}")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _errors(self) -> str:
        path = self.directory / "error.log"
        return path.read_text()[-2000:] if path.exists() else ""

    def stop(self) -> None:
        """nginx's fast shutdown (SIGTERM to the master, by pid); SIGKILL to its group if it
        lingers."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

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
