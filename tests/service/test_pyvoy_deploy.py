"""``deploy/systemd/ratekeeper-pyvoy@.service`` as a user deploys pyvoy: an instance per core,
each an endpoint of Envoy's rate-limit cluster, run for real.

No systemd runs here, so the unit is read as systemd reads it (its ``[Service]`` keys, ``%i``
the instance's name) and its ``ExecStart`` run as the unit would run it, with the settings of
``EnvironmentFile`` (a Redis and the compose file's rules of the domain ``edge``): two
instances, on ports 1 and 2 of ``%i``. ``deploy/envoy/envoy.yaml`` lists both in its
``ratekeeper`` cluster (the only change to it besides the addresses it marks ``<- SET``), as
docs/deploy.md says. Through Envoy, a user's fourth request in a minute is refused whichever
instance decides it (they share Redis), both instances decide some of them, and each stops
with exit 0 on the unit's ``KillSignal`` within its ``TimeoutStopSec``.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.gateways import (
    EnvoyServer,
    UpstreamServer,
    envoy_config,
    http_request,
    pyvoy_binary,
    render,
)
from tests.processes import ServerProcess
from tests.servers import RedisServer, free_ports

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "ratekeeper-pyvoy@.service"
RULES = ROOT / "deploy" / "compose" / "rules" / "edge.yaml"
ENDPOINT = """        - endpoint:
            address:
              socket_address: {{address: 127.0.0.1, port_value: {port}}}  # <- SET ratekeeper
"""


def service_section(path: Path) -> dict[str, list[str]]:
    """The ``[Service]`` keys of a unit file, each with its values in order (systemd lets a
    key repeat); comments and blank lines skipped."""
    found: dict[str, list[str]] = {}
    section = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        if section == "Service":
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_the_unit_runs_ratekeeper_serve_on_pyvoy_at_its_instances_port() -> None:
    service = service_section(UNIT)
    command = shlex.split(service["ExecStart"][0])
    assert command[0] == "/opt/ratekeeper/bin/ratekeeper"
    assert command[1:] == ["serve", "--server", "pyvoy", "--http", "127.0.0.1:%i"]
    assert service["KillSignal"] == ["SIGTERM"]
    assert int(service["TimeoutStopSec"][0]) > 30  # past serve's own 30 s for the drain
    assert service["EnvironmentFile"] == ["/etc/ratekeeper/ratekeeper.env"]


class Instance(ServerProcess):
    """The unit's ``ExecStart`` for instance ``port`` (``%i``), run as the unit runs it, with
    ``environ`` from its ``EnvironmentFile``, in ``directory`` (its ``WorkingDirectory``),
    started by the tests' harness (ready once ``/readyz`` answers 200). ``kill`` takes its
    whole group: pyvoy's Envoy with it."""

    name = "ratekeeper-pyvoy@"
    ready_timeout = 30.0

    def __init__(self, port: int, environ: dict[str, str], directory: Path) -> None:
        self.port, self.environ, self.directory = port, environ, directory
        self.url = f"http://127.0.0.1:{port}"
        directory.mkdir(exist_ok=True)
        self.start()

    def _launch(self) -> subprocess.Popen[bytes]:
        command = shlex.split(service_section(UNIT)["ExecStart"][0].replace("%i", str(self.port)))
        command[0:1] = [sys.executable, "-m", "ratekeeper.cli"]  # the unit's virtualenv: ours
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")}
        with self._log().open("ab") as log:
            return subprocess.Popen(
                command, cwd=self.directory, env={**clean, **self.environ}, stdout=log,
                stderr=log, start_new_session=True,
            )  # fmt: skip

    def _answers(self, pid: int) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def _log(self) -> Path:
        return self.directory / f"instance-{self.port}.log"

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def stopped(self, timeout: float) -> int:
        """The unit's ``KillSignal``, and the exit status within ``timeout`` seconds."""
        assert self.process is not None
        self.signal_stop()
        return self.process.wait(timeout)

    def decisions(self) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(("ratekeeper_decisions_total ", "ratekeeper_decisions_total{"))
        )


def test_two_instances_behind_envoy_share_one_limit_and_stop_cleanly(tmp_path: Path) -> None:
    if pyvoy_binary() is None:
        pytest.skip("pyvoy is not installed (the pyvoy extra)")
    stop_within = float(service_section(UNIT)["TimeoutStopSec"][0])
    ports = free_ports(2)
    with ExitStack() as running:
        app = running.enter_context(UpstreamServer(tmp_path / "app"))
        redis = running.enter_context(RedisServer(tmp_path / "redis"))
        environ = {"RATEKEEPER_STORE": redis.url, "RATEKEEPER_RULES": str(RULES)}
        shared = tmp_path / "var-lib-ratekeeper"  # one WorkingDirectory
        instances = [running.enter_context(Instance(port, environ, shared)) for port in ports]
        config = render(
            envoy_config(upstream_port=app.port, ratekeeper_port=ports[0]),
            {ENDPOINT.format(port=ports[0]): "".join(ENDPOINT.format(port=p) for p in ports)},
        )
        envoy = running.enter_context(EnvoyServer(tmp_path / "envoy", config))
        users = [f"user-{n}" for n in range(4)]
        statuses = {
            user: [http_request(envoy.port, "/", headers={"X-User": user}).status for _ in range(5)]
            for user in users
        }
        # 3 a minute per user (a GCRA), whichever instance decides
        assert statuses == {user: [200, 200, 200, 429, 429] for user in users}
        decided = [one.decisions() for one in instances]
        assert all(count > 0 for count in decided), decided
        assert sum(decided) >= 20
        assert [one.stopped(stop_within) for one in instances] == [0, 0]
