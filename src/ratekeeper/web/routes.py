"""The per-route limiters' gate for each group of limits (``RouteLimiter``, for
``ratekeeper.web.fastapi``, ``.flask`` and ``.django``), and what a request's layers of limits
decided (``Layers``).

A request can pass several layers of limits: the whole app's, then its router's (a FastAPI
``APIRouter``, a Flask ``Blueprint``, a Django URL namespace), then its route's own. Each
layer is decided on its own, outermost first, so a request an inner layer refuses has
already been counted by the outer ones. A refused request is told of the limit that refused
it; an admitted one's headers show, of every limit it passed, the one closest to refusing,
as the request's result left it when a layer is charged by outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, cast

from ratekeeper.web.gate import AsyncGate, Gate
from ratekeeper.web.limits import RateLimit
from ratekeeper.web.options import Adapter, AnyDecider, AnyGate
from ratekeeper.web.outcomes import GateDecision, HandlerResult
from ratekeeper.web.replies import Reply
from ratekeeper.web.request import MAX_BODY, Request
from ratekeeper.wire.headers import DEGRADED


class RouteLimiter(Adapter, Generic[AnyDecider, AnyGate]):
    """Per-route limits deciding with ``decider``; ``max_body``, ``headers``, ``ietf``,
    ``degraded_header`` and ``on_refused`` are ``Adapter``'s, the other options (``cost``,
    ``all_or_nothing``, ``max_delay``, ``sleep``) go to each route's gate, the subclass's
    ``_gate``. A bad option, or a decider of the wrong twin, raises here."""

    _gate: type[AnyGate]

    def __init__(
        self,
        decider: AnyDecider,
        *,
        max_body: int = MAX_BODY,
        headers: bool = True,
        ietf: bool = False,
        degraded_header: str | None = DEGRADED,
        on_refused: Callable[[Request, Any], Reply] | None = None,
        **options: Any,
    ) -> None:
        if "scope" in options:
            raise TypeError("a scope is given to limit(), for the routes that share it")
        self._gate(decider, **options)  # checks the options now
        super().__init__(
            max_body=max_body,
            headers=headers,
            ietf=ietf,
            degraded_header=degraded_header,
            on_refused=on_refused,
        )
        self.decider = decider
        self.options = options

    def gate(self, limits: tuple[RateLimit, ...], scope: str | None) -> AnyGate:
        """The gate of one ``limit(...)``: ``limits`` in ``scope``, else each route's own."""
        if not limits:
            raise ValueError("limit() needs at least one RateLimit")
        return self._gate(self.decider, limits, scope=scope, **self.options)


def joined(outcomes: list[GateDecision]) -> GateDecision:
    """The admitted ``outcomes`` of one request's layers as one: every status (the headers
    then show the limit closest to refusing), the delays waited in all, degraded if any was."""
    if len(outcomes) == 1:
        return outcomes[0]
    statuses = tuple(status for outcome in outcomes for status in outcome.statuses)
    delay = sum(outcome.delay for outcome in outcomes)
    return GateDecision(True, statuses, 0.0, delay, any(outcome.degraded for outcome in outcomes))


class Layers:
    """What the layers of limits of one request decided so far (see the module's doc): the
    outcomes that admitted it, whether one refused it, and the gates of the admitted outcomes
    that hold units of limits charged by outcome, with their places (``held``), until the
    response's ``HandlerResult`` settles them. An adapter keeps one per request, on the request."""

    __slots__ = ("held", "outcomes", "refused")

    def __init__(self) -> None:
        self.outcomes: list[GateDecision] = []
        self.refused = False
        self.held: list[tuple[Gate | AsyncGate, int]] = []

    def add(self, outcome: GateDecision, gate: Gate | AsyncGate | None = None) -> GateDecision:
        """Record one layer's ``outcome`` (of ``gate``, whose pending units it holds until
        ``settle``); what the response tells: a refusal as it is, an admission joined with the
        layers the request passed before."""
        if not outcome.allowed:
            self.refused = True
            return outcome
        if outcome.pending and gate is not None:
            self.held.append((gate, len(self.outcomes)))
        self.outcomes.append(outcome)
        return joined(self.outcomes)

    def settle(self, result: HandlerResult) -> GateDecision | None:
        """Settle every layer's pending units with the request's ``result`` (the response's
        status, or the exception raised), once: a layer a later one refused is settled with
        the refusal's status. What the response then tells (``told``)."""
        held, self.held = self.held, []
        for gate, at in held:
            self.outcomes[at] = cast(Gate, gate).settle(self.outcomes[at], result)
        return self.told()

    async def settle_async(self, result: HandlerResult) -> GateDecision | None:
        """``settle``, for layers decided by ``AsyncGate``s."""
        held, self.held = self.held, []
        for gate, at in held:
            self.outcomes[at] = await cast(AsyncGate, gate).settle(self.outcomes[at], result)
        return self.told()

    def told(self) -> GateDecision | None:
        """What an admitted request's response tells of all its layers; None when a layer
        refused it or none decided it."""
        if self.refused or not self.outcomes:
            return None
        return joined(self.outcomes)
