"""The rate-limit headers of an HTTP answer, from the statuses of one decision.

``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset`` describe the status
closest to its limit: a refusing one first, then the one with the fewest hits remaining, then
the one that resets last. ``X-RateLimit-Reset`` is the seconds until that limit is fully
available again, rounded up to whole seconds: never 0 while something is counted (half a
per-second window gives 1), and never cut short (a monthly limit's reset runs to the end of
its window, up to 2,592,000 seconds, as the IETF ``t=`` does).

``Retry-After`` (whole seconds, rounded up, at most a day; an infinite wait gives a day) is
sent only when the decision refuses, and holds the longest wait of the refusing statuses: a
client looks again at least daily, so that a limit raised meanwhile (an override, new rules)
is seen.

With ``ietf=True`` the IETF httpapi draft's fields (revision 10) are added, each a Structured
Field list of one item naming the status by its rule's name: ``RateLimit-Policy:
"name";q=100;w=60`` (quota; window in seconds) and ``RateLimit: "name";r=50;t=30``
(remaining; seconds until the quota is whole again).

A status is a ``WireStatus``, an engine ``Status`` or a bare ``Decision``. Statuses
no limit applies to (unlimited, whitelisted) give no header.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple
from urllib.parse import quote

from ratekeeper.core.decisions import Decision
from ratekeeper.engine.verdict import Status
from ratekeeper.rules.model import UNITS
from ratekeeper.wire.statuses import OK, WireStatus

#: What a Structured Field String holds as it is: printable ASCII, less ``%`` (its escape).
_PRINTABLE = "".join(chr(code) for code in range(0x20, 0x7F) if chr(code) != "%")
#: The longest ``Retry-After``: a day. Also the reset of a limit that never resets.
MAX_RETRY_AFTER = 86_400

LIMIT = "X-RateLimit-Limit"
REMAINING = "X-RateLimit-Remaining"
RESET = "X-RateLimit-Reset"
RETRY_AFTER = "Retry-After"
RATELIMIT = "RateLimit"
RATELIMIT_POLICY = "RateLimit-Policy"
#: Set to ``true`` on an answer that the store's failure policy made (a degraded decision).
DEGRADED = "X-RateLimit-Degraded"
#: The names of the limit, remaining and reset headers, unless told others.
NAMES = (LIMIT, REMAINING, RESET)


class _Seen(NamedTuple):
    allowed: bool
    limit: int
    remaining: int
    reset: float
    retry_after: float
    window: float | None
    name: str


def seconds(value: float) -> int:
    """``value`` seconds as ``Retry-After`` gives them: rounded up, 0 to ``MAX_RETRY_AFTER``."""
    if math.isnan(value) or value <= 0:
        return 0
    if value >= MAX_RETRY_AFTER:
        return MAX_RETRY_AFTER
    return math.ceil(value)


def _seen(status: WireStatus | Status | Decision) -> _Seen | None:
    if status.__class__ is Decision:  # the common case, first: a limit's own decision
        return _decision(status)
    if isinstance(status, WireStatus):
        limited = status.current_limit
        if limited is None:
            return None
        return _Seen(
            status.code == OK,
            limited.requests_per_unit,
            status.limit_remaining,
            status.duration_until_reset or 0.0,
            status.retry_after,
            UNITS.get(limited.unit.lower()),
            limited.name or "default",
        )
    if isinstance(status, Status):
        decision, limit, rule = status.decision, status.limit, status.rule
        if decision is None:
            if status.allowed:
                return None
            name = (rule.name if rule is not None else None) or "default"
            return _Seen(False, 0, 0, 0.0, math.inf, None, name)
        name = (rule.name if rule is not None else None) or "default"
        period = limit.period if limit is not None else None
        return _Seen(
            status.allowed,
            decision.limit,
            decision.remaining,
            decision.reset_after,
            decision.retry_after,
            period,
            name,
        )
    return _decision(status)


def _decision(status: Decision) -> _Seen | None:
    if status.limit == 0 and status.allowed:  # no limit applied (an unlimited key)
        return None
    return _Seen(
        status.allowed,
        status.limit,
        status.remaining,
        status.reset_after,
        status.retry_after,
        None,
        "default",
    )


def whole_seconds(value: float) -> int:
    """``value`` seconds as a reset or a window is given: rounded up, so that only 0 gives 0,
    and not capped, as a window can be longer than a day (an unknown one, infinite, gives a
    day)."""
    if math.isnan(value) or value <= 0:
        return 0
    return MAX_RETRY_AFTER if math.isinf(value) else math.ceil(value)


def _sf_string(text: str) -> str:
    """``text`` as a Structured Field String (RFC 9651): quoted, ``\\`` and ``"`` escaped,
    and any character outside printable ASCII, which such a string cannot hold,
    percent-encoded (as ``%`` itself is)."""
    escaped = quote(text, safe=_PRINTABLE).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def rate_limit_headers(
    statuses: Iterable[WireStatus | Status | Decision],
    *,
    ietf: bool = False,
    names: tuple[str, str, str] = NAMES,
) -> dict[str, str]:
    """The rate-limit headers of a decision made of ``statuses`` (see the module's doc);
    ``names`` are those of the limit, remaining and reset headers.

    Example: one ``Decision(False, 10, 0, 42.5, 7.2)`` gives ``X-RateLimit-Limit: 10``,
    ``X-RateLimit-Remaining: 0``, ``X-RateLimit-Reset: 43`` and ``Retry-After: 8``.
    """
    seen = [one for one in map(_seen, statuses) if one is not None]
    if not seen:
        return {}
    if len(seen) == 1:
        closest = seen[0]
    else:
        closest = min(seen, key=lambda one: (one.allowed, one.remaining, -one.reset))
    limit, remaining, reset = names
    headers = {
        limit: str(closest.limit),
        remaining: str(max(closest.remaining, 0)),
        reset: str(whole_seconds(closest.reset)),
    }
    refused = [one.retry_after for one in seen if not one.allowed]
    if refused:
        headers[RETRY_AFTER] = str(seconds(max(refused)))
    if ietf:
        name = _sf_string(closest.name)
        policy = f"{name};q={closest.limit}"
        if closest.window is not None:
            policy += f";w={whole_seconds(closest.window) or 1}"
        headers[RATELIMIT_POLICY] = policy
        headers[RATELIMIT] = (
            f"{name};r={max(closest.remaining, 0)};t={whole_seconds(closest.reset)}"
        )
    return headers


#: The limit, remaining, reset and retry headers' names as an ASGI answer holds them.
_RAW_NAMES = tuple(name.lower().encode("latin-1") for name in (*NAMES, RETRY_AFTER))


def raw_rate_limit_headers(
    statuses: Sequence[WireStatus | Status | Decision], *, ietf: bool = False
) -> list[tuple[bytes, bytes]]:
    """``rate_limit_headers(statuses, ietf=ietf)`` as an ASGI answer's headers, in the same
    order: names in lowercase, values in Latin-1. One status without the IETF fields, nearly
    every check, is written without the dict."""
    if len(statuses) != 1 or ietf:
        return [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in rate_limit_headers(statuses, ietf=ietf).items()
        ]
    one = _seen(statuses[0])
    if one is None:
        return []
    return _raw(one.allowed, one.limit, one.remaining, one.reset, one.retry_after)


def raw_decision_headers(decision: Decision, *, given: bool) -> list[tuple[bytes, bytes]]:
    """``raw_rate_limit_headers`` of one ``decision``, without the IETF fields: of a limit the
    caller gave (``given``: what an engine ``Status`` of that limit gives) or of the key's own
    (the bare decision's, none when no limit applied)."""
    allowed, limit, remaining, reset, retry_after = decision[:5]
    if allowed and limit == 0 and not given:
        return []
    return _raw(allowed, limit, remaining, reset, retry_after)


def raw_wire_headers(
    code: str, requests_per_unit: int | None, remaining: int, reset: float | None, retry: float
) -> list[tuple[bytes, bytes]]:
    """``raw_rate_limit_headers`` of one ``WireStatus`` of these fields (``requests_per_unit``
    its current limit's, None when it has none), without the IETF fields."""
    if requests_per_unit is None:
        return []
    return _raw(code == OK, requests_per_unit, remaining, reset or 0.0, retry)


def _raw(
    allowed: bool, limit: int, remaining: int, reset: float, retry_after: float
) -> list[tuple[bytes, bytes]]:
    names = _RAW_NAMES
    headers = [
        (names[0], str(limit).encode("latin-1")),
        (names[1], str(max(remaining, 0)).encode("latin-1")),
        (names[2], str(whole_seconds(reset)).encode("latin-1")),
    ]
    if not allowed:
        headers.append((names[3], str(seconds(retry_after)).encode("latin-1")))
    return headers
