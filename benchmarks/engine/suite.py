"""The decision engine against a bare ``Limiter.hit``: what the configuration lookup costs.

Each row decides the same keys under the same limit, on the in-memory store, three ways: a bare
``Limiter.hit(key, limit)`` that is handed the limit, ``Engine.is_allowed(key)`` that finds it as
a per-key override in a SQLite configuration store, and ``Engine.check(domain, [[("user",
key)]])`` that finds it by matching an Envoy rule. The engine's cache is warm, as it is after
the first request for a key. The target: the lookup adds at most 20% to the bare hit.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import report
from benchmarks.report import Output
from benchmarks.trials import timed
from ratekeeper import Limit, Limiter, MemoryStore
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.engine import Engine
from ratekeeper.rules import parse_rules

#: At most this much slower than a bare hit, as a fraction.
TARGET = 0.20
#: A limit no run can exhaust, so every call takes the allow path.
AMOUNT = 1_000_000_000
PERIOD = 86_400


@dataclass(frozen=True)
class EngineSizes:
    calls: int = 200_000
    repeats: int = 7
    keys: int = 10_000


ENGINE_QUICK = EngineSizes(calls=20_000, repeats=2, keys=1_000)

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {{requests_per_unit: {amount}, period: {period}, algorithm: {algorithm}}}
"""


def contenders(
    algorithm: str, keys: list[str], calls: int, directory: Path
) -> dict[str, Callable[[], None]]:
    limit = Limit(AMOUNT, PERIOD, algorithm)
    config = open_config_store(f"sqlite:///{directory / f'{algorithm}.db'}")
    for key in keys:
        config.set(key, Override(AMOUNT, PERIOD, algorithm))
    limiter = Limiter(MemoryStore())
    by_key = Engine(MemoryStore(), config=config)
    by_rule = Engine(
        MemoryStore(),
        rules=parse_rules(RULES.format(amount=AMOUNT, period=PERIOD, algorithm=algorithm)),
    )
    sequence = [keys[index % len(keys)] for index in range(calls)]
    entries = {key: [[("user", key)]] for key in keys}
    requests = [entries[key] for key in sequence]
    for key in keys:  # warm every cache, and check each path allows
        assert limiter.hit(key, limit).allowed
        assert by_key.is_allowed(key)
        assert by_rule.check("api", entries[key]).allowed

    hit, is_allowed, check = limiter.hit, by_key.is_allowed, by_rule.check
    key_plan, descriptor_plan = by_key.planner.cache.get, by_rule.planner.cache.get

    def bare() -> None:
        for key in sequence:
            hit(key, limit)

    def engine_key() -> None:
        for key in sequence:
            is_allowed(key)

    def engine_check() -> None:
        for request in requests:
            check("api", request)

    def key_lookup() -> None:
        for key in sequence:
            key_plan(key)

    def descriptor_lookup() -> None:
        for request in requests:
            descriptor_plan(("api", tuple(request[0])))

    return {
        "Limiter.hit": bare,
        "Engine.is_allowed": engine_key,
        "Engine.check": engine_check,
        "key lookup": key_lookup,
        "descriptor lookup": descriptor_lookup,
    }


def run(out: Output, sizes: EngineSizes) -> None:
    out.emit(
        "",
        "## Decision engine: configuration lookup over a bare hit",
        "",
        f"{sizes.calls:,} calls per measurement, best of {sizes.repeats} (taken in turns), "
        "in-memory store, allow path, warm configuration cache. *Overhead* is the engine's "
        "whole time per decision over the bare hit's; *its lookup* is the time of the "
        "configuration lookup alone (the plan cache's get, as the engine calls it), as a share of "
        f"the bare hit's time. The target: the lookup adds at most {TARGET:.0%}. `check` also "
        "builds its Envoy-style verdict (a status per descriptor), which a bare hit does not.",
        "",
    )
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for algorithm in ("fixed_window", "token_bucket", "gcra"):
            for keys in (["user:241531"], [f"user:{n}" for n in range(sizes.keys)]):
                which = "hot key" if len(keys) == 1 else f"{len(keys):,} keys"
                out.progress(f"engine: {algorithm}, {which}")
                runs = contenders(algorithm, keys, sizes.calls, Path(directory))
                best = dict.fromkeys(runs, 0.0)
                for _ in range(sizes.repeats):
                    for name, function in runs.items():
                        best[name] = max(best[name], sizes.calls / timed(function))
                bare = best["Limiter.hit"]
                rows.append(
                    [
                        algorithm,
                        which,
                        report.rate(bare),
                        report.rate(best["Engine.is_allowed"]),
                        f"{bare / best['Engine.is_allowed'] - 1:+.0%}",
                        f"{bare / best['key lookup']:.0%}",
                        report.rate(best["Engine.check"]),
                        f"{bare / best['Engine.check'] - 1:+.0%}",
                        f"{bare / best['descriptor lookup']:.0%}",
                    ]
                )
    out.emit(
        *report.table(
            [
                "algorithm",
                "keys",
                "Limiter.hit /s",
                "Engine.is_allowed /s",
                "overhead",
                "its lookup",
                "Engine.check /s",
                "overhead",
                "its lookup",
            ],
            rows,
        )
    )
