"""The configuration store (PostgreSQL) killed and restarted under three instances.

Three instances share a standalone redis-server (requests) and a PostgreSQL server of their own
(overrides). Two keys get an override of ``BEFORE`` an hour; each instance looks both up
(``/v1/peek``, which counts nothing) so that they are cached. Then the whole PostgreSQL server
is SIGKILLed:

- checks of a cached key, round robin over the instances, are decided by its override, exactly
  (``BEFORE`` of ``ROUNDS`` admitted), none degraded;
- the server is started again on the same data; an override changed through one instance then
  takes effect on every instance (each hears of it by ``LISTEN``, reconnected by itself), and
  the key then admits exactly its new limit.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.fleet import INSTANCES, Timer, fleet
from tests.chaos.limits import limit
from tests.chaos.load import report
from tests.servers import PostgresServer, RedisServer

pytestmark = pytest.mark.chaos

TOKEN = "chaos-admin-token-0123456789"
BEFORE, AFTER = 10, 20
ROUNDS = 30
#: Seconds the configuration store stays down at least.
DOWN = 3.0
#: Seconds an override changed after the restart may take to reach every instance.
PROPAGATION = 15.0


def test_config_store_killed_and_restarted(tmp_path: Path, redis_server: RedisServer) -> None:
    timer = Timer()
    run = uuid.uuid4().hex[:8]
    cached, changed, unseen = (f"cfg-{name}-{run}" for name in ("cached", "changed", "unseen"))
    postgres = PostgresServer()
    try:
        timer.mark("postgres up")
        flags = ("--config", postgres.url, "--admin-token", TOKEN)
        with fleet(tmp_path, redis_server.url, *flags) as instances:
            timer.mark("instances up")
            clients = [httpx.Client(base_url=url, timeout=10) for url in instances.urls]
            admin = {"Authorization": f"Bearer {TOKEN}"}
            for key in (cached, changed, unseen):
                put = clients[0].put(f"/v1/overrides/{key}", json=limit(BEFORE), headers=admin)
                assert put.status_code == 200, put.text
            for client in clients:
                for key in (cached, changed):
                    assert _peek(client, key)["statuses"][0]["limit"] == BEFORE

            postgres.kill()
            down = time.monotonic()
            answers = [_check(clients[n % INSTANCES], cached) for n in range(ROUNDS)]
            unseen_answer = clients[1].post("/v1/check", json={"key": unseen})
            errors_while_down = instances.metric("ratekeeper_config_store_errors_total")
            time.sleep(max(DOWN - (time.monotonic() - down), 0.0))

            postgres.start()  # the same port and data
            restarted = time.monotonic()
            put = _until_ok(
                lambda: clients[1].put(f"/v1/overrides/{changed}", json=limit(AFTER), headers=admin)
            )
            written = time.monotonic()
            took = []
            for client in clients:
                while _peek(client, changed)["statuses"][0]["limit"] != AFTER:
                    assert time.monotonic() - written < PROPAGATION, "the change never arrived"
                    time.sleep(0.05)
                took.append(round(time.monotonic() - written, 2))
            after = [_check(clients[n % INSTANCES], changed) for n in range(ROUNDS)]
            for client in clients:
                client.close()
            statuses = instances.stop()
    finally:
        postgres.remove()

    report(
        "the configuration store (PostgreSQL) SIGKILLed and restarted",
        {
            "cached key while down: admitted": f"{sum(a['allowed'] for a in answers)} of "
            f"{ROUNDS} (override {BEFORE})",
            "cached key while down: degraded": sum(a["degraded"] for a in answers),
            "a key first looked up while down": f"{unseen_answer.status_code} "
            f"{unseen_answer.text[:160]}",
            "config store errors while down (per instance)": errors_while_down,
            "down for (s)": round(restarted - down, 2),
            "override accepted after the restart (s)": round(written - restarted, 2),
            "changed override seen by each instance after (s)": took,
            "changed key: admitted": f"{sum(a['allowed'] for a in after)} of {ROUNDS} "
            f"(override {AFTER})",
            "seconds": f"{timer():.1f} (postgres {timer.marks['postgres up']:.1f})",
        },
    )

    assert statuses == [0] * INSTANCES
    assert put.status_code == 200
    assert [a["allowed"] for a in answers] == [True] * BEFORE + [False] * (ROUNDS - BEFORE)
    assert not any(a["degraded"] for a in answers)
    assert [a["allowed"] for a in after] == [True] * AFTER + [False] * (ROUNDS - AFTER)
    assert all(a["statuses"][0]["limit"] == AFTER for a in after)


def _check(client: httpx.Client, key: str) -> dict[str, Any]:
    response = client.post("/v1/check", json={"key": key})
    assert response.status_code in (200, 429), response.text
    answer: dict[str, Any] = response.json()
    return answer


def _peek(client: httpx.Client, key: str) -> dict[str, Any]:
    response = client.post("/v1/peek", json={"key": key})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _until_ok(call: Any, seconds: float = 15.0) -> httpx.Response:
    """``call()`` again until it answers 200 (the store may still be starting)."""
    deadline = time.monotonic() + seconds
    while True:
        response: httpx.Response = call()
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        time.sleep(0.1)
