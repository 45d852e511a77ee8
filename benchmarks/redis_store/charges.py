"""Part 5 of the Redis benchmarks: ``Limiter.charge`` beside ``Limiter.hit``, ratekeeper alone.

As the in-memory part 4 (``benchmarks.memory.charges``): both verbs called as the README calls
them, with a rate string, on ``Limiter(open_store(url))`` (the defaults of ``Limiter(url)``:
the ``local`` failure policy, no over-limit cache), each on its own key prefix, one call at a
time on one hot key, on the allow path and on the deny path (the key over its limit: a refused
hit counts nothing, a refused charge is counted). No peer has a charge verb. Measured as the
other Redis rows are (``benchmarks.redis_store.trials``), the server's own time per decision
included.
"""

from __future__ import annotations

from collections.abc import Callable

import ratekeeper as rk
from benchmarks import report
from benchmarks.contenders import CHARGE, HIT, Contender, debt_algorithms, verb_contender
from benchmarks.redis_store.server import RedisServer
from benchmarks.redis_store.tables import allow_amount, errors, rate, us
from benchmarks.redis_store.trials import RedisSizes, run_row
from benchmarks.report import Output
from benchmarks.trials import DENY_AMOUNT, Plan
from ratekeeper.core.limits import NO_DEBT
from ratekeeper.stores import open_store

HEADERS = ["path", "algorithm", HIT, CHARGE, "charge / hit", "server µs, hit", "server µs, charge"]


def _maker(url: str, verb: str, algorithm: str, amount: int) -> Callable[[str], Contender]:
    def make(namespace: str) -> Contender:
        store = open_store(url, prefix=f"{namespace}-{verb.rsplit('.', maxsplit=1)[-1]}")
        limiter = rk.Limiter(store, algorithm=algorithm)
        return verb_contender(limiter, verb, amount, close=store.close)

    return make


def charges(out: Output, server: RedisServer, sizes: RedisSizes) -> dict[str, dict[str, float]]:
    """Part 5: ``charge`` and ``hit`` in turns; returns charge / hit in time per decision, by
    path and algorithm."""
    out.emit(
        "",
        "## Redis 5. Limiter.charge beside Limiter.hit (ratekeeper alone)",
        "",
        '`limiter.charge(key, "<amount>/hour")` and `limiter.hit(key, "<amount>/hour")` on '
        "`Limiter(open_store(url), algorithm=...)` (the defaults of `Limiter(url)`: the `local` "
        "failure policy, no over-limit cache), one call at a time on one hot key, taking turns. "
        "The peers have no charge verb, so ratekeeper is measured alone. On the deny path the "
        f"key is over its limit of {DENY_AMOUNT}/hour: a hit is refused and counts nothing, a "
        "charge is refused and counted. *charge / hit* is time per decision. Algorithms that "
        f"cannot hold a debt are left out: {', '.join(a.value for a in NO_DEBT)}.",
        "",
    )
    ratios: dict[str, dict[str, float]] = {}
    rows, notes = [], []
    for path in ("allow", "deny"):
        ratios[path] = {}
        for algorithm in debt_algorithms():
            if path == "allow":
                amount = allow_amount(algorithm)
                plan = Plan(amount, 1, sizes.warmup, True, setup_cost=1)
            else:
                amount = DENY_AMOUNT
                plan = Plan(amount, 1, sizes.warmup, False, setup_cost=DENY_AMOUNT)
            makers = {verb: _maker(server.url, verb, algorithm, amount) for verb in (HIT, CHARGE)}
            out.progress(f"redis charge / hit: {path}, {algorithm}")
            results = run_row(server, makers, plan, sizes, f"charge / {path} / {algorithm}")
            hit, charge = results.get(HIT), results.get(CHARGE)
            ratio = None
            if hit and charge and hit.rate and charge.rate:
                ratio = ratios[path][algorithm] = hit.rate / charge.rate
            rows.append([
                path, algorithm, rate(hit), rate(charge), report.ratio(ratio), us(hit), us(charge),
            ])  # fmt: skip
            notes.extend(errors(algorithm, results))
    out.emit(*report.table(HEADERS, rows))
    if notes:
        out.emit("", *notes)
    return ratios


__all__ = ["charges"]
