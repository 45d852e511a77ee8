"""How the service names what decided: the ``rule`` of the metrics, the access log and the
dashboard."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratekeeper.engine import Status


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
