"""Three ``ratekeeper serve`` instances behind a real gateway share one limit exactly.

Three instances share one request store (a Redis server, then a Redis Cluster) and one rule:
500 requests a minute for everyone, as a sliding log, which admits at most 500 in any 60
seconds wherever minute boundaries fall (a fixed window could admit 500 on each side of one).
2,000 requests arrive at once, each on its own connection:

- through nginx, as deployed by ``deploy/nginx/ratekeeper.conf``: ``auth_request`` to
  ``GET /v1/nginx``, with the file's ``upstream ratekeeper`` block holding the three
  instances' HTTP addresses (nginx's default balancing, round robin);
- through Envoy, as deployed by ``deploy/envoy/envoy.yaml``: its rate-limit filter calls the
  ``ratekeeper`` cluster over gRPC, that cluster holding the three instances' gRPC addresses
  with ``lb_policy: ROUND_ROBIN``.

Exactly 500 get the application's 200 and 1,500 the gateway's 429, nothing else; the
application sees the 500. Each instance's ``/metrics`` shows it decided some of them, and the
three together decided each of the 2,000 once, none by the store's failure policy.

The gateways fail closed here, so that a decision that fails shows as a 500 instead of one
more request let through, and their limits are raised for 2,000 connections at once (listen
queues, nginx's worker connections, Envoy's circuit breakers). Their timeouts for ratekeeper's
answer are raised too, nginx's timeout to connect to an instance among them: 2,000 decisions
at once on a shared test machine take longer than a production deployment's timeouts allow
(nginx, itself behind, would count a connection it answers late as a failed instance, and with
every instance marked failed it answers 500 without asking ratekeeper). For the same reason
the instances let every decision in however long it waits (``--max-wait 0``): by default a
process that runs over 0.1 s behind sheds a share of its decisions, and the gateways here
would answer those 500.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateways import (
    EnvoyServer,
    NginxServer,
    UpstreamServer,
)
from tests.service.balanced import envoy_over, nginx_over
from tests.service.http_load import Request, hammer, tally
from tests.service.served import Served

LIMIT = 500
REQUESTS = 2000
INSTANCES = 3
#: The rule: every request counts against one sliding log. Envoy sends the descriptor
#: ``generic_key=default`` for every request; nginx's descriptors name the client's address,
#: which is 127.0.0.1 for every request here.
RULES = """
domain: {domain}
descriptors:
  - {key}
    rate_limit: {{unit: minute, requests_per_unit: 500, algorithm: sliding_log, name: everyone}}
"""
GATEWAY_KEYS = {"nginx": "key: remote_address", "envoy": "key: generic_key\n    value: default"}


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app")
    yield server
    server.stop()


def start_instances(directory: Path, store: str, rules: Path) -> list[Served]:
    """``INSTANCES`` services on one store and one rule file, started together."""

    def start(index: int) -> Served:
        home = directory / f"ratekeeper-{index}"
        home.mkdir()
        with (home / "serve.log").open("wb") as log:  # the process writes its own copy
            # every request decided, however long it waits: this is about one limit shared
            # exactly, and 2,000 at once keep an instance's loop past --max-wait here
            flags = ("--store", store, "--rules", str(rules), "--max-wait", "0")
            return Served(home, *flags, stderr=log)

    with ThreadPoolExecutor(INSTANCES) as pool:
        started = [pool.submit(start, index) for index in range(INSTANCES)]
    failed = [one.exception() for one in started if one.exception() is not None]
    instances = [one.result() for one in started if one.exception() is None]
    if failed:
        for instance in instances:
            instance.kill()
        raise failed[0] or RuntimeError("unreachable")
    return instances


def decisions(instance: Served, domain: str) -> Counter[str]:
    """The instance's decisions of the rule ``everyone`` in ``domain``, by result."""
    text = httpx.get(f"{instance.url}/metrics", timeout=10).text
    found: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "ratekeeper_decisions_total"
                and labels.get("domain") == domain
                and labels.get("rule") == "everyone"
            ):
                found[labels["result"]] += int(sample.value)
    return found


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("gateway", ["nginx", "envoy"])
@pytest.mark.parametrize("store", ["redis_server", "redis_cluster"])
def test_three_instances_behind_a_gateway_admit_exactly_the_limit(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    upstream: UpstreamServer,
    store: str,
    gateway: str,
) -> None:
    url = request.getfixturevalue(store).url  # the store's default timeout
    domain = f"scale-{uuid.uuid4().hex[:12]}"  # fresh counters in the shared store
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(domain=domain, key=GATEWAY_KEYS[gateway]))
    instances = start_instances(tmp_path, url, rules)
    try:
        if gateway == "nginx":
            front: NginxServer | EnvoyServer = NginxServer(
                tmp_path / "nginx",
                nginx_over(instances, upstream, domain),
                worker_connections=4 * REQUESTS,
            )
        else:
            front = EnvoyServer(tmp_path / "envoy", envoy_over(instances, upstream, domain))
        try:
            requests = [Request("GET", f"/orders/{n}") for n in range(REQUESTS)]
            exchanges = asyncio.run(hammer(front.port, requests, timeout=120))
        finally:
            front.stop()
        counted = [decisions(one, domain) for one in instances]
    finally:
        statuses = [one.stop() for one in instances]

    total = sum(counted, Counter())  # first, so that a failure shows any degraded decision
    assert total == {"allowed": LIMIT, "limited": REQUESTS - LIMIT}, counted
    assert tally(exchanges) == {200: LIMIT, 429: REQUESTS - LIMIT}
    assert len(upstream.requests()) == LIMIT
    assert all(sum(one.values()) > 0 for one in counted), counted  # each instance decided
    assert statuses == [0] * INSTANCES
