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
from collections.abc import Iterator
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
from tests.servers import RedisServer, free_ports, wait_until

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


class Instance:
    """The unit's ``ExecStart`` for instance ``port`` (``%i``), run as the unit runs it, with
    ``environ`` from its ``EnvironmentFile``, in ``directory`` (its ``WorkingDirectory``)."""

    def __init__(self, port: int, environ: dict[str, str], directory: Path) -> None:
        command = shlex.split(service_section(UNIT)["ExecStart"][0].replace("%i", str(port)))
        # the unit's virtualenv is this Python's
        command[0:1] = [sys.executable, "-m", "ratekeeper.cli"]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")}
        directory.mkdir(exist_ok=True)
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            command, cwd=directory, env={**clean, **environ}, start_new_session=True
        )
        wait_until(self._ready, 30, f"instance {port}")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"instance {self.port} exited with {self.process.returncode}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def decisions(self) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(("ratekeeper_decisions_total ", "ratekeeper_decisions_total{"))
        )

    def stop(self, timeout: float) -> int:
        """The unit's ``KillSignal``, and the exit status within ``timeout`` seconds."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app")
    yield server
    server.stop()


def test_two_instances_behind_envoy_share_one_limit_and_stop_cleanly(
    tmp_path: Path, app: UpstreamServer
) -> None:
    if pyvoy_binary() is None:
        pytest.skip("pyvoy is not installed (the pyvoy extra)")
    service = service_section(UNIT)
    stop_within = float(service["TimeoutStopSec"][0])
    ports = free_ports(2)
    with RedisServer(tmp_path / "redis") as redis:
        environ = {"RATEKEEPER_STORE": redis.url, "RATEKEEPER_RULES": str(RULES)}
        shared = tmp_path / "var-lib-ratekeeper"
        instances = []
        try:
            for port in ports:
                instances.append(Instance(port, environ, shared))  # one WorkingDirectory
            config = envoy_config(upstream_port=app.port, ratekeeper_port=ports[0])
            config = render(
                config,
                {
                    ENDPOINT.format(port=ports[0]): ENDPOINT.format(port=ports[0])
                    + ENDPOINT.format(port=ports[1])
                },
            )
            envoy = EnvoyServer(tmp_path / "envoy", config)
            try:
                users = [f"user-{n}" for n in range(4)]
                statuses = {
                    user: [
                        http_request(envoy.port, "/", headers={"X-User": user}).status
                        for _ in range(5)
                    ]
                    for user in users
                }
            finally:
                envoy.stop()
            # 3 a minute per user (a GCRA), whichever instance decides
            assert statuses == {user: [200, 200, 200, 429, 429] for user in users}
            decided = [one.decisions() for one in instances]
            assert all(count > 0 for count in decided), decided
            assert sum(decided) >= 20
            assert [one.stop(stop_within) for one in instances] == [0, 0]
        finally:
            for one in instances:
                if one.process.poll() is None:
                    os.killpg(one.process.pid, signal.SIGKILL)
                    one.process.wait(timeout=10)
