"""The decision of one web request, free of any framework: ``Gate`` and ``AsyncGate``.

A gate holds what decides (a ``Decider``: ``Limiter``, ``Engine``, ``RemoteLimiter``, or
their asyncio twins for ``AsyncGate``) and what to decide: ``RateLimit``s, each counted on
its key, and Envoy-style ``descriptors`` (``Key``s) that ``Engine.check`` decides for
``domain`` by the rules (overrides included). ``decide(request)`` returns a ``GateDecision``;
every adapter (ASGI, WSGI, FastAPI, Flask, Django) only translates the request in and the
gate's decision out (``ratekeeper.web.replies``).

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
- When the store fails, the decider's ``on_store_error`` policy answers and the gate's
  decision is ``degraded``; a decider without a policy raises ``StoreError``, which becomes a
  decision with ``unavailable`` set (answered 503).
- A limit charged by outcome (``charge_when``, ``charge_statuses``) needs a decider that gives
  back (``RefundDecider``: a ``Limiter``): the request's hits are counted by ``admit``, and
  an admitted request's ``GateDecision`` holds them as ``pending``; the adapter hands the
  ``HandlerResult`` to ``settle``, which gives back (``refund``) the hits whose limit does not
  charge it, and returns the gate's decision as it then stands: what the response's headers
  tell.
  A decision whose units were given back shows the remaining as if they had never been
  counted. A refused request never ran: its limits' units are given back at once. A give-back
  that fails is logged, never raised, and its units are told as counted.

The twins are line-aligned: only I/O differs. What they share free of I/O (the options, the
plan of a request, what its decisions come to) is ``BaseGate``, in ``ratekeeper.web.plans``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from ratekeeper.core.errors import StoreError
from ratekeeper.core.log_throttle import LogThrottle
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
from ratekeeper.web.outcomes import GateDecision, HandlerResult, Pending, charged, given_back
from ratekeeper.web.plans import NOTHING, BaseGate, held, log, sleeper
from ratekeeper.web.request import Request

__all__ = ["AsyncGate", "BaseGate", "Gate"]

#: A store that fails with no failure policy fails every request: logged once a minute.
_failures = LogThrottle(log)
UNANSWERED = "the request store failed and has no failure policy: %s"
#: What a failed give-back logs, once a minute.
UNREFUNDED = "could not give back a request's units on %r (they stay counted): %s"


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
        self._sleep = sleeper(sleep)

    def decide(self, request: Request) -> GateDecision:
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
            return GateDecision(False, unavailable=str(error))
        outcome = self._outcome(request, plan, decisions, shadowed, verdict)
        if admitted:
            pending = held(plan, admitted)
            if not outcome.allowed:  # the handler never runs: nothing to charge
                self._give_back(pending)
            elif pending:
                outcome = outcome._replace(pending=pending)
        if outcome.delay > 0.0:
            self._sleep(outcome.delay)
        return outcome

    def settle(self, outcome: GateDecision, result: HandlerResult) -> GateDecision:
        """Give back the units ``outcome`` (the ``GateDecision`` that admitted the request)
        holds (``pending``) whose limit does not charge ``result``, what the request came to;
        the decision as it then stands, which the response's headers tell (see the module's
        doc). Never raises for the store."""
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
        self._sleep = sleeper(sleep)

    async def decide(self, request: Request) -> GateDecision:
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
            return GateDecision(False, unavailable=str(error))
        outcome = self._outcome(request, plan, decisions, shadowed, verdict)
        if admitted:
            pending = held(plan, admitted)
            if not outcome.allowed:  # the handler never runs: nothing to charge
                await self._give_back(pending)
            elif pending:
                outcome = outcome._replace(pending=pending)
        if outcome.delay > 0.0:
            await self._sleep(outcome.delay)
        return outcome

    async def settle(self, outcome: GateDecision, result: HandlerResult) -> GateDecision:
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
