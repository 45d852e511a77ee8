"""The decision of one web request, free of any framework: ``Gate`` and ``AsyncGate``.

A gate holds what decides (a ``Decider``: ``Limiter``, ``Engine``, ``RemoteLimiter``, or
their asyncio twins for ``AsyncGate``) and what to decide: ``RateLimit``s, each counted on
its key, and Envoy-style ``descriptors`` (``Key``s) that ``Engine.check`` decides for
``domain`` by the rules (overrides included). ``decide(request)`` returns an ``Outcome``; every
adapter (ASGI, WSGI, FastAPI, Flask, Django) only translates the request in and the outcome
out (``ratekeeper.web.replies``).

- A limit without a ``scope`` of its own counts in the gate's ``scope`` (``"app"`` by
  default); with None, each route counts apart (its method and template), as the per-route
  adapters do.
- Several limits of one request are decided in one ``hit_many`` when the decider has one (a
  ``Limiter`` or ``AsyncLimiter``), all or nothing: a refused request consumes none of them.
  Other deciders (an ``Engine``, a remote client) decide them one by one. The descriptors go to
  one ``check`` with Envoy's semantics, as a gateway's would: every limit counts, even when
  another refuses. ``all_or_nothing`` True or False sets both ways alike.
- A ``shadow`` limit is counted on its own and never refuses; a would-be refusal is logged at
  INFO on the ``ratekeeper.web`` logger, as is a rule's ``shadow_mode`` one.
- An admitted hit on a leaky-bucket shaper carries a ``delay``: the gate waits it out (up to
  ``max_delay`` seconds) before the request proceeds; a longer one is refused, its place in
  the queue still taken.
- When the store fails, the decider's ``on_store_error`` policy answers and the outcome is
  ``degraded``; a decider without a policy raises ``StoreError``, which becomes an outcome
  with ``unavailable`` set (answered 503).
- A limit charged by outcome (``charge_when``, ``charge_statuses``) needs a decider that gives
  back (``RefundDecider``: a ``Limiter``): the request's hits are counted by ``admit``, and
  an admitted request's ``Outcome`` holds them as ``pending``; the adapter hands the
  handler's ``Result`` to ``settle``, which gives back (``refund``) the hits whose limit does
  not charge it, and returns the outcome as it then stands: what the response's headers tell.
  A decision whose units were given back shows the remaining as if they had never been
  counted. A refused request never ran: its limits' units are given back at once. A give-back
  that fails is logged, never raised, and its units are told as counted.

The twins are line-aligned: only I/O differs.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar, cast

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import StoreError
from ratekeeper.core.inputs import check_cost
from ratekeeper.core.limits import Limit
from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.core.registry import Algorithm
from ratekeeper.decider import (
    AsyncDecider,
    AsyncDescriptorDecider,
    AsyncManyDecider,
    AsyncRefundDecider,
    Decider,
    DescriptorDecider,
    ManyDecider,
    RefundDecider,
)
from ratekeeper.engine.verdict import Status, Verdict
from ratekeeper.rules.model import Entry
from ratekeeper.web import keys
from ratekeeper.web.keys import Key, KeyFunction
from ratekeeper.web.limits import CostLike, RateLimit
from ratekeeper.web.outcomes import Judge, Outcome, Pending, Result, charged, given_back
from ratekeeper.web.request import Request

log = logging.getLogger("ratekeeper.web")
#: A store that fails with no failure policy fails every request: logged once a minute.
_failures = LogThrottle(log)
UNANSWERED = "the request store failed and has no failure policy: %s"

S = TypeVar("S")

#: One hit of a request: the counter's key, one limit, and the cost.
RequestHit = tuple[str, Limit | str, int]
#: What a failed give-back logs, once a minute.
UNREFUNDED = "could not give back a request's units on %r (they stay counted): %s"


#: What decides nothing: a request no limit applies to.
NOTHING = Outcome(True)


class _Plan(NamedTuple):
    """What deciding a request takes: its hits, its shadow hits, and its descriptors, each
    costing ``cost`` (0 when there are none); ``judges``, for each hit, the test of the
    results its limit charges (None for every hit when no limit is charged by outcome)."""

    hits: list[RequestHit]
    shadow: list[RequestHit]
    descriptors: list[tuple[Entry, ...]]
    cost: int
    judges: list[Judge | None] | None = None


def _pending(plan: _Plan, admitted: Sequence[tuple[Decision, float]]) -> tuple[Pending, ...]:
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


def _sleeper(sleep: S) -> S:
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
    ) -> Outcome:
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
            return Outcome(False, tuple(statuses), max(waits, default=0.0), 0.0, degraded)
        delay = max((d.delay for d in decided), default=0.0)
        if delay > self.max_delay:
            return Outcome(False, tuple(statuses), delay, 0.0, degraded)
        return Outcome(True, tuple(statuses), 0.0, delay, degraded)

    def _decided(self, decisions: tuple[Decision, ...]) -> Outcome:
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
            return Outcome(False, decisions, wait, 0.0, degraded)
        if delay > self.max_delay:
            return Outcome(False, decisions, delay, 0.0, degraded)
        return Outcome(True, decisions, 0.0, delay, degraded)


class Gate(BaseGate):
    """Decide web requests with a ``Decider`` (see the module's doc). ``sleep`` is how a
    shaper's delay is waited out (tests pass a fake clock's ``sleep``). Options are checked
    here: a bad one raises ``TypeError`` or ``ValueError``, an async decider ``TypeError``.
    Example::

        gate = Gate(Limiter(), [RateLimit("10/second")])
        gate.decide(request).allowed
    """

    decider: Decider

    def __init__(
        self,
        decider: Decider,
        *args: Any,
        sleep: Callable[[float], None] = time.sleep,
        **options: Any,
    ) -> None:
        super().__init__(decider, *args, **options)
        self._sleep = _sleeper(sleep)

    def decide(self, request: Request) -> Outcome:
        """The decision on ``request``; a shaper's delay is waited out before it returns."""
        plan = self._plan(request)
        if not (plan.hits or plan.shadow or plan.descriptors):
            return NOTHING
        decider = self.decider
        admitted: list[Any] = []
        try:
            if plan.judges is not None:  # then the decider gives back (checked when built)
                admitted = cast(RefundDecider, decider).admit(
                    plan.hits, all_or_nothing=self.all_or_nothing
                )
                decisions = [decision for decision, _ in admitted]
            elif self._many and len(plan.hits) > 1:  # then the decider has hit_many
                batch = cast(ManyDecider, decider)
                decisions = batch.hit_many(plan.hits, all_or_nothing=self.all_or_nothing)
            else:
                decisions = [decider.hit(*hit) for hit in plan.hits]
            shadowed = [decider.hit(*hit) for hit in plan.shadow]
            verdict = None
            if plan.descriptors:  # then a domain was given, and the decider has check
                rules = cast(DescriptorDecider, decider)
                verdict = rules.check(
                    cast(str, self.domain),
                    plan.descriptors,
                    plan.cost,
                    all_or_nothing=self.all_or_nothing_rules,
                )
        except StoreError as error:
            _failures.log(logging.WARNING, UNANSWERED, error)
            return Outcome(False, unavailable=str(error))
        outcome = self._outcome(request, plan, decisions, shadowed, verdict)
        if admitted:
            pending = _pending(plan, admitted)
            if not outcome.allowed:  # the handler never runs: nothing to charge
                self._give_back(pending)
            elif pending:
                outcome = outcome._replace(pending=pending)
        if outcome.delay > 0.0:
            self._sleep(outcome.delay)
        return outcome

    def settle(self, outcome: Outcome, result: Result) -> Outcome:
        """Give back the units ``outcome`` holds (``pending``) whose limit does not charge
        ``result``, what the admitted request came to; the outcome as it then stands, which
        the response's headers tell (see the module's doc). Never raises for the store."""
        back = [one for one in outcome.pending if not charged(one.judge, result)]
        return given_back(outcome, self._give_back(back), self._algorithm)

    def _give_back(self, pending: Sequence[Pending]) -> list[Pending]:
        """Give back ``pending``; those the store took back."""
        refund, given = cast(RefundDecider, self.decider).refund, []
        for one in pending:
            try:
                refund(one.key, one.limit, one.granted, one.at)
            except StoreError as error:
                _failures.log(logging.WARNING, UNREFUNDED, one.key, error)
            else:
                given.append(one)
        return given


class AsyncGate(BaseGate):
    """The asyncio twin of ``Gate``: ``await gate.decide(request)``, with an ``AsyncDecider``."""

    _async = True
    _other_twin = "{!r} blocks; an AsyncGate needs an AsyncLimiter or AsyncEngine"

    decider: AsyncDecider

    def __init__(
        self,
        decider: AsyncDecider,
        *args: Any,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        **options: Any,
    ) -> None:
        super().__init__(decider, *args, **options)
        self._sleep = _sleeper(sleep)

    async def decide(self, request: Request) -> Outcome:
        """The decision on ``request``; a shaper's delay is waited out before it returns."""
        plan = self._plan(request)
        if not (plan.hits or plan.shadow or plan.descriptors):
            return NOTHING
        decider = self.decider
        admitted: list[Any] = []
        try:
            if plan.judges is not None:  # then the decider gives back (checked when built)
                admitted = await cast(AsyncRefundDecider, decider).admit(
                    plan.hits, all_or_nothing=self.all_or_nothing
                )
                decisions = [decision for decision, _ in admitted]
            elif self._many and len(plan.hits) > 1:  # then the decider has hit_many
                batch = cast(AsyncManyDecider, decider)
                decisions = await batch.hit_many(plan.hits, all_or_nothing=self.all_or_nothing)
            else:
                decisions = [await decider.hit(*hit) for hit in plan.hits]
            shadowed = [await decider.hit(*hit) for hit in plan.shadow]
            verdict = None
            if plan.descriptors:  # then a domain was given, and the decider has check
                rules = cast(AsyncDescriptorDecider, decider)
                verdict = await rules.check(
                    cast(str, self.domain),
                    plan.descriptors,
                    plan.cost,
                    all_or_nothing=self.all_or_nothing_rules,
                )
        except StoreError as error:
            _failures.log(logging.WARNING, UNANSWERED, error)
            return Outcome(False, unavailable=str(error))
        outcome = self._outcome(request, plan, decisions, shadowed, verdict)
        if admitted:
            pending = _pending(plan, admitted)
            if not outcome.allowed:  # the handler never runs: nothing to charge
                await self._give_back(pending)
            elif pending:
                outcome = outcome._replace(pending=pending)
        if outcome.delay > 0.0:
            await self._sleep(outcome.delay)
        return outcome

    async def settle(self, outcome: Outcome, result: Result) -> Outcome:
        """See ``Gate.settle``."""
        back = [one for one in outcome.pending if not charged(one.judge, result)]
        return given_back(outcome, await self._give_back(back), self._algorithm)

    async def _give_back(self, pending: Sequence[Pending]) -> list[Pending]:
        """Give back ``pending``; those the store took back."""
        refund, given = cast(AsyncRefundDecider, self.decider).refund, []
        for one in pending:
            try:
                await refund(one.key, one.limit, one.granted, one.at)
            except StoreError as error:
                _failures.log(logging.WARNING, UNREFUNDED, one.key, error)
            else:
                given.append(one)
        return given
