"""What the decision engine takes and returns; every surface translates to and from these.

A ``Descriptor``'s entries are ``Entry`` pairs, ``(key, value)``, as the rules match them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ratekeeper.core.decisions import Decision, allow
from ratekeeper.rules.model import Entry

if TYPE_CHECKING:
    from ratekeeper.core.limits import Limit
    from ratekeeper.rules import Rule

#: ``remaining`` where no limit applies: Envoy's ``limit_remaining`` for an unlimited rule.
UNLIMITED = 4_294_967_295


class Descriptor(NamedTuple):
    """One descriptor of a ``check``: its entries, and optionally a limit and cost of its own.

    ``limit`` is a limit sent with the request (Envoy's ``RateLimitOverride``): it bypasses rules
    and overrides for this descriptor. ``hits`` replaces the request's cost for this descriptor
    (0 looks without counting). A plain sequence of entries is accepted wherever a
    ``Descriptor`` is.
    """

    entries: tuple[Entry, ...]
    limit: Limit | None = None
    hits: int | None = None


class Status(NamedTuple):
    """The outcome for one descriptor, in the order of the request.

    ``decision`` is ``None`` when nothing was counted: no rule matched, the rule whitelists, or it
    is ``unlimited``; a rule of ``requests_per_unit: 0`` counts nothing either but refuses, with
    a decision of limit 0. ``limit`` is the limit applied and ``rule`` the rule that matched, if
    any; ``overridden`` says the limit came from the configuration store. ``shadowed`` says the
    limit refused but the rule's ``shadow_mode``, or the engine's ``shadow``, let the hit
    through. ``identity`` is what the descriptor, or key, is counted under (a ``Plan``'s);
    empty when the status was not made by the engine.
    """

    allowed: bool
    decision: Decision | None
    limit: Limit | None
    rule: Rule | None
    overridden: bool
    shadowed: bool
    identity: str = ""

    @property
    def remaining(self) -> int:
        """Hits still allowed now; ``UNLIMITED`` when no limit applies."""
        return UNLIMITED if self.decision is None else self.decision.remaining


class Verdict(NamedTuple):
    """The overall answer of a ``check``: allowed unless some descriptor is over its limit.

    Descriptors whose rule is in ``quota_mode`` refuse only when all of them are over.
    """

    allowed: bool
    statuses: tuple[Status, ...]

    @property
    def degraded(self) -> bool:
        """True when a store failure made any of the decisions a fallback."""
        return any(
            status.decision is not None and status.decision.degraded for status in self.statuses
        )


#: Told of every decision an engine makes: ``observer(domain, statuses)``, the statuses in the
#: request's order (one for ``decide`` and ``hit``, whose domain is the engine's own). Metrics
#: hang here; an observer must be quick and must not raise.
Observer = Callable[[str, tuple[Status, ...]], None]

#: Told of every ``check`` that counted, beside the observer: ``tally(domain, requests,
#: statuses)``, each request ``(entries, limit sent with it or None, cost)`` and its status, in
#: the request's order, the descriptors of cost 0 left out. What needs a descriptor's entries
#: (envoyproxy/ratelimit's per-descriptor statistics) hangs here; set, it wraps ``check``, so
#: that off (None) it costs a check nothing. A tally must be quick and must not raise.
Tally = Callable[
    [str, Sequence[tuple[tuple[Entry, ...], "Limit | None", int]], tuple[Status, ...]], None
]


def unlimited(cost: int) -> Decision:
    """The decision of a key no limit applies to."""
    return allow(0, UNLIMITED, 0.0, cost)
