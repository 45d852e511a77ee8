"""Part 4 of the in-memory benchmarks: ``Limiter.charge`` beside ``Limiter.hit``, ratekeeper alone.

A charge counts work already done even past its limit (``limiter.charge(user, "10000/hour",
830)``, as the README shows); the overflow is a debt that refuses later hits. None of the peers
has such a verb: limits, pyrate-limiter and throttled-py refuse a hit that does not fit and
count nothing, so ratekeeper is measured alone, against its own ``hit``. Both are called as the
README calls them, with a rate string, on a ``Limiter(algorithm=...)`` each, taking turns repeat
by repeat, for every algorithm that can hold a debt, on one hot key: on the allow path (every
call fits) and on the deny path (the key is over its limit: a hit is refused and counts nothing,
a charge is refused and counted, so the debt grows through the run). The checks of
``benchmarks.trials`` hold for both: the sample's calls (a hit, or a charge, of 1) must all be
allowed, or all refused, before and after the timed ones.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import ratekeeper as rk
from benchmarks import report
from benchmarks.contenders import (
    CHARGE,
    HIT,
    MAX_KEYS,
    Contender,
    debt_algorithms,
    verb_contender,
)
from benchmarks.memory.scenarios import SCENARIOS, Sizes, plan
from benchmarks.report import Output
from benchmarks.trials import run_row
from ratekeeper.core.limits import NO_DEBT


def charge_or_hit(verb: str) -> Callable[[str, int], Contender]:
    """A factory of ``verb``'s contender over a ``MemoryStore`` of its own."""

    def make(algorithm: str, amount: int) -> Contender:
        limiter = rk.Limiter(rk.MemoryStore(max_keys=MAX_KEYS), algorithm=algorithm)
        return verb_contender(limiter, verb, amount)

    return make


def charges(out: Output, sizes: Sizes) -> dict[str, dict[str, float]]:
    """Part 4: ``charge`` and ``hit`` in turns; returns charge / hit in time per decision, by
    scenario and algorithm."""
    out.emit("", "## 4. Limiter.charge beside Limiter.hit (ratekeeper alone)", "")
    out.emit(
        '`limiter.charge(key, "<amount>/hour")` and `limiter.hit(key, "<amount>/hour")`, '
        "each on a `Limiter(MemoryStore(), algorithm=...)` of its own, taking turns. The peers "
        "have no charge verb (each refuses a hit that does not fit and counts nothing), so "
        "ratekeeper is measured alone. On the deny path the key is over its limit: a hit is "
        "refused and counts nothing, a charge is refused and counted (its debt grows). "
        "*charge / hit* is time per decision. "
        f"Algorithms that cannot hold a debt are left out: {', '.join(a.value for a in NO_DEBT)}.",
        "",
    )
    factories = {HIT: charge_or_hit(HIT), CHARGE: charge_or_hit(CHARGE)}
    ratios: dict[str, dict[str, float]] = {}
    rows = []
    for scenario in SCENARIOS[:2]:  # one hot key, allow and deny
        ratios[scenario.name] = {}
        for algorithm in debt_algorithms():
            row_plan = plan(scenario, algorithm, sizes)
            out.progress(f"charge / hit: {scenario.name}, {algorithm}")
            contenders = [make(algorithm, row_plan.amount) for make in factories.values()]
            label = f"charge / {scenario.name} / {algorithm}"
            best = run_row(contenders, row_plan, sizes.repeats, label)
            del contenders
            gc.collect()
            ratio = ratios[scenario.name][algorithm] = best[HIT] / best[CHARGE]
            rows.append([
                scenario.name, algorithm, report.rate(best[HIT]), report.rate(best[CHARGE]),
                report.ratio(ratio),
            ])  # fmt: skip
    out.emit(*report.table(["scenario", "algorithm", HIT, CHARGE, "charge / hit"], rows))
    out.emit(
        "",
        f"- hot key, allow: {plan(SCENARIOS[0], 'gcra', sizes).describe()}",
        f"- hot key, deny: {plan(SCENARIOS[1], 'gcra', sizes).describe()}, the key first "
        "charged the whole amount",
    )
    return ratios


__all__ = ["charges"]
