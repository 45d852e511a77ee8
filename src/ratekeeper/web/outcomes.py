"""The gate's decision on a web request (``GateDecision``), and limits charged by outcome:
what an admitted request came to (``HandlerResult``), and which results a limit charges
(``charge_when``, ``charge_statuses``).

A limit charged by outcome counts each attempt before the handler runs, so that it can refuse
it, and gives the attempt back once the handler's result is known and not one the limit
charges (a login that succeeded). N attempts at once can therefore never pass the limit: each
holds its unit until its own result gives it back. Only an admitted request's units are given
back, through the store's ``refund`` at the time they were counted; a request the gate refused
never ran, and gives back what its other limits took. Once settled, a gate's decision tells
what its result left: a decision whose units were given back shows them as never counted
(``given_back``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, cast

from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from ratekeeper.core.rates import cached
from ratekeeper.core.registry import Algorithm, spec
from ratekeeper.engine.verdict import Status

log = logging.getLogger("ratekeeper.web")


class HandlerResult(NamedTuple):
    """What an admitted request came to: ``status``, its response's status code (500 when
    the handler raised, unless the exception carries a status: ``status_code``, as Starlette's
    ``HTTPException``, or ``code``, as Werkzeug's); ``error``, the exception it raised, if
    any."""

    status: int
    error: BaseException | None = None


#: Whether a limit charges a request's ``HandlerResult``.
Judge = Callable[[HandlerResult], bool]


def check_charging(charge_when: Any, charge_statuses: Any) -> Judge | None:
    """The test of a limit's results from its options (None: every request is charged):
    ``charge_when``, a function of a ``HandlerResult``, or ``charge_statuses``, the status codes
    charged (``{401, 403}``). ``TypeError`` or ``ValueError`` for bad ones, or both given."""
    if charge_when is not None and charge_statuses is not None:
        raise ValueError("give charge_when or charge_statuses, not both")
    if charge_when is not None:
        if not callable(charge_when):
            raise TypeError(f"charge_when is a test of a HandlerResult, not {charge_when!r}")
        judge: Judge = charge_when
        return judge
    if charge_statuses is None:
        return None
    statuses = _statuses(charge_statuses)
    return lambda result: result.status in statuses


def _statuses(charge_statuses: Any) -> frozenset[int]:
    if isinstance(charge_statuses, str | bytes) or not isinstance(charge_statuses, Iterable):
        raise TypeError(f"charge_statuses is a set of status codes, not {charge_statuses!r}")
    statuses = tuple(charge_statuses)
    if not statuses:
        raise ValueError("charge_statuses names at least one status code")
    for status in statuses:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise ValueError(f"a status code is an integer from 100 to 599, not {status!r}")
    return frozenset(statuses)


def status_of(error: BaseException) -> int:
    """The status a handler's exception answers: its ``status_code`` or ``code`` when it is
    an HTTP status, else 500."""
    for name in ("status_code", "code"):
        status = getattr(error, name, None)
        if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
            return status
    return 500


def charged(judge: Judge, result: HandlerResult) -> bool:
    """Whether ``judge`` charges ``result``; a judge that raises charges (logged): a unit is
    never given back on a doubt."""
    try:
        return bool(judge(result))
    except Exception:
        log.exception("charge_when raised on %s: the request stays charged", result)
        return True


class Pending(NamedTuple):
    """Units an admitted request holds until its result is known: ``granted`` units counted
    on ``key`` under ``limit`` at ``at``, given back unless ``judge`` charges the result;
    ``place`` is the place of their decision in the outcome's ``statuses``."""

    key: str
    limit: Limit | str
    granted: int
    at: float
    judge: Judge
    place: int


class GateDecision(NamedTuple):
    """The gate's decision on one request (``Gate.decide``); a ``Decision`` is one limit's.

    ``allowed``; ``statuses``, the decisions and rule statuses that enforce (shadow ones left
    out), for the headers; ``retry_after``, the longest wait of the refusing ones (0 when
    allowed); ``delay``, what an admitted request waited for a shaper; ``degraded``, a
    store failure was answered by the failure policy; ``unavailable``, the store's error when
    nothing could decide (then ``allowed`` is False); ``pending``, the units held for limits
    charged by outcome until the request's result settles them.
    """

    allowed: bool
    statuses: tuple[Decision | Status, ...] = ()
    retry_after: float = 0.0
    delay: float = 0.0
    degraded: bool = False
    unavailable: str | None = None
    pending: tuple[Pending, ...] = ()


def given_back(
    outcome: GateDecision, given: Sequence[Pending], algorithm: Algorithm = Algorithm.FIXED_WINDOW
) -> GateDecision:
    """``outcome`` once its pending units are settled and ``given`` were given back: each of
    their decisions shows the remaining as if they had never been counted (its remaining plus
    them, at most its limit) and the reset with them: 0 once its limit is whole again; for a
    limit that refills over time (a bucket, GCRA) an interval earlier per unit; for one that
    counts per window, its window's end as before. A limit given as a rate string is of
    ``algorithm``, as the decider reads it."""
    if not given:
        return outcome._replace(pending=())
    statuses = list(outcome.statuses)
    for one in given:
        decision = cast(Decision, statuses[one.place])
        remaining = min(decision.remaining + one.granted, decision.limit)
        reset = 0.0
        if remaining < decision.limit:
            reset = max(decision.reset_after - one.granted * _refill(one.limit, algorithm), 0.0)
        statuses[one.place] = decision._replace(remaining=remaining, reset_after=reset)
    return outcome._replace(statuses=tuple(statuses), pending=())


def _refill(limit: Limit | str, algorithm: Algorithm) -> float:
    """The seconds by which one unit given back brings ``limit``'s reset nearer: its interval
    when it refills over time, 0 when it counts per window (the window ends when it ends)."""
    found = cached(limit, algorithm)[0] if isinstance(limit, str) else limit
    return found.interval if spec(found.algorithm).hold is not None else 0.0
