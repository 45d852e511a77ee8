"""The decision service counts an address descriptor by its block when the rule says so: the
same rule file over ``POST /v1/check``, Envoy's ``POST /json`` and nginx's ``GET /v1/nginx``,
in-process; ``test_gateways_end_to_end.py`` does it through a real nginx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.dashboard import Dashboard, Recorder
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.service.runtime.app import create_app
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from tests.service.asgi import AppClient, service_app

TOKEN = "t" * 32
RULES = """
domain: edge
descriptors:
  - key: remote_address
    ipv6_prefix: 64
    ipv4_prefix: 24
    rate_limit: {unit: hour, requests_per_unit: 2, name: per_block}
"""


@pytest.fixture
def client(tmp_path: Path) -> Iterator[AppClient]:
    app = service_app(RULES, tmp_path, FakeClock())
    with AppClient(app) as client:
        yield client


def check(address: str) -> dict[str, Any]:
    entry = {"key": "remote_address", "value": address}
    return {"domain": "edge", "descriptors": [{"entries": [entry]}]}


def test_v1_check_counts_two_addresses_of_one_64_together(client: AppClient) -> None:
    addresses = ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3", "2001:db8:1:3::1"]
    answers = [client.post("/v1/check", json=check(address)) for address in addresses]
    assert [a.status_code for a in answers] == [200, 200, 429, 200]
    assert [a.json()["statuses"][0]["remaining"] for a in answers] == [1, 0, 0, 1]


def test_v1_check_groups_ipv4_by_24_and_mapped_addresses_with_it(client: AppClient) -> None:
    addresses = ["198.51.100.1", "::ffff:198.51.100.2", "198.51.100.3", "198.51.101.1"]
    answers = [client.post("/v1/check", json=check(address)) for address in addresses]
    assert [a.status_code for a in answers] == [200, 200, 429, 200]


def test_the_key_shown_is_the_block(tmp_path: Path) -> None:
    clock = FakeClock()
    engine = AsyncEngine(AsyncMemoryStore(clock=clock), rules=parse_rules(RULES), clock=clock)
    metrics = Metrics()
    metrics.track(engine)
    dashboard = Dashboard(
        engine, metrics, Recorder(engine, metrics, clock=clock), TOKEN, clock=clock
    )
    app = create_app(
        engine, admin_token=TOKEN, close_engine=True, metrics=metrics, dashboard=dashboard
    )
    with AppClient(app) as client:
        for address in ["2001:db8:7:7::1", "2001:db8:7:7::2", "2001:db8:7:7::3"]:
            client.post("/v1/check", json=check(address))
        dashboard.recorder.tick()
        top = client.get("/v1/top?window=10&n=1", headers={"Authorization": f"Bearer {TOKEN}"})
    (shown,) = top.json()["requests"]["keys"]
    assert (shown["key"], shown["count"], shown["rule"]) == (
        "remote_address:2001:db8:7:7::/64",
        3,
        "per_block",
    )


def test_envoy_json_counts_by_block(client: AppClient) -> None:
    answers = [
        client.post("/json", json=check(address))
        for address in ["2001:db8:1:2::a", "2001:db8:1:2::b", "2001:db8:1:2::c"]
    ]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert [a.json()["overallCode"] for a in answers] == ["OK", "OK", "OVER_LIMIT"]


def test_nginx_auth_request_counts_by_block(client: AppClient) -> None:
    def ask(address: str) -> int:
        headers = {"X-Real-IP": address, "X-RateLimit-Domain": "edge"}
        return client.get("/v1/nginx", headers=headers).status_code

    assert [ask(a) for a in ["2001:db8:9:9::1", "2001:db8:9:9::2", "2001:db8:9:9::3"]] == [
        200,
        200,
        403,
    ]
    assert ask("2001:db8:9:a::1") == 200


def test_a_value_that_is_no_address_is_counted_as_given(client: AppClient) -> None:
    # nginx on a Unix socket sends "unix:"; it counts under itself, never more than its limit.
    answers = [client.post("/v1/check", json=check("unix:")) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
