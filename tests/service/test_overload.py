"""A burst at one ``ratekeeper serve`` instance on a real Redis, with the store's default
timeout (0.25 s) and the ``allow`` failure policy: overload is not a store failure.

Thousands of requests arrive at the same moment, each on its own connection: most for keys of
their own, each well under its limit, so that every one of them goes to Redis; one in ten for
one key limited to ``LIMIT`` a minute. Meanwhile Redis hiccups: it sleeps ``HICCUP`` seconds
every so often (as a slow command or a fork would hold it), within the store's timeout. Neither
the burst alone nor the hiccups alone fail a call; together they did: the instance's event
loop, busy with the burst, read Redis's answers late, the calls timed out, the breaker opened
and the failure policy admitted several times the limit.

Overload is the loop's, not the store's: no call to the store may fail, the breaker never
opens, no decision is made by the failure policy, the limited key is admitted exactly
``LIMIT`` times, and every request is answered: decided (200 or 429), or turned away at once
as overloaded (503 with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import RedisServer, command
from tests.service.http_load import Exchange, Request, burst
from tests.service.served import Served

#: The limited key's limit, a minute.
LIMIT = 50
#: Every ``HOT_EVERY``-th request is for the limited key.
HOT_EVERY = 10
#: Seconds Redis sleeps at each hiccup (``DEBUG SLEEP``): less than the store's timeout.
HICCUP = "0.2"
#: Seconds between hiccups.
PAUSE = 0.1


def check(key: str, limit: str) -> Request:
    body = json.dumps({"key": key, "limit": limit}).encode()
    return Request("POST", "/v1/check", (("Content-Type", "application/json"),), body)


def requests(count: int, run: str) -> list[Request]:
    """``count`` checks: one in ``HOT_EVERY`` for the limited key, the others each for a key
    of its own, under a limit it cannot reach."""
    return [
        check(f"{run}:hot", f"{LIMIT}/minute")
        if index % HOT_EVERY == 0
        else check(f"{run}:background:{index}", "100/minute")
        for index in range(count)
    ]


def samples(instance: Served) -> dict[str, float]:
    """The instance's metrics, each sample by its name and labels."""
    text = httpx.get(f"{instance.url}/metrics", timeout=30).text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def outcome(exchanges: list[Exchange]) -> Counter[str]:
    """Each answer, by what it was: ``503 overloaded``, else its status, ``hot`` before it for
    the limited key and ``degraded`` after it for a decision of the failure policy; an
    exchange that was not answered, by its error."""
    found: Counter[str] = Counter()
    for index, one in enumerate(exchanges):
        if one.status is None:
            found[str(one.error)] += 1
        elif one.status == 503 and b"urn:ratekeeper:problem:overloaded" in one.body:
            assert one.headers.get("retry-after", "").isdigit(), one.headers
            found["503 overloaded"] += 1
        else:
            hot = "hot " if index % HOT_EVERY == 0 else ""
            degraded = " degraded" if one.headers.get("x-ratelimit-degraded") == "true" else ""
            found[f"{hot}{one.status}{degraded}"] += 1
    return found


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("count", [5000])
def test_a_burst_at_one_instance_is_decided_or_shed_never_failed_open(
    tmp_path: Path, count: int
) -> None:
    run = uuid.uuid4().hex[:12]
    redis = RedisServer(tmp_path / "redis", None, "--enable-debug-command", "local")
    with (tmp_path / "serve.log").open("wb") as log:  # the default store timeout, 0.25 s
        instance = Served(tmp_path, "--store", redis.url, "--on-store-error", "allow", stderr=log)
    calm = threading.Event()

    def hiccups() -> None:
        while not calm.wait(PAUSE):
            command(redis.port, "DEBUG", "SLEEP", HICCUP)

    hiccuping = threading.Thread(target=hiccups)
    hiccuping.start()
    try:
        started = time.monotonic()
        exchanges = asyncio.run(burst(instance.http, requests(count, run), timeout=60))
        took = time.monotonic() - started
        calm.set()
        found = samples(instance)
    finally:
        calm.set()
        hiccuping.join()
        try:
            assert instance.stop() == 0
        finally:
            redis.stop()
    answers = outcome(exchanges)
    logged = [
        line
        for line in (tmp_path / "serve.log").read_text().splitlines()
        if "WARNING" in line or "ERROR" in line
    ]
    report = f"{count} requests in {took:.1f} s: {dict(answers)}; logged: {logged[:3]}"
    assert found["ratekeeper_store_breaker_openings_total"] == 0, report
    assert found["ratekeeper_store_degraded_decisions_total"] == 0, report
    assert found["ratekeeper_store_errors_total"] == 0, report
    shed = answers["503 overloaded"]
    decided = {"hot 200": answers["hot 200"], "hot 429": answers["hot 429"], "200": answers["200"]}
    assert sum(decided.values()) + shed == count, report  # nothing else: no error, no degraded
    hot = len(range(0, count, HOT_EVERY))
    if decided["hot 200"] + decided["hot 429"] == hot:  # none of the limited key's was shed
        assert decided["hot 200"] == LIMIT, report
    else:
        assert decided["hot 200"] <= LIMIT, report
