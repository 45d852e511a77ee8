"""Leased quotas across processes, on a real Redis and a real Redis Cluster.

Each process opens its own store from the URL, as separate application servers would, and
grants from its slices of one hot key's budget. Every process hits until it is refused with
nothing left (its slice empty and the store's budget spent), so what the processes admit
together is a count, not a race against the clock: exactly the limit for the algorithms that
count exactly (less than a unit of refill aside), never more for the sliding counter. A slice
goes back to the store when its process closes; one SIGKILLed while holding a slice has it
counted as spent, and its hold on the bucket expires ``lease_ttl`` after it was taken.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import struct
import time
import uuid
from math import ceil
from typing import Any

import pytest
import redis

from ratekeeper import Algorithm, Limit, Limiter, open_store
from ratekeeper.core.store_keys import state_key
from ratekeeper.stores.wrappers.leasing import Leasing
from tests.servers import RedisCluster, RedisServer, wait_until

PROCESSES = 8
AMOUNT = 1_000
DAY = 86_400
#: How long a process goes on being refused with something left before it gives up.
PATIENCE = 60.0
LEASABLE = [
    Algorithm.FIXED_WINDOW,
    Algorithm.SLIDING_COUNTER,
    Algorithm.BUCKETED_WINDOW,
    Algorithm.TOKEN_BUCKET,
    Algorithm.GCRA,
    Algorithm.LEAKY_BUCKET,
]
APPROXIMATE = {Algorithm.SLIDING_COUNTER}
REFILLS = {Algorithm.TOKEN_BUCKET, Algorithm.GCRA, Algorithm.LEAKY_BUCKET}
#: The hold records' values: the units held and when the record expires, two doubles.
RECORD = struct.Struct("<dd")


def leasing_of(limiter: Limiter) -> Leasing:
    """The ``Leasing`` a limiter's Redis store is (opened with ``on_store_error=None``)."""
    store = limiter.store
    assert isinstance(store, Leasing)
    return store


def opened(url: str, prefix: str, **options: Any) -> Limiter:
    return Limiter(open_store(url, prefix=prefix, on_store_error=None, timeout=5.0, **options))


def until_spent(limiter: Limiter, key: str, limit: Limit) -> int:
    """Hit ``key`` until a hit is refused with nothing left, here or in the store; return the
    hits admitted. A process that stopped sooner (say after a fixed number of attempts, while
    refused locally with budget left in the store) would leave that budget unused."""
    admitted = 0
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        decision = limiter.hit(key, limit)
        if decision.allowed:
            admitted += 1
        elif decision.remaining == 0:
            return admitted
    raise AssertionError(f"still refused with budget left after {PATIENCE}s")


def _hammer(url: str, prefix: str, algorithm: str, start: Any, out: Any) -> None:
    limiter = opened(url, prefix)
    limit = Limit(AMOUNT, DAY, algorithm, sync="leased")
    start.wait()
    admitted = until_spent(limiter, "hot", limit)
    limiter.close()  # gives back what its slices hold: counted before the parent reads
    out.put(admitted)


def admitted_across_processes(url: str, prefix: str, algorithm: Algorithm) -> tuple[int, float]:
    """The hits ``PROCESSES`` processes admit together, and the seconds they took."""
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    out = context.Queue()
    workers = [
        context.Process(target=_hammer, args=(url, prefix, algorithm.value, start, out))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    began = time.monotonic()
    start.set()
    counts = [out.get(timeout=120) for _ in workers]
    elapsed = time.monotonic() - began
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    return sum(counts), elapsed


def clients(server: RedisServer | RedisCluster) -> list[redis.Redis]:
    """A client of the standalone server, or one of each cluster master."""
    if isinstance(server, RedisServer):
        return [redis.Redis.from_url(server.url)]
    return [redis.Redis(host="127.0.0.1", port=node.port) for node in server.masters()]


def reader(server: RedisServer | RedisCluster) -> Any:
    """A client that reads any key of ``server``: a cluster client on a cluster."""
    if isinstance(server, RedisServer):
        return redis.Redis.from_url(server.url)
    nodes = [redis.cluster.ClusterNode(host, port) for host, port in server.startup_nodes]
    return redis.cluster.RedisCluster(startup_nodes=nodes)


def keys_of(server: RedisServer | RedisCluster, prefix: str) -> dict[bytes, int]:
    """Every key under ``prefix`` on every server, with its PTTL."""
    found = {}
    for client in clients(server):
        found.update({key: client.pttl(key) for key in client.scan_iter(f"{prefix}:*", 1000)})
        client.close()
    return found


def refill(limit: Limit, seconds: float) -> int:
    """The most whole units ``limit`` can refill in ``seconds``."""
    return ceil(limit.amount / limit.period * seconds)


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("algorithm", LEASABLE)
@pytest.mark.parametrize("server", ["redis_server", "redis_cluster"])
def test_processes_never_admit_more_than_the_limit(
    request: pytest.FixtureRequest, record_property: Any, server: str, algorithm: Algorithm
) -> None:
    redis_server = request.getfixturevalue(server)
    prefix = f"leases-{uuid.uuid4().hex[:8]}"
    admitted, elapsed = admitted_across_processes(redis_server.url, prefix, algorithm)
    record_property(f"{server}-{algorithm.value}-admitted", admitted)
    limit = Limit(AMOUNT, DAY, algorithm)
    if algorithm in APPROXIMATE:
        assert 0 < admitted <= AMOUNT
    elif algorithm in REFILLS:
        assert AMOUNT <= admitted <= AMOUNT + refill(limit, elapsed)
    else:
        assert admitted == AMOUNT
    keys = keys_of(redis_server, prefix)
    assert keys and all(ttl > 0 for ttl in keys.values()), keys
    if algorithm not in REFILLS:  # every slice went back: the store counted what was admitted
        checker = opened(redis_server.url, prefix)
        assert AMOUNT - checker.peek("hot", limit).remaining == admitted
        checker.close()


@pytest.mark.parametrize(
    "algorithm", [Algorithm.FIXED_WINDOW, Algorithm.BUCKETED_WINDOW, Algorithm.TOKEN_BUCKET]
)
@pytest.mark.parametrize("server", ["redis_server", "redis_cluster"])
def test_a_slice_goes_back_on_close(
    request: pytest.FixtureRequest, server: str, algorithm: Algorithm
) -> None:
    """A process takes slices (the first its hit's own, the next sized from its demand, larger
    than its hits) and closes: the store then counts exactly the hits it granted, and holds no
    record of the slice."""
    redis_server = request.getfixturevalue(server)
    url = redis_server.url
    prefix = f"back-{uuid.uuid4().hex[:8]}"
    exact, leased = Limit(AMOUNT, DAY, algorithm), Limit(AMOUNT, DAY, algorithm, sync="leased")
    limiter, checker = opened(url, prefix), opened(url, prefix)
    assert limiter.hit("warm", leased).allowed
    leasing = leasing_of(limiter)
    (piece,) = leasing.slices.values()
    assert piece.left == 0  # the first slice is the first hit's own
    hits = 1
    while not piece.left and hits < 200:  # until a slice sized from demand holds more
        assert limiter.hit("warm", leased).allowed
        hits += 1
    taken = AMOUNT - checker.peek("warm", exact).remaining
    assert leasing.granted == hits and piece.left == taken - hits and leasing.exchanges >= 2
    assert taken > hits  # the slice is counted in the store before its units are granted
    limiter.close()
    assert checker.peek("warm", exact).remaining == AMOUNT - hits
    slices = state_key(exact, "warm", prefix) + ":s"
    client = reader(redis_server)
    assert client.exists(slices) == 0
    client.close()
    checker.close()


#: The short lease lifetime of the SIGKILL tests: a dead holder's hold lasts this long.
TTL = 0.5


def _hold_and_stop(url: str, prefix: str, limit: Limit, how: dict[str, Any], conn: Any) -> None:
    """Take slices, grant ``how["hits"]`` (more if its last slice is used up), report, and
    stop (SIGSTOP) still holding it: no thread of this process runs again, so its sweep
    cannot give the slice back before the parent's SIGKILL. With ``how["period_start"]``,
    begin in the first second of a window."""
    hits, period_start = how["hits"], how["period_start"]
    limiter = opened(url, prefix, lease_ttl=how["ttl"])
    while period_start and time.time() % limit.period > 1.0:
        time.sleep(0.01)
    granted = sum(limiter.hit("held", limit).allowed for _ in range(hits))
    leasing = leasing_of(limiter)
    (piece,) = leasing.slices.values()
    while not piece.left and granted < 5 * hits:  # its last slice used up: take another
        granted += limiter.hit("held", limit).allowed
    conn.send((leasing.holder, granted, piece.left))
    os.kill(os.getpid(), signal.SIGSTOP)


def killed_holding(
    url: str, prefix: str, limit: Limit, *, hits: int, ttl: float = TTL, period_start: bool = False
) -> tuple[str, int, int]:
    """Run ``_hold_and_stop`` in a process and SIGKILL it once it reports; return its holder,
    the units it granted and those it still held."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    child = context.Process(
        target=_hold_and_stop,
        args=(url, prefix, limit, {"hits": hits, "ttl": ttl, "period_start": period_start}, theirs),
    )
    child.start()
    try:
        assert ours.poll(120), "the holder never reported"
        holder, granted, left = ours.recv()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    assert child.exitcode == -signal.SIGKILL
    return holder, granted, left


def server_time(client: Any) -> float:
    seconds, micros = client.time()
    return float(seconds + micros / 1e6)


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("algorithm", sorted(REFILLS))
def test_a_killed_holders_units_count_as_spent_and_its_hold_expires(
    redis_server: RedisServer, algorithm: Algorithm
) -> None:
    prefix = f"killed-{uuid.uuid4().hex[:8]}"
    limit = Limit(AMOUNT, DAY, algorithm, sync="leased")
    began = time.monotonic()
    holder, granted, left = killed_holding(redis_server.url, prefix, limit, hits=10)
    assert granted >= 10 and left > 0
    client = reader(redis_server)
    slices = state_key(limit, "held", prefix) + ":s"
    (record,) = client.hgetall(slices).items()
    units, expires = RECORD.unpack(record[1])  # its last slice: the earlier ones were granted
    assert record[0] == holder.encode() and left < units <= granted + left
    assert expires <= server_time(client) + TTL
    wait_until(lambda: server_time(client) > expires, 10, "the hold's expiry")

    live = opened(redis_server.url, prefix, lease_ttl=TTL)
    admitted = until_spent(live, "held", limit)
    live.close()
    spread = refill(limit, time.monotonic() - began)
    counted = granted + left  # in the store: every slice it took
    assert AMOUNT - counted <= admitted <= AMOUNT - counted + spread  # all but the dead slices
    assert granted + admitted <= AMOUNT + spread  # nothing granted twice
    assert holder.encode() not in client.hgetall(slices)
    wait_until(lambda: client.exists(slices) == 0, 10, "the slices' hash to expire")
    client.close()


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("algorithm", sorted(REFILLS))
def test_a_killed_holders_hold_keeps_the_bucket_from_refilling_until_it_expires(
    redis_server: RedisServer, algorithm: Algorithm
) -> None:
    """A bucket of 100 refilling in a second: while the dead holder's record lasts, the bucket
    stays 100 less its slice, however long; once the record has expired, it fills up."""
    prefix = f"hold-{uuid.uuid4().hex[:8]}"
    limit = Limit(100, 1, algorithm, sync="leased")
    ttl = 2.0  # long enough to look at the bucket after a free one would have filled up
    killed_holding(redis_server.url, prefix, limit, hits=3, ttl=ttl)
    client = reader(redis_server)
    (record,) = client.hgetall(state_key(limit, "held", prefix) + ":s").values()
    units, expires = RECORD.unpack(record)  # the dead holder's last slice
    prober = leasing_of(opened(redis_server.url, prefix))
    refilled = expires - ttl + units / 100 * 1.5  # a free bucket would be full by then

    def look() -> tuple[int, float]:
        taken = prober.store.lease("held", limit, 0, holder="probe", ttl=TTL)
        return taken.decision.remaining, taken.now

    looks = []
    remaining, now = look()
    while now < expires:
        looks.append((remaining, now))
        time.sleep(0.02)
        remaining, now = look()
    assert all(remaining <= 100 - units for remaining, _ in looks), looks
    assert any(now > refilled for _, now in looks), (refilled, looks)
    wait_until(lambda: look()[0] == 100, 10, "the bucket to fill up")
    prober.close()
    client.close()


@pytest.mark.slow
@pytest.mark.serial
def test_a_killed_holders_window_slice_counts_until_the_window_turns(
    redis_server: RedisServer,
) -> None:
    prefix = f"window-{uuid.uuid4().hex[:8]}"
    period = 6
    limit = Limit(100, period, Algorithm.FIXED_WINDOW, sync="leased")
    _, granted, left = killed_holding(redis_server.url, prefix, limit, hits=3, period_start=True)
    live = opened(redis_server.url, prefix)
    window = time.time() // period
    admitted = until_spent(live, "held", limit)
    assert time.time() // period == window, "the window turned meanwhile: too slow to tell"
    assert admitted == 100 - granted - left  # the dead slice is spent, the rest is not
    live.close()
    wait_until(lambda: time.time() // period > window, period + 1, "the window to turn")
    fresh = opened(redis_server.url, prefix)
    assert until_spent(fresh, "held", limit) == 100
    fresh.close()


def _across_windows(url: str, prefix: str, limit: Limit, start: Any, out: Any) -> None:
    """Hit for 4 seconds; report each grant as (wall time before, after, exchanges after)."""
    limiter = opened(url, prefix)
    leasing = leasing_of(limiter)
    grants = []
    start.wait()
    end = time.time() + 4.0
    while (before := time.time()) < end:
        if limiter.hit("turning", limit).allowed:
            grants.append((before, time.time(), leasing.exchanges))
    limiter.close()
    out.put(grants)


@pytest.mark.slow
@pytest.mark.serial
def test_slices_end_with_their_window(redis_server: RedisServer) -> None:
    """Three processes grant under 200 per 1-second window for 4 seconds. A grant is placed in
    a window by the wall clock (Redis runs on this machine) when it began and ended in it: no
    window has more than 200. And a slice never outlives its window: between a process's last
    grant in one window and its first in the next, it made a new exchange."""
    limit = Limit(200, 1, Algorithm.FIXED_WINDOW, sync="leased")
    prefix = f"turns-{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("spawn")
    start, out = context.Event(), context.Queue()
    workers = [
        context.Process(target=_across_windows, args=(redis_server.url, prefix, limit, start, out))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    start.set()
    reports = [out.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    per_window: dict[int, int] = {}
    for grants in reports:
        last: dict[int, int] = {}  # window -> exchanges after its last grant
        for before, after, exchanges in grants:
            window = int(before // limit.period)
            if int(after // limit.period) != window:
                continue  # it straddled an edge: which window counted it is not known here
            per_window[window] = per_window.get(window, 0) + 1
            if window - 1 in last and window not in last:
                assert exchanges > last[window - 1], "a slice outlived its window"
            last[window] = exchanges
    assert len(per_window) >= 3 and sum(per_window.values()) > 0
    assert max(per_window.values()) <= limit.amount, per_window
