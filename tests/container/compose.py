"""The compose file (``deploy/compose/compose.yaml``) run with podman-compose, for the tests.

``Stack`` is one project of it: ``podman-compose -f deploy/compose/compose.yaml -p PROJECT``
with the tests' variables (images, host ports) and containers.conf, on a network of its own
made beforehand by ``network``.

**The network's bridge keeps one MAC address.** The kernel gives a bridge whose address was
never set the lowest address of its ports, so that each container that joins or leaves the
network may change it. The other containers keep the old address in their ARP entry for the
gateway, 10.89.x.1, where aardvark-dns answers their DNS queries, and those queries are lost
until the entry is renewed: seconds, or minutes. Seen here with Debian 12's netavark 1.4: after
a container was removed, most lookups by name timed out until the next container came or went,
and a ratekeeper stopped together with Redis waited on one past its stop timeout. netavark 1.9
sets the bridge's address itself (netavark#833); for the netavark here, ``network`` makes the
bridge before netavark does, with an address derived from the gateway's, as CNI's bridge plugin
does (``0a:58`` and the gateway's four bytes), and netavark then uses it as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.container.images import CONTAINERS_CONF, podman

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
SERVICES = ("redis", "ratekeeper", "envoy", "prometheus")


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=False, capture_output=True, text=True, timeout=30)


class Stack:
    """``podman-compose -f deploy/compose/compose.yaml -p PROJECT`` with ``variables`` in its
    environment, under the tests' containers.conf (podman-compose runs podman)."""

    def __init__(self, project: str, variables: dict[str, str]) -> None:
        self.project = project
        self.environ = {**os.environ, **variables, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
        self.bridge: str | None = None

    def network(self) -> None:
        """The project's network, ``PROJECT_default`` as podman-compose names and labels it,
        on a bridge made here with a MAC address of its own (see the module's docstring)."""
        name = f"{self.project}_default"
        labels = [
            f"{key}.project={self.project}" for key in ("io.podman.compose", "com.docker.compose")
        ]
        podman("network", "create", *(f"--label={label}" for label in labels), name)
        [found] = json.loads(podman("network", "inspect", name))
        self.bridge = str(found["network_interface"])
        [subnet] = found["subnets"]
        gateway, prefix = subnet["gateway"], subnet["subnet"].split("/")[1]
        mac = ":".join(["0a", "58", *(f"{int(byte):02x}" for byte in gateway.split("."))])
        for args in (
            ["link", "add", "name", self.bridge, "type", "bridge"],
            ["link", "set", "dev", self.bridge, "address", mac],
            ["address", "add", f"{gateway}/{prefix}", "dev", self.bridge],
            ["link", "set", "dev", self.bridge, "up"],
        ):
            done = ip(*args)
            assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"

    def compose(self, *args: str, timeout: float = 180) -> str:
        beside = Path(sys.executable).with_name("podman-compose")
        program = str(beside) if beside.exists() else shutil.which("podman-compose")
        assert program is not None, "podman-compose is not installed; pip install -e '.[dev]'"
        done = subprocess.run(
            [program, "-f", str(COMPOSE), "-p", self.project, *args],
            check=False, capture_output=True, text=True, timeout=timeout, env=self.environ,
        )  # fmt: skip
        assert done.returncode == 0, f"podman-compose {' '.join(args)}: {done.stderr}"
        return done.stdout

    def down(self) -> None:
        """``down --volumes``, and the bridge removed if netavark left it (no container ever
        joined it) and no network of podman's has taken its name since."""
        self.compose("down", "--volumes", "--timeout", "20")
        names = podman("network", "ls", "--format", "{{.NetworkInterface}}").split()
        if self.bridge is not None and self.bridge not in names:
            ip("link", "delete", "dev", self.bridge, "type", "bridge")

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def unhealthy(self, service: str) -> list[str]:
        """Nothing if ``service``'s health check passes, run now; else its last results."""
        name = self.container(service)
        try:
            podman("healthcheck", "run", name)
        except RuntimeError as error:
            return [f"{error}: {podman('inspect', '--format', '{{json .State.Health}}', name)}"]
        return []

    def leftovers(self) -> list[str]:
        """The project's containers, volumes and network, and its bridge, that remain."""
        label = f"label=io.podman.compose.project={self.project}"
        found = podman("ps", "-a", "--filter", label, "--format", "{{.Names}}").split()
        found += podman("volume", "ls", "--filter", label, "--format", "{{.Name}}").split()
        networks = podman("network", "ls", "--format", "{{.Name}}").split()
        found += [name for name in networks if name.startswith(f"{self.project}_")]
        if self.bridge is not None and ip("link", "show", "dev", self.bridge).returncode == 0:
            found.append(f"bridge {self.bridge}")
        return found

    def logs(self) -> str:
        """The last lines each container wrote, for a failure's message."""
        found = ""
        for service in SERVICES:
            done = subprocess.run(
                ["podman", "logs", "--tail", "60", self.container(service)],
                check=False, capture_output=True, text=True, timeout=30, env=self.environ,
            )  # fmt: skip
            found += f"\n--- {service}:\n{done.stdout}{done.stderr}"
        return found
