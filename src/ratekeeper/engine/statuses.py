"""A check's outcome: each descriptor's ``Status`` from its plan and the store's decision,
and the ``Verdict`` Envoy's semantics make of them (``quota_mode``, ``shadow_mode``, the
engine's ``shadow`` and ``quota_mode``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from math import inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import deny
from ratekeeper.engine.plans import Plan
from ratekeeper.engine.verdict import Status, Verdict

if TYPE_CHECKING:
    from ratekeeper.core.decisions import Decision

log = logging.getLogger("ratekeeper.engine")

_new = tuple.__new__

#: The decision of a rule that is always over the limit: a limit of 0, which no hit fits.
ALWAYS_OVER = deny(0, 0, 0.0, inf)


def status(plan: Plan, decision: Decision | None) -> Status:
    """The status of one descriptor decided by ``plan``; ``decision`` is None if not counted."""
    if decision is None:
        if plan.refused:
            return _refused(plan)
        return _new(Status, (True, None, None, plan.rule, plan.overridden, False, plan.identity))
    if decision.allowed:
        return _new(
            Status, (True, decision, plan.limit, plan.rule, plan.overridden, False, plan.identity)
        )
    shadowed = plan.rule is not None and plan.rule.shadow_mode
    return _new(
        Status,
        (shadowed, decision, plan.limit, plan.rule, plan.overridden, shadowed, plan.identity),
    )


def single(plan: Plan, decision: Decision | None) -> Verdict:
    """The verdict of a check of one descriptor (``check``'s hot path: one call, two tuples)."""
    if decision is None:
        if plan.refused:
            one = _refused(plan)
        else:
            one = _new(Status, (True, None, None, plan.rule, plan.overridden, False, plan.identity))
    elif decision[0]:
        one = _new(
            Status, (True, decision, plan.limit, plan.rule, plan.overridden, False, plan.identity)
        )
    else:
        one = status(plan, decision)
    return _new(Verdict, (one[0], (one,)))


def verdict(
    plans: list[Plan], decisions: Sequence[Decision], *, quota_mode: bool = False
) -> Verdict:
    """Join the plans of a ``check`` with the decisions of the counted ones; with
    ``quota_mode`` (the engine's), every descriptor is in quota mode (``in_quota_mode``)."""
    counted = iter(decisions)
    statuses = tuple(status(plan, None if plan.limit is None else next(counted)) for plan in plans)
    result = _new(Verdict, (_allowed(statuses), statuses))
    return in_quota_mode(result) if quota_mode and not result[0] else result


def shadowed(domain: str, result: Verdict) -> Verdict:
    """``result`` with every refusal let through and marked ``shadowed``, each logged at DEBUG:
    the engine's ``shadow`` mode, as if every limit were a rule's in ``shadow_mode``."""
    statuses = result.statuses
    for one in statuses:
        if not one.allowed:
            break
    else:
        return result
    let_through = []
    for one in statuses:
        if one.allowed:
            let_through.append(one)
            continue
        if log.isEnabledFor(logging.DEBUG):
            rule = one.rule
            what = "no rule" if rule is None else f"rule {rule.name or rule.path}"
            log.debug("shadow mode: domain %s, %s: over its limit, let through", domain, what)
        let_through.append(_new(Status, (True, *one[1:5], True, one[6])))
    return _new(Verdict, (True, tuple(let_through)))


def in_quota_mode(result: Verdict) -> Verdict:
    """``result`` as the engine's ``quota_mode`` decides it: refused only when every
    descriptor but the ``unlimited`` ones is over its limit (one no limit applies to never
    is); each descriptor's status stays as it is."""
    for one in result.statuses:
        if one.allowed and (one.rule is None or not one.rule.unlimited):
            return _new(Verdict, (True, result.statuses))
    return result


def _refused(plan: Plan) -> Status:
    """The status of a plan that refuses every hit: let through only in shadow mode."""
    shadowed = plan.rule is not None and plan.rule.shadow_mode
    return _new(
        Status, (shadowed, ALWAYS_OVER, None, plan.rule, plan.overridden, shadowed, plan.identity)
    )


def _allowed(statuses: tuple[Status, ...]) -> bool:
    """Envoy's overall answer: refused when a descriptor is over its limit, except that
    descriptors whose rule is in ``quota_mode`` refuse only when every one of them is."""
    quota = over = 0
    for one in statuses:
        if one.rule is not None and one.rule.quota_mode and one.decision is not None:
            quota += 1
            over += not one.allowed
        elif not one.allowed:
            return False
    return over < quota or quota == 0
