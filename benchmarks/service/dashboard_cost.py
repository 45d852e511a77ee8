"""What the dashboard's recorder costs a decision: ``python -m benchmarks.service.dashboard_cost``.

Two ``AsyncEngine``s on the memory store decide one descriptor matched by a rule
(``await engine.check(domain, [[("user", key)]])`` in a loop): one observed by ``Metrics``
alone, as ``ratekeeper serve`` runs without ``--dashboard``, the other by a ``Recorder`` in front
of the same kind of ``Metrics``, as it runs with it. The two take turns, repeat by repeat, each
keeping its best; the difference is what recording adds to a decision. Rows:

- one hot key, as the service benchmark sends;
- ``--keys`` distinct keys in turn (by default 10,000). Past ``4 * capacity`` distinct keys
  waiting (4,000), the recorder folds them into its summaries on the decision's path, as it does
  in a service that sees that many keys a second;
- the observer alone, called with a decision's statuses, ``Metrics`` and ``Recorder`` (in front
  of its ``Metrics``), on the hot key.

Then what runs once a second: ``tick()`` after a second's worth of decisions (on one key, and on
the many keys), and the figures of a ``GET /v1/stats`` (``shot``, ``series``, ``latency`` and
``top``, without the HTTP and JSON around them) in microseconds.

Needs the ``server`` extra. Nothing here is a timed assertion; no test depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from benchmarks.service.metrics_cost import nanoseconds
from benchmarks.trials import timed
from ratekeeper import Limit
from ratekeeper.engine import AsyncEngine, Status
from ratekeeper.rules import parse_rules
from ratekeeper.service.dashboard import Recorder
from ratekeeper.service.dashboard import stats as figures
from ratekeeper.service.observe.metrics import Metrics

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000000000, name: per_user}
"""
Requests = list[list[list[tuple[str, str]]]]


def engine(recorded: bool) -> tuple[AsyncEngine, Recorder | None]:
    """An engine observed by its ``Metrics``, and by a ``Recorder`` in front of them if
    ``recorded``; and the recorder."""
    metrics = Metrics()
    built = AsyncEngine(
        "memory://",
        rules=parse_rules(RULES, "rules.yaml"),
        default=Limit(1_000_000_000, 86_400),
        domain="keys",
        observer=metrics,
    )
    metrics.track(built)
    return built, Recorder(built, metrics) if recorded else None


def requests(keys: int, calls: int) -> Requests:
    return [[[("user", f"user:{index % keys}")]] for index in range(calls)]


def decisions(
    loop: asyncio.AbstractEventLoop, engines: Sequence[AsyncEngine], sent: Requests, repeat: int
) -> list[float]:
    """Each engine's best time per decision of ``sent``, in nanoseconds, taking turns."""

    async def run(checked: AsyncEngine) -> None:
        check = checked.check
        for descriptors in sent:
            await check("api", descriptors)

    for checked in engines:  # every key's plan cached, every key counted once
        loop.run_until_complete(run(checked))
    best = [float("inf")] * len(engines)
    for _ in range(repeat):
        for index, checked in enumerate(engines):
            seconds = timed(lambda: loop.run_until_complete(run(checked)))  # noqa: B023
            best[index] = min(best[index], seconds / len(sent) * 1e9)
    return best


def once_a_second(
    loop: asyncio.AbstractEventLoop, recorded: AsyncEngine, recorder: Recorder, sent: Requests
) -> tuple[float, float]:
    """Microseconds of ``tick()`` after the decisions of ``sent``, and of the figures of a
    ``GET /v1/stats`` then."""

    async def run() -> None:
        for descriptors in sent:
            await recorded.check("api", descriptors)

    loop.run_until_complete(run())
    start = time.perf_counter()
    recorder.tick()
    tick = time.perf_counter() - start
    start = time.perf_counter()
    now = time.time()
    shots = [recorder.shot(now)]
    figures.series(shots, now, recorded.rules)
    figures.latency(shots, now)
    figures.top(shots, now, 60, 10, recorder.capacity)
    return tick * 1e6, (time.perf_counter() - start) * 1e6


def held(seconds: int, rate: int) -> tuple[int, float, float]:
    """A recorder on a fake clock after ``seconds`` seconds of ``rate`` new keys a second
    (every other one decided twice, every third refused): the keys whose latest decision it
    holds, the memory it holds more than when it began (MB, by ``tracemalloc``), and the
    milliseconds of a ``shot()``."""
    import gc
    import tracemalloc

    from ratekeeper import Engine
    from ratekeeper.testing import FakeClock

    clock = FakeClock(1_800_000_000.0)
    observed = Engine("memory://", rules=parse_rules(RULES, "rules.yaml"))
    metrics = Metrics()
    metrics.track(observed)
    recorder = Recorder(observed, metrics, clock=clock)
    allowed = (
        Engine("memory://", rules=parse_rules(RULES, "rules.yaml"))
        .check("api", [[("user", "x")]])
        .statuses[0]
    )
    made = (allowed, allowed._replace(allowed=False))
    observe = observed.observer
    assert observe is not None
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for second in range(seconds):
        for index in range(rate):
            status = made[index % 3 == 0]._replace(identity=f"api/user:{second}-{index}")
            for _ in range(1 + index % 2):
                observe("api", (status,))
        clock.set(int(clock()) + 1.005)
        recorder.tick()
    gc.collect()
    grown = (tracemalloc.get_traced_memory()[0] - before) / 1e6
    tracemalloc.stop()
    start = time.perf_counter()
    shot = recorder.shot()
    took = (time.perf_counter() - start) * 1e3
    return len(shot.latest), grown, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000, help="decisions per repeat")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys of the second row")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--churn", type=int, default=120, help="seconds of 5,000 new keys a second, for memory"
    )
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    rows: list[tuple[str, float, float]] = []
    for name, keys in (("one hot key", 1), (f"{args.keys:,} keys in turn", args.keys)):
        (plain, _), (recorded, _) = engine(False), engine(True)
        metrics_only, with_recorder = decisions(
            loop, [plain, recorded], requests(keys, args.calls), args.repeat
        )
        rows.append((f"AsyncEngine.check, {name}", metrics_only, with_recorder))

    recorded, recorder = engine(True)
    assert recorder is not None
    statuses: tuple[Status, ...] = loop.run_until_complete(
        recorded.check("api", [[("user", "alice")]])
    ).statuses
    metrics = recorder.metrics
    observe = recorded.observer
    assert observe is not None
    rows.append(
        (
            "the observer alone, hot key",
            nanoseconds(lambda: metrics("api", statuses), args.calls, args.repeat),
            nanoseconds(lambda: observe("api", statuses), args.calls, args.repeat),
        )
    )
    print("| ns per decision | Metrics | Metrics + Recorder | added by the Recorder | ratio |")
    print("|---|---:|---:|---:|---:|")
    for what, alone, both in rows:
        added = both - alone
        print(f"| {what} | {alone:,.0f} | {both:,.0f} | {added:+,.0f} | {alone / both:.3f}x |")

    print()
    print("| once a second, µs | after a second of | tick() | /v1/stats figures |")
    print("|---|---|---:|---:|")
    for keys, calls in ((1, 10_000), (args.keys, args.keys)):
        recorded, recorder = engine(True)
        assert recorder is not None
        tick, shown = once_a_second(loop, recorded, recorder, requests(keys, calls))
        print(f"| | {calls:,} decisions on {keys:,} key(s) | {tick:,.0f} | {shown:,.0f} |")
    loop.close()
    print()
    keys, grown, took = held(args.churn, 5_000)
    print(f"after {args.churn} s of 5,000 new keys a second: the latest decision of {keys:,} keys")
    print(f"held, {grown:.1f} MB more than at the start; a shot() (each /v1/stats) {took:.1f} ms")


if __name__ == "__main__":
    main()
