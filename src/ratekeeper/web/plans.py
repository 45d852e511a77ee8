"""What the gate twins (``ratekeeper.web.gate``) share, free of I/O: ``BaseGate``, their
options checked once, the plan of a request (its hits, shadow hits and descriptors) and the
``GateDecision`` its decisions come to; and what a request decided under limits charged by outcome
holds until its result is known (``held``).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple, TypeVar

from ratekeeper.core.decisions import Decision
from ratekeeper.core.inputs import check_cost
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import Algorithm
from ratekeeper.decider import (
    AsyncDecider,
    AsyncManyDecider,
    AsyncRefundDecider,
    Decider,
    ManyDecider,
    RefundDecider,
)
from ratekeeper.engine.verdict import Status, Verdict
from ratekeeper.rules.model import Entry
from ratekeeper.web import keys
from ratekeeper.web.keys import Key, KeyFunction
from ratekeeper.web.limits import CostLike, RateLimit
from ratekeeper.web.outcomes import GateDecision, Judge, Pending
from ratekeeper.web.request import Request

log = logging.getLogger("ratekeeper.web")

S = TypeVar("S")

#: One hit of a request: the counter's key, one limit, and the cost.
RequestHit = tuple[str, Limit | str, int]


#: What decides nothing: a request no limit applies to.
NOTHING = GateDecision(True)


class _Plan(NamedTuple):
    """What deciding a request takes: its hits, its shadow hits, and its descriptors, each
    costing ``cost`` (0 when there are none); ``judges``, for each hit, the test of the
    results its limit charges (None for every hit when no limit is charged by outcome)."""

    hits: list[RequestHit]
    shadow: list[RequestHit]
    descriptors: list[tuple[Entry, ...]]
    cost: int
    judges: list[Judge | None] | None = None


def held(plan: _Plan, admitted: Sequence[tuple[Decision, float]]) -> tuple[Pending, ...]:
    """The units of ``plan``'s hits under limits charged by outcome that were granted."""
    return tuple(
        Pending(key, limit, decision.granted, at, judge, place)
        for place, ((key, limit, _), (decision, at), judge) in enumerate(
            zip(plan.hits, admitted, plan.judges or (), strict=True)
        )
        if judge is not None and decision.allowed and decision.granted and not decision.degraded
    )


def _is_async(decider: object) -> bool:
    return inspect.iscoroutinefunction(getattr(decider, "hit", None))


def sleeper(sleep: S) -> S:
    """``sleep``, a twin's way of waiting out a shaper's delay, once it is checked."""
    if not callable(sleep):
        raise TypeError(f"sleep waits out a delay: a function of seconds, not {sleep!r}")
    return sleep


def _batches(decider: object) -> bool:
    """Whether ``decider.hit_many`` decides several limits in one atomic store call."""
    return isinstance(decider, ManyDecider | AsyncManyDecider) and decider.atomic_hit_many


class BaseGate:
    """What the twins share: the options, checked once, and the plan of a request (no I/O).
    Which twin a decider needs is checked here, as are the methods the options call for."""

    #: Whether the twin's decider is asyncio's, and what it says of a decider of the other.
    _async = False
    _other_twin = "{!r} is asyncio's; a Gate needs a Limiter or Engine"

    decider: Decider | AsyncDecider

    def __init__(
        self,
        decider: Decider | AsyncDecider,
        limits: Iterable[RateLimit] = (),
        *,
        scope: str | None = "app",
        domain: str | None = None,
        descriptors: Iterable[Key | KeyFunction] = (),
        cost: CostLike = 1,
        all_or_nothing: bool | None = None,
        max_delay: float = 0.0,
    ) -> None:
        if not callable(getattr(decider, "hit", None)):
            raise TypeError(f"a decider is a Limiter or Engine (or asyncio twin), not {decider!r}")
        if _is_async(decider) is not self._async:
            raise TypeError(self._other_twin.format(decider))
        if isinstance(limits, RateLimit) or not isinstance(limits, Iterable):
            raise TypeError(f"limits is a list of RateLimit objects, not {limits!r}")
        self.limits = tuple(limits)
        for limit in self.limits:
            if not isinstance(limit, RateLimit):
                raise TypeError(f"limits holds RateLimit objects, not {limit!r}")
        self.descriptors = tuple(keys.as_key(key) for key in descriptors)
        if self.descriptors and domain is None:
            raise ValueError("descriptors are decided by a rule file's domain: pass domain=")
        if domain is not None and (not isinstance(domain, str) or not domain):
            raise ValueError(f"a domain is a non-empty string, not {domain!r}")
        if domain is not None and not callable(getattr(decider, "check", None)):
            raise TypeError(f"descriptors need an Engine or AsyncEngine to decide, not {decider!r}")
        if scope is not None and (not isinstance(scope, str) or not scope):
            raise ValueError(f"a scope is a non-empty string or None, not {scope!r}")
        if isinstance(max_delay, bool) or not isinstance(max_delay, int | float):
            raise TypeError(f"max_delay is seconds, not {max_delay!r}")
        if not 0 <= max_delay < math.inf:
            raise ValueError(f"max_delay is seconds >= 0, not {max_delay!r}")
        self.decider = decider
        self.scope = scope
        self.domain = domain
        self.cost = cost if callable(cost) else check_cost(cost)
        if domain is None and cost != 1:
            raise ValueError("cost is the descriptors' cost: give each RateLimit its own cost=")
        if all_or_nothing is not None and not isinstance(all_or_nothing, bool):
            raise TypeError(f"all_or_nothing is True, False or None, not {all_or_nothing!r}")
        self.all_or_nothing = all_or_nothing is not False  # for the limits
        self.all_or_nothing_rules = all_or_nothing is True  # for the descriptors
        self.max_delay = float(max_delay)
        self._many = _batches(decider)
        self._body_limits = tuple(limit for limit in self.limits if limit.needs_body)
        self._body_keys = any(key.needs_body for key in self.descriptors)
        self._judged = any(limit.judge is not None for limit in self.limits)
        refunds = AsyncRefundDecider if self._async else RefundDecider
        if self._judged and not isinstance(decider, refunds):
            raise TypeError(
                f"a limit charged by outcome needs a decider that gives back (a Limiter or "
                f"AsyncLimiter), not {decider!r}"
            )
        # How the decider reads a limit given as a rate string (a Limiter's algorithm).
        self._algorithm = getattr(decider, "algorithm", Algorithm.FIXED_WINDOW)

    def needs_body(self, request: Request) -> bool:
        """Whether deciding ``request`` reads its body: an adapter then reads it first."""
        if self._body_keys or not self._body_limits:
            return self._body_keys
        return any(limit.applies(request) for limit in self._body_limits)

    def _plan(self, request: Request) -> _Plan:
        hits: list[RequestHit] = []
        shadow: list[RequestHit] = []
        judges: list[Judge | None] | None = [] if self._judged else None
        scope = self.scope or f"{request.method} {request.route or request.path}"
        for limit in self.limits:
            if not limit.applies(request):
                continue
            counter = limit.counter(request, scope)
            if counter is None:
                continue
            cost = limit.cost_of(request)
            into = shadow if limit.shadow else hits
            for one in limit.limits:
                into.append((counter, one, cost))
                if judges is not None and not limit.shadow:
                    judges.append(limit.judge)
        if judges is not None and not any(judges):
            judges = None  # no limit charged by outcome applies: decided as any other
        if not self.descriptors:
            return _Plan(hits, shadow, [], 0, judges)
        found = (key.entries(request) for key in self.descriptors)
        descriptors = [entries for entries in found if entries]
        cost = check_cost(self.cost(request)) if callable(self.cost) else self.cost
        return _Plan(hits, shadow, descriptors, cost, judges)

    def _outcome(
        self,
        request: Request,
        plan: _Plan,
        decisions: Sequence[Decision],
        shadowed: Sequence[Decision],
        verdict: Verdict | None,
    ) -> GateDecision:
        if verdict is None and not plan.shadow:
            return self._decided(tuple(decisions))
        statuses: list[Decision | Status] = list(decisions)
        allowed = all(decision.allowed for decision in decisions)
        for (counter, limit, _), decision in zip(plan.shadow, shadowed, strict=True):
            if not decision.allowed:
                log.info("shadow mode: %s would refuse %r (%s)", limit, counter, request)
        if verdict is not None:
            allowed = allowed and verdict.allowed
            for status in verdict.statuses:
                if status.shadowed:
                    log.info("shadow mode: rule %s would refuse %s", status.limit, request)
                else:
                    statuses.append(status)
        found = [s if isinstance(s, Decision) else s.decision for s in statuses]
        decided = [decision for decision in found if decision is not None]
        degraded = any(d.degraded for d in decided) or any(d.degraded for d in shadowed)
        if not allowed:
            waits = [d.retry_after for d in decided if not d.allowed]
            waits += [
                math.inf
                for s in statuses
                if not isinstance(s, Decision) and s.decision is None and not s.allowed
            ]
            return GateDecision(False, tuple(statuses), max(waits, default=0.0), 0.0, degraded)
        delay = max((d.delay for d in decided), default=0.0)
        if delay > self.max_delay:
            return GateDecision(False, tuple(statuses), delay, 0.0, degraded)
        return GateDecision(True, tuple(statuses), 0.0, delay, degraded)

    def _decided(self, decisions: tuple[Decision, ...]) -> GateDecision:
        """``_outcome`` of decisions alone (no shadow limit, no rule): the common case, in one
        pass."""
        allowed, degraded, wait, delay = True, False, 0.0, 0.0
        for decision in decisions:
            if decision.degraded:
                degraded = True
            if not decision.allowed:
                allowed = False
                if decision.retry_after > wait:
                    wait = decision.retry_after
            elif decision.delay > delay:
                delay = decision.delay
        if not allowed:
            return GateDecision(False, decisions, wait, 0.0, degraded)
        if delay > self.max_delay:
            return GateDecision(False, decisions, delay, 0.0, degraded)
        return GateDecision(True, decisions, 0.0, delay, degraded)
