"""A burst of ``BURST`` concurrent requests at each of three instances: overload is not a store
failure.

Three instances share a standalone redis-server, with the default store timeout. ``BURST``
requests arrive at each instance at once, each on a connection of its own: every connection is
made and every request written but its last byte, then the last bytes all go together, so that
each instance finds ``BURST`` complete requests at once. One in ten checks a hot key limited to
``HOT`` an hour, every other one a key of its own (under its limit, so that every request
reaches Redis, the shape that makes an instance's own event loop fall behind).

Every request is answered: a decision (200, 429) or, for the excess an instance sheds, 503
with ``Retry-After``. None is decided by the failure policy (no degraded decision), no breaker
opens, and the hot key admits exactly its limit of the requests that were decided.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Literal

import pytest

from tests.chaos.fleet import INSTANCES, Timer, fleet
from tests.chaos.limits import HOT, check
from tests.chaos.load import report
from tests.servers import RedisServer
from tests.service.http_load import Exchange, Request, exchange, tally

pytestmark = pytest.mark.chaos

BURST = 5000
#: Seconds a request may wait for its answer: the burst takes a while on a small machine.
TIMEOUT = 150.0


class Held(asyncio.Event):
    """The event the requests' last bytes wait for; counts the requests waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = 0

    async def wait(self) -> Literal[True]:
        self.waiting += 1
        return await super().wait()


def requests(run: str, instance: int, hot: str) -> list[Request]:
    found = []
    for n in range(BURST):
        body = check(hot, HOT) if n % 10 == 0 else check(f"own-{run}-{instance}-{n}", 10)
        headers = (("Content-Type", "application/json"),)
        found.append(Request("POST", "/v1/check", headers, json.dumps(body).encode()))
    return found


def test_a_burst_at_each_instance(tmp_path: Path, redis_server: RedisServer) -> None:
    timer = Timer()
    run = uuid.uuid4().hex[:8]
    hot = f"hot-{run}"
    with fleet(tmp_path, redis_server.url) as instances:
        timer.mark("started")
        ports = [one.http for one in instances.instances]
        plan = [(index, one) for index in range(INSTANCES) for one in requests(run, index, hot)]

        async def burst() -> list[Exchange]:
            held = Held()
            sent = [
                exchange(
                    ports[index], one, timeout=TIMEOUT, pause=held, split=len(one.encode()) - 1
                )
                for index, one in plan
            ]
            running = asyncio.gather(*sent)
            while held.waiting < len(plan) and not running.done():
                await asyncio.sleep(0.05)
            timer.mark("connected")
            held.set()
            return list(await running)

        exchanges = asyncio.run(burst())
        timer.mark("burst")
        openings = instances.metric("ratekeeper_store_breaker_openings_total")
        degraded_metric = instances.metric("ratekeeper_store_degraded_decisions_total")
        statuses = instances.stop()

    bodies = [json.loads(one.body) if one.status in (200, 429) else {} for one in exchanges]
    is_hot = [json.loads(one.body)["key"] == hot for _, one in plan]
    degraded_allowed = sum(b.get("degraded", False) and b["allowed"] for b in bodies)
    hot_decided = [b for b, h in zip(bodies, is_hot, strict=True) if h and b]
    hot_allowed = sum(b["allowed"] for b in hot_decided)
    shed = [one for one in exchanges if one.status == 503]
    took = sorted(one.ended - one.started for one in exchanges)
    report(
        f"a burst of {BURST} concurrent requests at each of {INSTANCES} instances",
        {
            "answers": dict(tally(exchanges)),
            "degraded decisions (answers; metric per instance)": (
                f"{sum(b.get('degraded', False) for b in bodies)}; {degraded_metric}"
            ),
            "degraded allows": degraded_allowed,
            "breaker openings (per instance)": openings,
            "hot key admitted": f"{hot_allowed} of {len(hot_decided)} decided (limit {HOT})",
            "shed (503) with Retry-After": f"{sum('retry-after' in o.headers for o in shed)} "
            f"of {len(shed)}",
            "answer time p50 / max (s)": f"{took[len(took) // 2]:.2f} / {took[-1]:.2f}",
            "seconds": f"{timer():.1f} (connecting "
            f"{timer.marks['connected'] - timer.marks['started']:.1f}, "
            f"burst {timer.marks['burst'] - timer.marks['connected']:.1f})",
        },
    )

    assert statuses == [0] * INSTANCES
    assert set(tally(exchanges)) <= {200, 429, 503}, tally(exchanges)
    assert degraded_allowed == 0
    assert openings == [0] * INSTANCES
    assert hot_allowed == min(HOT, len(hot_decided))
    assert all("retry-after" in one.headers for one in shed)
