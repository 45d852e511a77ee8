"""How the service names what decided: the ``rule`` of the metrics, the access log, the traces
and the dashboard, and the domain, rule and result of a request's decisions (``decided``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratekeeper.engine import Status

#: The decisions of one request: ``(domain, statuses)`` each, as the engine's observer saw them.
Noted = list[tuple[str, "tuple[Status, ...]"]]


def rule_label(status: Status, default: object) -> str:
    """The rule that decided ``status``: its name, else its path; with no rule, ``override``
    (a limit from the configuration store), ``default`` (the engine's ``default`` limit),
    ``given`` (a limit the caller gave) or ``none`` (no limit applied)."""
    rule = status.rule
    if rule is not None:
        return rule.name or rule.path
    if status.overridden:
        return "override"
    if status.limit is None:
        return "none"
    return "default" if status.limit is default else "given"


def decided(noted: Noted, default: object) -> dict[str, str]:
    """The ``domain``, ``rule`` and ``result`` of a request's decisions (``noted``; empty for
    none). The deciding descriptor is the first that refused, else the first shadow-mode rule
    that would have, else the one with the fewest hits remaining; the result is ``degraded``
    when the store failed and its failure policy decided, else ``limited``, ``shadowed`` or
    ``allowed``. ``default`` is the engine's default limit (``rule_label``)."""
    degraded = False
    deciding: tuple[int, int, str, Status] | None = None
    for domain, statuses in noted:
        for status in statuses:
            decision = status.decision
            if decision is not None and decision.degraded:
                degraded = True
            if not status.allowed:
                rank = (0, 0)
            elif status.shadowed:
                rank = (1, 0)
            elif decision is not None:
                rank = (2, decision.remaining)
            else:
                rank = (3, 0)
            if deciding is None or rank < deciding[:2]:
                deciding = (*rank, domain, status)
    if deciding is None:
        return {}
    _, _, domain, status = deciding
    if degraded:
        result = "degraded"
    elif not status.allowed:
        result = "limited"
    elif status.shadowed:
        result = "shadowed"
    else:
        result = "allowed"
    return {"domain": domain, "rule": rule_label(status, default), "result": result}
