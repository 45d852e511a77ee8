"""The memory store under size: hit latency while keys expire, and bytes per key.

``python -m benchmarks.expiry`` fills a ``MemoryStore`` with a million live keys, then drives it
open-loop for a while: calls are scheduled at a fixed rate, nine in ten a hit on a live key and
one in ten a new key under a short limit, so that keys expire all the time and must be dropped.
Each call's latency is measured from the time it was scheduled, not from when the loop got to
it, so that a pause (the store holding its lock) delays every call scheduled during it, as it
would delay the requests of a server. It prints the latency percentiles of the hits on live
keys, overall and for the worst one-second window, the store's size as it goes, and how long
the calls themselves took: the longest call is the longest time the store held its lock. On a
shared machine, the process being preempted shows in both (a few milliseconds at a time).

``python -m benchmarks.expiry --footprint`` measures the bytes each idle key holds, for every
algorithm (``benchmarks.memory.bytes_per_key``, 100,000 keys).

Nothing here is a timed assertion; no test depends on it.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Sequence

import ratekeeper as rk

#: The limit of the live keys: one hit a day, so none expires during a run.
LIVE = rk.Limit(1, 86_400, "gcra")
#: The limit of the keys added during the run: they expire ten seconds after their hit.
SHORT = rk.Limit(1, 10, "gcra")


def percentile(values: Sequence[int], share: float) -> int:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


def microseconds(nanoseconds: int) -> str:
    return f"{nanoseconds / 1000:,.1f} µs"


def latency(keys: int, rate: int, seconds: float) -> None:
    """Fill ``keys`` live keys, then run ``rate`` calls a second for ``seconds``."""
    store = rk.MemoryStore(max_keys=4 * keys)
    apply = store.apply
    started = time.perf_counter()
    for number in range(keys):
        apply(f"live:{number}", LIVE)
    print(f"filled {keys:,} keys in {time.perf_counter() - started:.1f} s")
    gc.collect()
    gc.freeze()  # what a server does after warming up: the live keys are not collected again

    hits: list[int] = []
    windows: list[tuple[int, int, int, int]] = []  # (p99, max, hits, store size) per second
    window: list[int] = []
    longest = [0, 0]  # the longest hit on a live key, and the longest insert
    slow = 0  # calls that took over a millisecond
    clock = time.perf_counter_ns
    interval = 1_000_000_000 // rate
    start = clock()
    window_end = start + 1_000_000_000
    stop = start + int(seconds * 1_000_000_000)
    call = 0
    stride = 7_919  # a prime: successive hits land on keys far apart
    while True:
        due = start + call * interval
        if due >= stop:
            break
        while clock() < due:
            pass
        insert = call % 10 == 0
        name = f"new:{call}" if insert else f"live:{call * stride % keys}"
        begun = clock()
        apply(name, SHORT if insert else LIVE)
        done = clock()
        took = done - begun
        if took > longest[insert]:
            longest[insert] = took
        if took > 1_000_000:
            slow += 1
        if not insert:
            window.append(done - due)
        call += 1
        if done >= window_end:
            windows.append((percentile(window, 0.99), max(window), len(window), len(store)))
            hits += window
            window = []
            window_end += 1_000_000_000
    hits += window
    gc.unfreeze()

    print(f"{call:,} calls in {seconds:g} s ({rate:,}/s), {len(hits):,} of them hits on live keys")
    print(
        "hit latency from its scheduled time: "
        f"p50 {microseconds(percentile(hits, 0.5))}, p99 {microseconds(percentile(hits, 0.99))}, "
        f"p99.9 {microseconds(percentile(hits, 0.999))}, max {microseconds(max(hits))}"
    )
    worst = max(windows)
    print(
        f"worst one-second window: p99 {microseconds(worst[0])}, max {microseconds(worst[1])}"
        f" over {worst[2]:,} hits"
    )
    print(
        f"longest call: a hit {microseconds(longest[0])}, an insert {microseconds(longest[1])};"
        f" {slow:,} calls took over 1 ms"
    )
    sizes = [size for _, _, _, size in windows]
    print(f"store size per second: from {min(sizes):,} to {max(sizes):,} keys")
    print("p99 per second, µs:", " ".join(f"{p99 / 1000:,.0f}" for p99, _, _, _ in windows))


def footprint(keys: int) -> None:
    """Bytes per idle key for every algorithm (needs the ``bench`` extra)."""
    from benchmarks.memory import bytes_per_key
    from benchmarks.peers import ratekeeper

    for algorithm in rk.Algorithm:
        value = bytes_per_key(ratekeeper, algorithm.value, keys)
        gc.collect()
        print(f"{algorithm.value:16} {value:6,.0f} bytes per key")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.expiry", description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000, help="live keys (1,000,000)")
    parser.add_argument("--rate", type=int, default=50_000, help="calls a second (50,000)")
    parser.add_argument("--seconds", type=float, default=65.0, help="run time (65)")
    parser.add_argument(
        "--footprint", action="store_true", help="measure bytes per key instead (100,000 keys)"
    )
    args = parser.parse_args(argv)
    if args.footprint:
        footprint(100_000)
    else:
        latency(args.keys, args.rate, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
