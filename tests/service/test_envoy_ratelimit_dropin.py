"""``ratekeeper serve`` as a drop-in for Envoy's reference rate-limit service.

ratekeeper starts with no flag at all, only the variables a deployment of envoyproxy/ratelimit
sets, a real redis-server behind ``REDIS_URL``, and a runtime directory laid out as the
reference's deployments lay it out (``RUNTIME_ROOT`` a symlink to a version, holding
``ratelimit/config/``) with the reference's own example configurations
(``tests/fixtures/rules/envoy/examples``). In front of it runs a real Envoy with the reference's
example proxy (``tests/fixtures/envoy_ratelimit/proxy.yaml``), its addresses made the tests'.
The requests are those of the reference's integration scripts
(``integration-test/scripts/*.sh``), in the order its ``run-all.sh`` runs them, and each
answer is the one those scripts expect (the quota and token-quota scripts aside). Then a
limit is edited in place, and another version swapped in behind the symlink: each is in force
within 2 s.

The example's limits are per minute, in fixed windows as the reference counts them: each script
starts with at least ``ROOM`` seconds left in the minute, so that no window ends inside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateways import EnvoyServer, Response, UpstreamServer, http_request
from tests.servers import RedisServer, wait_until
from tests.service.reference import EXAMPLES, proxy_config, ratelimit_stats, with_room
from tests.service.served import Served

pytestmark = [pytest.mark.slow, pytest.mark.serial]

#: The unspec rule of ``example.yaml``, whose limit the test edits.
UNSPEC = "  - key: unspec\n    detailed_metric: true\n    rate_limit:\n      unit: minute\n"


class Proxy:
    """The Envoy in front: ``get(path, **headers)`` is one request, its answer kept."""

    def __init__(self, envoy: EnvoyServer) -> None:
        self.envoy = envoy
        self.answers: list[Response] = []

    def get(self, path: str, **headers: str) -> int:
        answer = http_request(self.envoy.port, path, headers=headers)
        self.answers.append(answer)
        return answer.status

    def statuses(self, count: int, path: str, **headers: str) -> list[int]:
        return [self.get(path, **headers) for _ in range(count)]


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    """``<tmp>/runtime/current`` -> ``v1``, holding ``ratelimit/config/`` with the reference's
    examples, and a hidden file that would stop the start if it were loaded."""
    root = tmp_path / "runtime"
    config = root / "v1" / "ratelimit" / "config"
    config.mkdir(parents=True)
    for example in sorted(EXAMPLES.glob("*.yaml")):
        shutil.copy(example, config / example.name)
    (config / ".example.yaml.swp").write_text("domain: rl\ndescriptors: [ broken")
    (root / "current").symlink_to("v1")
    return root


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app")
    yield server
    server.stop()


def reference_variables(runtime: Path, redis: RedisServer) -> dict[str, str]:
    """What a deployment of the reference sets (its addresses come from ``Served``)."""
    return {
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": f"127.0.0.1:{redis.port}",
        "RUNTIME_ROOT": str(runtime / "current"),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "RUNTIME_IGNOREDOTFILES": "true",
        "USE_STATSD": "false",
        "LOG_LEVEL": "debug",
    }


def decisions(url: str) -> dict[tuple[str, str], float]:
    """``ratekeeper_decisions_total`` of domain ``rl``, by ``(rule, result)``."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return {
        (sample.labels["rule"], sample.labels["result"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "ratekeeper_decisions_total" and sample.labels["domain"] == "rl"
    }


def limit_becomes(proxy: Proxy, amount: int, probes: Iterator[int]) -> float:
    """Seconds until Envoy's ``x-ratelimit-limit`` for ``/unspec`` says ``amount``; each probe
    sends a value of its own, so that none is refused."""
    started = time.monotonic()

    def in_force() -> bool:
        proxy.get("/unspec", unspec=f"probe-{next(probes)}")
        return proxy.answers[-1].headers.get("x-ratelimit-limit", "").startswith(f"{amount}, ")

    wait_until(in_force, 2.0, f"the limit of {amount} a minute")
    return time.monotonic() - started


def set_unspec_limit(config: Path, old: int, new: int) -> None:
    """Rewrite ``example.yaml`` with the unspec rule's limit at ``new`` rather than ``old``,
    as ``sed -i`` does: a new file renamed over the old one."""
    path = config / "example.yaml"
    text = path.read_text()
    edited = text.replace(
        UNSPEC + f"      requests_per_unit: {old}\n", UNSPEC + f"      requests_per_unit: {new}\n"
    )
    assert edited != text
    temporary = config / ".example.yaml.new"  # hidden: ignored meanwhile
    temporary.write_text(edited)
    os.replace(temporary, path)


def test_the_references_integration_scripts_through_envoy(
    tmp_path: Path, runtime: Path, redis: RedisServer, upstream: UpstreamServer
) -> None:
    served = Served(
        tmp_path,
        environ=reference_variables(runtime, redis),
        stderr=subprocess.PIPE,
        reference_addresses=True,
    )
    envoy = EnvoyServer(tmp_path / "envoy", proxy_config(upstream.port, served.grpc))
    proxy = Proxy(envoy)
    try:
        # Its HTTP side: /healthcheck and /json, as the reference serves them.
        health = httpx.get(f"{served.url}/healthcheck", timeout=5)
        assert (health.status_code, health.text) == (200, "OK")
        body = {"domain": "rl", "descriptors": [{"entries": [{"key": "unspec", "value": "json"}]}]}
        answer = httpx.post(f"{served.url}/json", json=body, timeout=5)
        assert answer.status_code == 200
        assert answer.json()["overallCode"] == "OK"

        with_room()  # replaces.sh
        four = {"source_cluster": "proxy"}
        assert proxy.get("/twoheader", foo="bkthomps", bar="banned") == 429
        assert (
            proxy.get(
                "/fourheader", foo="bkthomps", bar="banned", **four, destination_cluster="mock"
            )
            == 429
        )
        override = {"foo": "bkthomps", "bar": "banned", **four, "destination_cluster": "override"}
        assert proxy.statuses(3, "/fourheader", **override) == [200, 200, 429]
        mine = {"foo": "my_foo", "bar": "bkthomps", **four}
        assert proxy.statuses(3, "/fourheader", **mine, destination_cluster="bkthomps") == [
            200,
            200,
            429,
        ]
        assert proxy.statuses(2, "/fourheader", **mine, destination_cluster="not_bkthomps") == [
            200,
            429,
        ]
        assert proxy.get("/fourheader", **mine, destination_cluster="bkthomps") == 429
        five = {**mine, "destination_cluster": "fake", "category": "account"}
        assert proxy.statuses(5, "/fiveheader", **five) == [200, 200, 200, 200, 429]
        assert proxy.statuses(2, "/twoheader", foo="foo_2", bar="bkthomps") == [200, 429]
        three = {"foo": "foo_3", "bar": "bar_3", **four, "destination_cluster": "fake"}
        assert proxy.statuses(3, "/fourheader", **three) == [200, 200, 429]
        assert proxy.get("/fiveheader", **five) == 429

        with_room()  # simple-get.sh
        assert proxy.get("/twoheader", foo="test", baz="shady") == 200

        with_room()  # trigger-ratelimit.sh
        assert proxy.statuses(5, "/twoheader", foo="pelle", baz="not-so-shady") == [
            200,
            200,
            200,
            429,
            429,
        ]
        assert "Too Many Requests" not in proxy.answers[-1].body.decode()  # Envoy's own body
        assert proxy.answers[-1].headers.get("x-envoy-ratelimited") == "true"

        with_room()  # trigger-shadow-mode-key.sh: over the limit, never refused
        assert proxy.statuses(6, "/twoheader", foo="pelle", baz="shady") == [200] * 6
        # Let through with nothing left, as the reference answers it (OK, limit_remaining 0).
        assert proxy.answers[-1].headers.get("x-ratelimit-remaining") == "0"

        with_room()  # value-included-in-stats-key-when-unspecified.sh
        assert proxy.statuses(3, "/unspec", unspec="unspecified_value") == [200, 200, 429]

        # Every answer was ratekeeper's: no call failed and was let through undecided.
        stats = ratelimit_stats(envoy)
        refused = [answer for answer in proxy.answers if answer.status == 429]
        assert stats == {"ok": len(proxy.answers) - len(refused), "over_limit": len(refused)}
        counted = decisions(served.url)
        assert counted[("unspec", "limited")] == 1  # the reference's over_limit stat: 1
        assert counted[("foo/baz=shady", "shadowed")] == 3  # its shadow_mode stat: 3
        passed = [answer for answer in proxy.answers if answer.status == 200]
        assert len(upstream.requests()) == len(passed)

        # A limit edited in place, then a new version swapped in behind the symlink.
        probes = iter(range(1_000_000))
        config = runtime / "current" / "ratelimit" / "config"
        set_unspec_limit(config, 2, 5)
        edited = limit_becomes(proxy, 5, probes)
        shutil.copytree(runtime / "v1", runtime / "v2")
        set_unspec_limit(runtime / "v2" / "ratelimit" / "config", 5, 7)
        os.symlink("v2", runtime / "current.new")
        os.replace(runtime / "current.new", runtime / "current")
        swapped = limit_becomes(proxy, 7, probes)
        assert edited < 2.0 and swapped < 2.0
    finally:
        envoy.stop()
        assert served.stop() == 0
    log = served.log()
    assert "reading envoyproxy/ratelimit's variables and runtime directory" in log
    assert log.count("rules reloaded from ") == 2
    assert "Traceback" not in log
