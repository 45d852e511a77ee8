"""What the service's metrics cost a decision: ``python -m benchmarks.service.metrics_cost``.

Times, with ``timeit`` (the best of several repeats, in nanoseconds per call):

- the observer alone, ``metrics(domain, statuses)``, for a one-descriptor status whose label set
  is already counted (every decision after the first of its kind), and for an unknown domain
  (each call looks the domain up);
- an in-memory ``Engine``'s ``check`` of one descriptor and its ``decide``, without an observer
  and with ``Metrics`` as its observer: the difference is what the metrics add to a decision;
- the latency histogram: ``observe_latency`` and the ``timed`` context manager.

Needs the ``server`` extra. Nothing here is a timed assertion; no test depends on it.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from ratekeeper import Engine, Limit, MemoryStore
from ratekeeper.rules import parse_rules
from ratekeeper.service.observe.metrics import Metrics

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000, name: per_user}
"""
DESCRIPTORS = [[("user", "alice")]]


def nanoseconds(call: Callable[[], object], number: int, repeat: int) -> float:
    """The best of ``repeat`` runs of ``number`` calls, per call."""
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e9


def engine(observer: Metrics | None) -> Engine:
    built = Engine(
        MemoryStore(),
        rules=parse_rules(RULES, "rules.yaml"),
        default=Limit(1_000_000_000, 1),
        domain="keys",
        observer=observer,
    )
    if observer is not None:
        observer.track(built)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000, help="calls per repeat")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    number, repeat = args.number, args.repeat

    metrics = Metrics()
    plain, observed = engine(None), engine(metrics)
    statuses = observed.check("api", DESCRIPTORS).statuses
    unknown = observed.check("elsewhere", DESCRIPTORS).statuses  # no rule: the domain unknown
    rows: list[tuple[str, float]] = [
        (
            "observer alone, label set counted",
            nanoseconds(lambda: metrics("api", statuses), number, repeat),
        ),
        (
            "observer alone, unknown domain",
            nanoseconds(lambda: metrics("elsewhere", unknown), number, repeat),
        ),
    ]
    check_plain = nanoseconds(lambda: plain.check("api", DESCRIPTORS), number, repeat)
    check_observed = nanoseconds(lambda: observed.check("api", DESCRIPTORS), number, repeat)
    decide_plain = nanoseconds(lambda: plain.decide("k"), number, repeat)
    decide_observed = nanoseconds(lambda: observed.decide("k"), number, repeat)
    rows += [
        ("Engine.check, no observer", check_plain),
        ("Engine.check, Metrics observer", check_observed),
        ("Engine.check, added by Metrics", check_observed - check_plain),
        ("Engine.decide, no observer", decide_plain),
        ("Engine.decide, Metrics observer", decide_observed),
        ("Engine.decide, added by Metrics", decide_observed - decide_plain),
        (
            "observe_latency('http', s)",
            nanoseconds(lambda: metrics.observe_latency("http", 1e-4), number, repeat),
        ),
    ]

    def timed() -> None:
        with metrics.timed("http"):
            pass

    rows.append(("with timed('http'): (empty block)", nanoseconds(timed, number, repeat)))
    print("| what | ns per call |")
    print("|---|---:|")
    for what, cost in rows:
        print(f"| {what} | {cost:,.0f} |")


if __name__ == "__main__":
    main()
