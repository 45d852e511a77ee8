"""A descriptor's outcome as Envoy's rate-limit protocol reports it: ``OK`` or ``OVER_LIMIT``,
the limit that applied and what remains. The decision service answers in these, and the
rate-limit headers (``ratekeeper.wire.headers``) are written from them.
"""

from __future__ import annotations

from dataclasses import dataclass

OK = "OK"
OVER_LIMIT = "OVER_LIMIT"


@dataclass(frozen=True, slots=True)
class Limited:
    """A status's ``current_limit``: ``requests_per_unit`` per ``unit``, and the rule's name."""

    requests_per_unit: int
    unit: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class WireStatus:
    """One descriptor's outcome as Envoy reports it; ``retry_after`` (seconds until a refused
    hit could pass) is ratekeeper's, for HTTP's ``Retry-After``."""

    code: str
    current_limit: Limited | None
    limit_remaining: int
    duration_until_reset: float | None
    retry_after: float = 0.0
