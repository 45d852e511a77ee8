"""The decision log (``--log-level debug``): one line per descriptor decided, any surface.

Each descriptor of a decision (the one key of a key check) is one DEBUG record of the
``ratekeeper.decisions`` logger, in the request's order, whichever surface asked (HTTP, Envoy's
``POST /json``, nginx, gRPC) and in whichever worker decided. Its message is the result in
words (``allowed``, ``limited``, ``degraded: limited by the failure policy``, ...); its fields:

``domain``
    the decision's domain (a key check's: the engine's own);
``descriptor``
    the descriptor's place in the request, from 0;
``rule``
    the rule that decided: its name, else its path; with no rule, ``override``, ``default``,
    ``given`` or ``none``, as the metrics and the access log name them;
``limit``
    the limit applied (``100/minute (fixed_window)``), or ``none``;
``result``
    ``degraded`` when the store failed and its failure policy decided, else ``limited``,
    ``shadowed`` (over its limit, let through by shadow mode) or ``allowed``;
``remaining``
    the hits still allowed after it; not there when no limit applied;
``key``
    only with ``--log-keys``: what the descriptor or key is counted under (``api/user:alice``),
    the clients' own data (user names, addresses), logged only when asked for.

Below debug it costs nothing: the service makes a ``DecisionLog`` only when the logger is
enabled for debug as it starts, so that otherwise no decision passes through one. Made, it is
the engine's observer in front of the one it had (the metrics).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ratekeeper.service.observe.labels import rule_label

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine, Status
    from ratekeeper.engine.verdict import Observer

log = logging.getLogger("ratekeeper.decisions")


def wanted() -> bool:
    """Whether the decision log is on: its logger is enabled for debug."""
    return log.isEnabledFor(logging.DEBUG)


class DecisionLog:
    """The decision log of ``engine`` (see the module), with each descriptor's key when
    ``keys``: made, it becomes ``engine``'s observer, passing every decision on to the
    observer it had."""

    def __init__(self, engine: AsyncEngine, *, keys: bool = False) -> None:
        self.keys = keys
        self._next: Observer | None = engine.observer
        self._default = engine.planner.default
        engine.observer = self._observe

    def _observe(self, domain: str, statuses: tuple[Status, ...]) -> None:
        observer = self._next
        if observer is not None:
            observer(domain, statuses)
        for place, status in enumerate(statuses):
            message, fields = self.line(domain, place, status)
            log.debug(message, extra=fields)

    def line(self, domain: str, place: int, status: Status) -> tuple[str, dict[str, Any]]:
        """The message and the fields of the line of ``status``, the ``place``-th descriptor
        of a decision of ``domain``."""
        decision = status.decision
        if decision is not None and decision.degraded:
            said = "allowed" if status.allowed else "limited"
            result, message = "degraded", f"degraded: {said} by the failure policy"
        elif not status.allowed:
            result = message = "limited"
        elif status.shadowed:
            result, message = "shadowed", "shadowed: over its limit, let through"
        else:
            result = message = "allowed"
        fields: dict[str, Any] = {
            "domain": domain,
            "descriptor": place,
            "rule": rule_label(status, self._default),
            "limit": "none" if status.limit is None else str(status.limit),
            "result": result,
        }
        if decision is not None:
            fields["remaining"] = decision.remaining
        if self.keys:
            fields["key"] = status.identity
        return message, fields
