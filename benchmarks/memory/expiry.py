"""The memory store under size: hit latency while keys expire, and bytes per key.

``python -m benchmarks.memory.expiry`` fills a ``MemoryStore`` with a million live keys, then drives
it open-loop for a while: calls are scheduled at a fixed rate, nine in ten a hit on a live key and
one in ten a new key under a short limit, so that keys expire all the time and must be dropped. Each
call's latency is measured from the time it was scheduled, not from when the loop got to it, so that
a pause (the store holding its lock) delays every call scheduled during it, as it would delay the
requests of a server. It prints the store's size as it goes, the CPU time of each call (the time the
store held its lock, with no preemption in it), and the latency percentiles of the hits on live
keys, overall and for the worst second: replayed from the CPU times (a queue served in order at the
scheduled rate), and as measured on the wall clock, which on a shared machine also holds every time
the process was preempted.

``python -m benchmarks.memory.expiry --footprint`` measures the bytes each idle key holds, for
every algorithm (``benchmarks.memory.footprint.bytes_per_key``, 100,000 keys).

Nothing here is a timed assertion; no test depends on it.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from array import array
from collections.abc import Sequence

import ratekeeper as rk

#: The limit of the live keys: one hit a day, so none expires during a run.
LIVE = rk.Limit(1, 86_400, "gcra")
#: The limit of the keys added during the run: they expire ten seconds after their hit.
SHORT = rk.Limit(1, 10, "gcra")


def percentile(values: Sequence[int], share: float) -> int:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


def microseconds(nanoseconds: float) -> str:
    return f"{nanoseconds / 1000:,.1f} µs"


def summary(latencies: Sequence[int]) -> str:
    return (
        f"p50 {microseconds(percentile(latencies, 0.5))}, "
        f"p99 {microseconds(percentile(latencies, 0.99))}, "
        f"p99.9 {microseconds(percentile(latencies, 0.999))}, max {microseconds(max(latencies))}"
    )


def per_second(latencies: Sequence[int], per: int) -> list[int]:
    """The p99 of each second's worth (``per``) of latencies."""
    return [
        percentile(latencies[start : start + per], 0.99) for start in range(0, len(latencies), per)
    ]


def replay(services: Sequence[int], interval: int) -> list[int]:
    """Each call's latency from its scheduled time, had each taken its CPU time ``services``
    and nothing else run: a queue served in order, one call every ``interval`` ns."""
    finish = 0
    latencies = []
    for number, service in enumerate(services):
        arrival = number * interval
        finish = max(arrival, finish) + service
        latencies.append(finish - arrival)
    return latencies


def latency(keys: int, rate: int, seconds: float, collector: str = "freeze") -> None:
    """Fill ``keys`` live keys, then run ``rate`` calls a second for ``seconds``.

    ``collector`` says what Python's garbage collector does meanwhile: ``freeze``, leave the
    keys of the fill alone (``gc.freeze()``, as a server may after warming up); ``on``, walk
    every key as it does by default; ``off``, nothing, so that only the store's own work is
    measured.
    """
    store = rk.MemoryStore(max_keys=4 * keys)
    apply = store.apply
    started = time.perf_counter()
    for number in range(keys):
        apply(f"live:{number}", LIVE)
    print(f"filled {keys:,} keys in {time.perf_counter() - started:.1f} s")
    gc.collect()
    if collector == "freeze":
        gc.freeze()
    elif collector == "off":
        gc.disable()

    # Arrays, not lists: the garbage collector does not walk them.
    waits = array("q")  # per call: wall-clock time from its scheduled time to its end
    services = array("q")  # per call: the CPU time it took
    sizes: list[int] = []  # the store's size, each second
    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    interval = 1_000_000_000 // rate
    calls = int(seconds * rate)
    stride = 7_919  # a prime: successive hits land on keys far apart
    start = clock()
    for call in range(calls):
        due = start + call * interval
        while clock() < due:
            pass
        if call % 10 == 0:
            begun = cpu()
            apply(f"new:{call}", SHORT)
        else:
            begun = cpu()
            apply(f"live:{call * stride % keys}", LIVE)
        services.append(cpu() - begun)
        waits.append(clock() - due)
        if call % rate == 0:
            sizes.append(len(store))
    gc.unfreeze()
    gc.enable()

    hits = [number for number in range(calls) if number % 10]
    print(f"{calls:,} calls in {seconds:g} s ({rate:,}/s), {len(hits):,} of them hits on live keys")
    print(f"store size, each second: from {min(sizes):,} to {max(sizes):,} keys")
    inserts = services[::10]
    hit_services = [services[number] for number in hits]
    print(
        f"CPU time of a call: hits {summary(hit_services)}; inserts {summary(inserts)}; "
        f"{sum(service > 1_000_000 for service in services):,} calls over 1 ms"
    )
    replayed = replay(services, interval)
    replayed_hits = [replayed[number] for number in hits]
    seconds_p99 = per_second(replayed_hits, rate * 9 // 10)
    print(f"hit latency, replayed from the CPU times: {summary(replayed_hits)}")
    print(f"  worst one-second p99 {microseconds(max(seconds_p99))}")
    waited = [waits[number] for number in hits]
    print(f"hit latency, wall clock (this machine's other load included): {summary(waited)}")
    print(f"  worst one-second p99 {microseconds(max(per_second(waited, rate * 9 // 10)))}")


def footprint(keys: int) -> None:
    """Bytes per idle key for every algorithm (needs the ``bench`` extra)."""
    from benchmarks.memory.footprint import bytes_per_key
    from benchmarks.memory.peers import ratekeeper

    for algorithm in rk.Algorithm:
        value = bytes_per_key(ratekeeper, algorithm.value, keys)
        gc.collect()
        print(f"{algorithm.value:16} {value:6,.0f} bytes per key")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory.expiry", description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000, help="live keys (1,000,000)")
    parser.add_argument("--rate", type=int, default=50_000, help="calls a second (50,000)")
    parser.add_argument("--seconds", type=float, default=65.0, help="run time (65)")
    parser.add_argument(
        "--gc",
        choices=["freeze", "on", "off"],
        default="freeze",
        help="the garbage collector after the fill: gc.freeze() (default), on, or off",
    )
    parser.add_argument(
        "--footprint", action="store_true", help="measure bytes per key instead (100,000 keys)"
    )
    args = parser.parse_args(argv)
    if args.footprint:
        footprint(100_000)
    else:
        print(f"garbage collector: {args.gc}")
        latency(args.keys, args.rate, args.seconds, args.gc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
