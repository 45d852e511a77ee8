"""A Redis Cluster master SIGKILLed under load: its replica takes over, and only its keys feel it.

Three instances share a 6-node Redis Cluster of their own (3 masters, 3 replicas; a node is
failed after 1 s of silence), each with the default failure policy and told they are three.
The cluster answers for the slots it still covers (``cluster-require-full-coverage no``, as a
deployment that wants one shard's loss to stay one shard's sets it): with Redis's default,
every node refuses every key (``CLUSTERDOWN``) from when the master is marked failed until its
replica is promoted, and no limiter can keep the healthy shards exact through that. A
bounded load runs: a quarter of it on one hot key limited to ``HOT`` an hour, the rest on 60
keys that never reach their limit, spread by their hash slots over the three masters. Once
every key has been counted, the master holding the hot key is SIGKILLed.

What the instances promise:

- every request is answered with a decision (200 or 429);
- a key on a healthy master never gets a degraded decision: one shard's loss degrades only its
  own keys;
- the hot key's admissions stay within the policy's bound: the store's ``HOT`` plus, while
  degraded, at most ``HOT / 3`` per instance (the replica may also have missed the last hits
  it was sent before its master died: they count toward the same total);
- decisions are exact again by themselves, soon after the replica is promoted.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.chaos.fleet import INSTANCES, Timer, fleet, owners
from tests.chaos.limits import HOT, SHARE, check, mixed
from tests.chaos.load import Answer, Load, allowed, between, report, summary
from tests.servers import RedisCluster, command

pytestmark = pytest.mark.chaos

#: Seconds of load before the kill, and the most the whole load may last.
WARM_UP = 3.0
MOST = 45.0
#: Seconds after the promotion by which every decision must be exact again.
SETTLE = 3.0


def test_a_master_killed_under_load(tmp_path: Path) -> None:
    timer = Timer()
    run = uuid.uuid4().hex[:8]
    hot = f"hot-{run}"
    background = [f"bg{n:03d}-{run}" for n in range(60)]

    checks = mixed(hot, background)

    cluster = RedisCluster(tmp_path / "cluster")
    try:
        for node in cluster.nodes:
            command(node.port, "CONFIG", "SET", "cluster-require-full-coverage", "no")
        timer.mark("cluster up")
        with fleet(tmp_path, cluster.url) as instances:
            timer.mark("instances up")
            load = Load(instances.urls, checks, seconds=MOST)
            time.sleep(WARM_UP)
            where = owners(cluster, [hot, *background])
            assert set(where) == {hot, *background}, "a key was not counted before the kill"
            victim = next(node for node in cluster.nodes if node.port == where[hot])
            killed = load.now()
            cluster.kill(victim)
            promoted = cluster.wait_for_failover(victim)
            failed_over = load.now()
            time.sleep(SETTLE + 2.0)
            load.stop()
            answers = load.result()
            statuses = instances.stop()
        timer.mark("done")
    finally:
        cluster.stop()

    dead = {name for name, port in where.items() if port == victim.port}
    healthy = [one for one in answers if one.key not in dead]
    on_dead = [one for one in answers if one.key in dead and one.key != hot]
    hot_answers = [one for one in answers if one.key == hot]
    degraded = [one.sent for one in answers if one.degraded]
    degraded_allowed = [
        sum(one.allowed and one.degraded for one in hot_answers if one.instance == index)
        for index in range(INSTANCES)
    ]

    def seen(group: list[Answer]) -> dict[str, object]:
        return summary(between(group, killed, failed_over + SETTLE))

    report(
        "a Redis Cluster master SIGKILLed under load",
        {
            "before the kill": summary(between(answers, 0, killed)),
            "hot key, kill to promotion + 3 s": seen(hot_answers),
            "keys on the dead master, kill to promotion + 3 s": seen(on_dead),
            "keys on healthy masters, kill to promotion + 3 s": seen(healthy),
            "promotion after the kill (s)": round(failed_over - killed, 2),
            "degraded from/to (s after the kill)": (
                (round(degraded[0] - killed, 2), round(degraded[-1] - killed, 2))
                if degraded
                else None
            ),
            "promoted": f"{promoted.port} for {victim.port}",
            "hot key admitted": f"{allowed(answers, hot)} of {len(hot_answers)} (limit {HOT})",
            "hot key admitted over its limit": max(allowed(answers, hot) - HOT, 0),
            "hot key admitted while degraded, per instance": degraded_allowed,
            "keys on the dead master / healthy masters": f"{len(dead)} / {61 - len(dead)}",
            "seconds": f"{timer():.1f} (cluster {timer.marks['cluster up']:.1f}, "
            f"instances {timer.marks['instances up'] - timer.marks['cluster up']:.1f})",
        },
    )

    assert statuses == [0] * INSTANCES
    assert {one.status for one in answers} <= {200, 429}, summary(answers)
    assert any(one.degraded for one in hot_answers + on_dead), "the kill went unnoticed"
    assert not any(one.degraded for one in healthy), summary(one for one in healthy)
    assert all(count <= SHARE for count in degraded_allowed), degraded_allowed
    assert allowed(answers, hot) <= HOT + INSTANCES * SHARE
    settled = between(answers, failed_over + SETTLE, MOST)
    assert settled and not any(one.degraded for one in settled), summary(settled)


def test_an_instance_started_while_a_master_is_down(tmp_path: Path) -> None:
    """The fleet grows while the hot key's master is down: the new instance counts itself
    through the healthy masters, every instance then divides by four, and the new one admits at
    most a quarter of the limit while degraded. The cluster is slow to fail over (its nodes
    wait 6 s before marking a master failed), so that the new instance starts inside the
    outage."""
    run = uuid.uuid4().hex[:8]
    hot = f"hot-{run}"
    background = [f"bg{n:03d}-{run}" for n in range(60)]
    cluster = RedisCluster(tmp_path / "cluster", node_timeout_ms=6000)
    try:
        for node in cluster.nodes:
            command(node.port, "CONFIG", "SET", "cluster-require-full-coverage", "no")
        with fleet(tmp_path, cluster.url) as instances:
            load = Load(instances.urls, mixed(hot, background), seconds=MOST)
            time.sleep(WARM_UP)
            where = owners(cluster, [hot, *background])
            victim = next(node for node in cluster.nodes if node.port == where[hot])
            killed = load.now()
            cluster.kill(victim)
            fourth = instances.add()
            started = load.now()
            instances.wait_counted(INSTANCES + 1)
            counted = load.now()
            late = Load([fourth.url], lambda n: check(hot, HOT), seconds=MOST, concurrency=4)
            promoted = cluster.wait_for_failover(victim)
            failed_over = load.now()
            time.sleep(SETTLE)
            late.stop()
            load.stop()
            answers, added = load.result(), late.result()
            statuses = instances.stop()
    finally:
        cluster.stop()

    hot_answers = [one for one in answers if one.key == hot]
    degraded_allowed = [
        sum(one.allowed and one.degraded for one in hot_answers if one.instance == index)
        for index in range(INSTANCES)
    ] + [sum(one.allowed and one.degraded for one in added)]
    total = allowed(answers, hot) + sum(one.allowed for one in added)
    report(
        "a fourth instance started while a Redis Cluster master is down",
        {
            "started / counted by all (s after the kill)": (
                round(started - killed, 2),
                round(counted - killed, 2),
            ),
            "promotion after the kill (s)": round(failed_over - killed, 2),
            "promoted": f"{promoted.port} for {victim.port}",
            "fourth instance, hot key": summary(added),
            "hot key admitted while degraded, per instance": degraded_allowed,
            "hot key admitted": f"{total} (limit {HOT}; bound with three {HOT + HOT})",
        },
    )
    assert statuses == [0] * (INSTANCES + 1)
    assert {one.status for one in answers + added} <= {200, 429}
    assert any(one.degraded for one in added), "the fourth instance started after the outage"
    # The first three held a third each until the fourth was counted; the fourth a quarter.
    assert all(count <= SHARE for count in degraded_allowed[:INSTANCES]), degraded_allowed
    assert degraded_allowed[INSTANCES] <= HOT // (INSTANCES + 1), degraded_allowed
    assert total <= HOT + INSTANCES * SHARE + HOT // (INSTANCES + 1)
