"""The minute of a Redis Cluster failover under a paced load, as an operator would measure it.

    python -m tests.chaos.failover_minute [--fourth] [--full-coverage yes|no] [--seconds 60]

Three ``ratekeeper serve`` instances (no ``--instances``: they count themselves) share a 6-node
Redis Cluster of their own. A paced load runs from this process: ``HOT_RATE`` requests a second
on one hot key limited to 300 a minute (a sliding log, so that no 60 s holds more than 300 when
the store decides), and ``BACKGROUND_RATE`` a second over ``BACKGROUND_KEYS`` keys that never
reach their limit, round robin over the instances. After ``WARM_UP`` seconds the master holding
the hot key is SIGKILLed; the load goes on for ``--seconds`` more. With ``--fourth``, a fourth
instance starts while the master is down (the cluster then waits 6 s before it marks a master
failed, so that the outage outlasts the start) and takes its part of the load from then on.

It prints, as JSON: the hot key's admissions in the minute that follows the kill (the
``local`` policy's bound is 300 counted by the store plus, while degraded, one share of each
instance), per instance while degraded; the degraded answers for keys on the healthy masters
and on the dead one; what each instance's ``/readyz`` said of the fleet; and the warning the
start logged for a cluster that requires full coverage. Loopback only, bounded in time, it
stops every process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from redis.crc import key_slot

from ratekeeper.client import KEEPALIVE_EXPIRY
from tests.chaos.fleet import INSTANCES, Fleet, owners
from tests.servers import RedisCluster, command

HOT_LIMIT = 300
HOT_RATE = 200
BACKGROUND_RATE = 300
BACKGROUND_KEYS = 5_000
WARM_UP = 5.0
#: Requests in flight at most: enough for the rate at tens of milliseconds an answer.
WORKERS = 100


def say(what: str) -> None:
    """Progress, on stderr: the run lasts over a minute."""
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def body(key: str, capacity: int) -> dict[str, Any]:
    limit = {"capacity": capacity, "time_window_sec": 60, "algorithm": "sliding_log"}
    return {"key": key, "limit": limit}


class Paced:
    """Requests sent at fixed times (an open loop: a slow answer does not slow the load),
    each recorded as ``(sent, instance, key, status, allowed, degraded)``."""

    def __init__(self, hot: str, background: list[str]) -> None:
        self.hot, self.background = hot, background
        self.urls: list[str] = []
        self.answers: list[tuple[float, int, str, int | None, bool, bool]] = []
        self.started = time.monotonic()

    async def run(self, seconds: float) -> None:
        """Send ``seconds`` of the load: request ``n`` at ``n / rate`` seconds, by ``WORKERS``
        senders each on its own connection (a late answer delays only its sender)."""
        rate = HOT_RATE + BACKGROUND_RATE
        total = int(seconds * rate)
        numbers = itertools.count()
        limits = httpx.Limits(  # idle ones kept less long than the service keeps them
            max_connections=WORKERS,
            max_keepalive_connections=WORKERS,
            keepalive_expiry=KEEPALIVE_EXPIRY,
        )
        async with httpx.AsyncClient(limits=limits, timeout=5) as client:

            async def sender() -> None:
                while (n := next(numbers)) < total:
                    delay = self.started + n / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    hot = n * HOT_RATE // rate != (n + 1) * HOT_RATE // rate  # spread evenly
                    key = self.hot if hot else self.background[n % len(self.background)]
                    await self._one(client, n, key)

            await asyncio.gather(*(sender() for _ in range(WORKERS)))

    async def _one(self, client: httpx.AsyncClient, n: int, key: str) -> None:
        urls = list(self.urls)
        instance = n % len(urls)
        sent = time.monotonic() - self.started
        capacity = HOT_LIMIT if key == self.hot else 1_000_000
        try:
            answer = await client.post(f"{urls[instance]}/v1/check", json=body(key, capacity))
        except httpx.HTTPError:
            self.answers.append((sent, instance, key, None, False, False))
            return
        decided = answer.json() if answer.status_code in (200, 429) else {}
        self.answers.append(
            (
                sent,
                instance,
                key,
                answer.status_code,
                bool(decided.get("allowed")),
                bool(decided.get("degraded")),
            )
        )


def dead_names(promoted: int, names: list[str]) -> set[str]:
    """The names whose state is in the slots ``promoted`` took over: each name's key made from
    the key of one name found there (under the same limit), its slot computed as Redis
    does."""
    ranges = [
        (int(low), int(high))
        for low, high, master, *_ in command(promoted, "CLUSTER", "SLOTS")
        if int(master[1]) == promoted
    ]
    stored = command(promoted, "KEYS", "*")
    sample = next(name for name in names for key in stored if name in key)
    template = next(key for key in stored if sample in key)
    return {
        name
        for name in names
        if any(
            low <= key_slot(template.replace(sample, name).encode()) <= high for low, high in ranges
        )
    }


async def measure(
    directory: Path, fourth: bool, full_coverage: str, seconds: float
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:6]
    hot = f"hot-{run}"
    background = [f"bg{n:04d}-{run}" for n in range(BACKGROUND_KEYS)]
    say("starting a 6-node Redis Cluster")
    cluster = RedisCluster(directory / "cluster", node_timeout_ms=6000 if fourth else 1000)
    result: dict[str, Any] = {"full_coverage": full_coverage, "fourth": fourth}
    try:
        for node in cluster.nodes:
            command(node.port, "CONFIG", "SET", "cluster-require-full-coverage", full_coverage)
        say("starting three instances")
        fleet = await asyncio.to_thread(Fleet, directory, cluster.url)
        say(f"load: {HOT_RATE}/s on the hot key, {BACKGROUND_RATE}/s over the others")
        try:
            load = Paced(hot, background)
            load.urls = fleet.urls
            running = asyncio.create_task(load.run(WARM_UP + seconds))
            await asyncio.sleep(WARM_UP)
            victim_port = owners(cluster, [hot])[hot]
            victim = next(node for node in cluster.nodes if node.port == victim_port)
            killed = time.monotonic() - load.started
            cluster.kill(victim)
            say(f"killed the master on port {victim_port}")
            if fourth:
                added = await asyncio.to_thread(fleet.add)
                result["fourth_started_after_s"] = round(
                    time.monotonic() - load.started - killed, 2
                )
                load.urls = [*load.urls, added.url]
            failover = asyncio.create_task(asyncio.to_thread(cluster.wait_for_failover, victim))
            await asyncio.sleep(2.0)
            result["instances_seen_2s_after_kill"] = await asyncio.to_thread(fleet.counted)
            promoted = await failover
            say(f"replica {promoted.port} promoted; the load goes on")
            result["promotion_after_kill_s"] = round(time.monotonic() - load.started - killed, 2)
            result["promoted"] = f"{promoted.port} for {victim_port}"
            await running
            on_dead = dead_names(promoted.port, background)
            logged = [
                line for log in fleet.logs for line in log.read_text(errors="replace").splitlines()
            ]
            warned = [
                line.split("request store: ", 1)[1][:90] + "..."
                for line in logged
                if "request store: cluster-require-full-coverage" in line
            ]
            result["breaker_lines_naming_clusterdown"] = sum(
                "(CLUSTERDOWN), not only a failing shard's" in line for line in logged
            )
            result["warned_at_start"] = f"{len(warned)} instances: {warned[0] if warned else ''}"
        finally:
            await asyncio.to_thread(fleet.stop)
    finally:
        cluster.stop()

    answers = load.answers
    minute = [one for one in answers if killed <= one[0] < killed + 60]
    hot_minute = [one for one in minute if one[2] == hot]
    healthy = [one for one in minute if one[2] != hot and one[2] not in on_dead]
    dead = [one for one in minute if one[2] in on_dead]
    per_instance = Counter(one[1] for one in hot_minute if one[4] and one[5])
    statuses = Counter(str(one[3]) for one in answers)
    result.update(
        {
            "requests": len(answers),
            "statuses": dict(statuses),
            "hot_admitted_in_the_minute_of_the_kill": sum(one[4] for one in hot_minute),
            "hot_admitted_while_degraded_per_instance": [
                per_instance[i] for i in range(len(load.urls))
            ],
            "bound_with_three": HOT_LIMIT + INSTANCES * (HOT_LIMIT // INSTANCES),
            "healthy_masters_degraded": f"{sum(one[5] for one in healthy)} of {len(healthy)}",
            "healthy_masters_degraded_per_instance": [
                sum(one[5] for one in healthy if one[1] == i) for i in range(len(load.urls))
            ],
            "dead_master_degraded": f"{sum(one[5] for one in dead)} of {len(dead)}",
        }
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fourth", action="store_true", help="start a fourth instance")
    parser.add_argument("--full-coverage", choices=("yes", "no"), default="no")
    parser.add_argument("--seconds", type=float, default=62.0, help="load after the kill")
    args = parser.parse_args()
    # A SIGTERM (a timeout's) unwinds like Ctrl-C, so that every process started is stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="failover-minute-") as directory:
        result = asyncio.run(
            measure(Path(directory), args.fourth, args.full_coverage, args.seconds)
        )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
