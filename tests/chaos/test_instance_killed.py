"""One of three instances SIGKILLed mid-load behind nginx: the other two keep the limit exact.

Three instances share a standalone redis-server and one rule: ``LIMIT`` requests an hour for
everyone (a sliding log). nginx, as deployed by ``deploy/nginx/ratekeeper.conf`` but failing
closed, spreads its ``auth_request`` subrequests over them round robin. ``REQUESTS`` requests
arrive, ``CONCURRENCY`` at a time; once a fifth of them have been sent (half the limit), one
instance is killed with SIGKILL.

Nothing over the limit reaches the application, and the survivors decide every request they
get exactly (no decision of the failure policy). A request the killed instance held when it
died is retried by nginx on a survivor (its ``proxy_next_upstream``): if the dead one had
counted it already, it is counted twice and the limit admits one fewer, never one more. The
figures say what nginx answered for those requests.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.chaos.fleet import Timer, fleet
from tests.chaos.load import report
from tests.gateways import NginxServer, UpstreamServer
from tests.servers import RedisServer
from tests.service.balanced import nginx_over
from tests.service.http_load import Exchange, Request, exchange, tally

pytestmark = pytest.mark.chaos

LIMIT = 600
REQUESTS = 1500
CONCURRENCY = 30
KILL_AFTER = REQUESTS // 5  # well before the limit is reached
RULES = """
domain: {domain}
descriptors:
  - key: remote_address
    rate_limit: {{unit: hour, requests_per_unit: {limit}, algorithm: sliding_log, name: everyone}}
"""


async def paced(port: int, kill: asyncio.Event) -> list[Exchange]:
    """``REQUESTS`` requests, ``CONCURRENCY`` at a time; ``kill`` is set once ``KILL_AFTER``
    have been sent."""
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(n: int) -> Exchange:
        async with slots:
            if n == KILL_AFTER:
                kill.set()
            return await exchange(port, Request("GET", f"/orders/{n}"), timeout=30)

    return list(await asyncio.gather(*(one(n) for n in range(REQUESTS))))


def test_one_instance_killed_mid_load(tmp_path: Path, redis_server: RedisServer) -> None:
    timer = Timer()
    domain = f"kill-{uuid.uuid4().hex[:12]}"
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(domain=domain, limit=LIMIT))
    upstream = UpstreamServer(tmp_path / "app")
    try:
        with fleet(tmp_path, redis_server.url, "--rules", str(rules)) as instances:
            front = NginxServer(
                tmp_path / "nginx",
                nginx_over(instances.instances, upstream, domain),
                worker_connections=4 * CONCURRENCY,
            )
            timer.mark("started")
            try:

                async def drive() -> tuple[list[Exchange], float]:
                    kill = asyncio.Event()
                    running = asyncio.create_task(paced(front.port, kill))
                    await kill.wait()
                    instances.kill_one(1)
                    killed = asyncio.get_running_loop().time()
                    return await running, killed

                exchanges, killed = asyncio.run(drive())
            finally:
                front.stop()
            survivors = [instances.instances[0], instances.instances[2]]
            degraded = [
                instances.metric("ratekeeper_store_degraded_decisions_total")[index]
                for index in (0, 1)
            ]
            decided = [_decided(one.url, domain) for one in survivors]
            instances.stop()
        admitted = len(upstream.requests())
    finally:
        upstream.stop()

    near = [one for one in exchanges if one.started <= killed <= one.ended]
    report(
        "one instance of three SIGKILLed mid-load, behind nginx",
        {
            "gateway answers": dict(tally(exchanges)),
            "gateway answers to requests open at the kill": dict(tally(near)),
            "application saw": f"{admitted} (limit {LIMIT})",
            "survivors' decisions": decided,
            "survivors' degraded decisions": degraded,
            "seconds": f"{timer():.1f} (started {timer.marks['started']:.1f})",
        },
    )

    assert admitted <= LIMIT
    assert admitted >= LIMIT - CONCURRENCY  # counted by the dead one, then again: one fewer
    assert tally(exchanges)[200] == admitted
    assert degraded == [0, 0]
    assert set(tally(exchanges)) <= {200, 429, 500}, tally(exchanges)


def _decided(url: str, domain: str) -> dict[str, int]:
    """An instance's decisions in ``domain``, by result, from its ``/metrics``."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    found: Counter[str] = Counter()
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "ratekeeper_decisions_total"
                and labels.get("domain") == domain
                and labels.get("rule") == "everyone"
            ):
                found[labels["result"]] += int(sample.value)
    return dict(found)
