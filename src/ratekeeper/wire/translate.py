"""The one translation between a wire request and the engine, for every surface.

A wire adapter (Envoy's gRPC ``ShouldRateLimit``, the HTTP JSON API and Envoy's ``POST /json``,
nginx's ``auth_request``) parses its request into a ``Call``, and formats the ``Answer`` that
``decide`` returns. Everything between is here, once: how costs follow from ``hits_addend``
(Envoy's rules), how a limit sent with a descriptor becomes a ``Limit`` (sent as
``requests_per_unit: 0``, it refuses every hit uncounted, as a rule of 0 does), and how the
engine's verdict becomes Envoy's statuses (``OK`` / ``OVER_LIMIT``, ``current_limit``,
``limit_remaining``, ``duration_until_reset``) and the headers Envoy adds to its client's
answer (``response_headers_to_add``). No I/O and no wire format here.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ratekeeper.core.errors import InvalidInputError, InvalidLimitError
from ratekeeper.core.inputs import MAX_COST
from ratekeeper.core.limits import Limit
from ratekeeper.engine.verdict import UNLIMITED, Descriptor, Status, Verdict
from ratekeeper.rules.model import UNITS, Entry
from ratekeeper.wire.headers import RETRY_AFTER, rate_limit_headers
from ratekeeper.wire.metadata import dynamic_metadata
from ratekeeper.wire.statuses import OK, OVER_LIMIT, Limited, WireStatus

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine, Engine

#: Envoy's units by period, for ``current_limit``; a period that is none of them is UNKNOWN.
UNIT_OF_PERIOD = {seconds: name.upper() for name, seconds in UNITS.items()}
#: The largest ``limit_remaining`` (a uint32): what Envoy's service answers when unlimited.
MAX_REMAINING = UNLIMITED


@dataclass(frozen=True, slots=True)
class WireDescriptor:
    """One descriptor as a wire sends it: its entries, a limit sent with it
    (``(requests_per_unit, unit)``, the unit an Envoy unit name such as ``"MINUTE"``) and its
    own ``hits_addend`` (None when not sent; 0 only looks)."""

    entries: tuple[Entry, ...]
    limit: tuple[int, str] | None = None
    hits_addend: int | None = None


@dataclass(frozen=True, slots=True)
class Call:
    """One rate-limit request: a domain, its descriptors, and the request's ``hits_addend``
    (0, Envoy's default, means 1)."""

    domain: str
    descriptors: tuple[WireDescriptor, ...]
    hits_addend: int = 0


@dataclass(frozen=True, slots=True)
class Answer:
    """The overall code and a status per descriptor, in the request's order; ``metadata`` is
    the answer's dynamic metadata when asked for (``wire.metadata``), else None."""

    code: str
    statuses: tuple[WireStatus, ...]
    degraded: bool = False
    metadata: dict[str, Any] | None = None


def costs(call: Call) -> list[int]:
    """Each descriptor's cost, as Envoy's service counts them: its own ``hits_addend`` when
    sent (0 only looks), else the request's, where 0 means 1."""
    default = call.hits_addend or 1
    return [default if one.hits_addend is None else one.hits_addend for one in call.descriptors]


def descriptors(call: Call) -> list[Descriptor]:
    """The engine's descriptors of ``call``; ``InvalidInputError`` for a bad value."""
    if not call.domain:
        raise InvalidInputError("a rate-limit request names its domain")
    if not call.descriptors:
        raise InvalidInputError("a rate-limit request has at least one descriptor")
    result = []
    for one, cost in zip(call.descriptors, costs(call), strict=True):
        if isinstance(cost, bool) or not isinstance(cost, int) or not 0 <= cost <= MAX_COST:
            raise InvalidInputError(f"hits_addend must be an integer from 0 to {MAX_COST}")
        result.append(Descriptor(one.entries, sent_limit(one.limit), cost))
    return result


def arguments(call: Call) -> tuple[Sequence[Descriptor | tuple[Entry, ...]], int]:
    """``engine.check``'s descriptors and hits for ``call``, checked as ``descriptors`` checks
    them. When no descriptor sends a limit or a cost of its own, the descriptors are their bare
    entries and the request's cost is ``hits``: the engine's fast path for a cached one."""
    found, hits, _ = _prepared(call, ())
    return found, hits


def _prepared(
    call: Call, domains: Container[str]
) -> tuple[Sequence[Descriptor | tuple[Entry, ...]], int, list[bool] | None]:
    """``arguments(call)``, and which descriptors are always over (``_over``; None when none
    is), found in the one scan that picks the path: only a sent limit can be 0."""
    default = call.hits_addend or 1
    if (
        not call.domain
        or not call.descriptors
        or default.__class__ is not int
        or not 0 < default <= MAX_COST
    ):
        return descriptors(call), 1, None  # which raises the error
    for one in call.descriptors:
        if one.limit is not None or one.hits_addend is not None:
            return descriptors(call), 1, _over(call, domains)
    return [one.entries for one in call.descriptors], default, None


def sent_limit(sent: tuple[int, str] | None) -> Limit | None:
    """The ``Limit`` of a limit sent with a descriptor (``(requests_per_unit, unit)``); None
    when none is sent, or for 0, which ``decide`` answers always over without the engine.
    ``InvalidInputError`` for an unknown unit or an amount that is no limit's."""
    if sent is None:
        return None
    amount, unit = sent
    seconds = UNITS.get(str(unit).lower())
    if seconds is None:
        raise InvalidInputError(
            f"a limit's unit is one of {', '.join(UNITS).upper()}, not {unit!r}"
        )
    if amount == 0 and not isinstance(amount, bool):
        return None  # always over: ``decide`` answers it without the engine
    try:
        return Limit(amount, seconds)
    except InvalidLimitError as error:
        raise InvalidInputError(f"a limit sent with a descriptor: {error}") from None


def answer(verdict: Verdict, call: Call | None = None) -> Answer:
    """Envoy's answer for the engine's ``verdict``; given the ``call`` it decides, with its
    dynamic metadata (``wire.metadata``)."""
    return Answer(
        OK if verdict.allowed else OVER_LIMIT,
        tuple(_status(one) for one in verdict.statuses),
        verdict.degraded,
        None if call is None else dynamic_metadata(call, verdict.statuses),
    )


def headers_to_add(answer: Answer, names: tuple[str, str, str]) -> tuple[tuple[str, str], ...]:
    """The headers Envoy adds to its client's answer for ``answer`` (``response_headers_to_add``,
    as Envoy's service sends them when asked): the limit, remaining and reset headers, named
    ``names``, of the status closest to its limit (``ratekeeper.wire.headers``; a refusing one
    first, as Envoy's service chooses), and ``Retry-After`` when the answer is ``OVER_LIMIT``.
    Empty when no limit applied.

    Example: ``names`` ``("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")``
    and a refusal of 10 a minute 20.5 s before its window ends give ``(("X-RateLimit-Limit",
    "10"), ("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "21"), ("Retry-After", "21"))``.
    """
    headers = rate_limit_headers(answer.statuses, names=names)
    if answer.code != OVER_LIMIT:  # a refusal that did not refuse (quota or shadow mode)
        headers.pop(RETRY_AFTER, None)
    return tuple(headers.items())


#: A status's fields before any object: its code, its current limit as ``(requests_per_unit,
#: unit, name)`` (or None), its remaining hits, seconds until it resets and until a refused
#: hit could pass: ``WireStatus``'s, for a surface that writes them straight away.
Fields = tuple[str, "tuple[int, str, str | None] | None", int, "float | None", float]


def _status(status: Status) -> WireStatus:
    code, limited, remaining, reset, retry_after = fields(status)
    return WireStatus(
        code, None if limited is None else Limited(*limited), remaining, reset, retry_after
    )


def fields(status: Status) -> Fields:
    """The fields of the ``WireStatus`` Envoy's answer gives the engine's ``status``."""
    decision, limit, rule = status.decision, status.limit, status.rule
    code = OK if status.allowed else OVER_LIMIT
    if decision is None or limit is None:
        if rule is not None and rule.unlimited:
            return code, None, MAX_REMAINING, None, 0.0
        if not status.allowed:  # a rule that is always over its limit (requests_per_unit 0)
            unit = (rule.unit or "unknown").upper() if rule is not None else "UNKNOWN"
            name = rule.name if rule is not None else None
            return code, (0, unit, name), 0, None, float("inf")
        return code, None, 0, None, 0.0
    if rule is not None and rule.unit is not None and not status.overridden:
        limited = (rule.requests_per_unit, rule.unit.upper(), rule.name)
    else:
        name = rule.name if rule is not None else None
        limited = (limit.amount, UNIT_OF_PERIOD.get(limit.period, "UNKNOWN"), name)
    return (
        code,
        limited,
        min(decision.remaining, MAX_REMAINING),
        decision.reset_after,
        decision.retry_after,
    )


def _over(call: Call, domains: Container[str]) -> list[bool] | None:
    """Which descriptors carry a limit of 0 in a known domain, which Envoy's service holds
    always over their limit; None when none does (in an unknown domain no limit applies, as
    for any sent limit)."""
    if call.domain not in domains:
        return None
    over = [one.limit is not None and one.limit[0] == 0 for one in call.descriptors]
    return over if any(over) else None


def _joined(call: Call, over: list[bool], verdict: Verdict | None, metadata: bool) -> Answer:
    """The answer of the engine's ``verdict`` on the descriptors not ``over``, with an
    always-over status put back in place of each of the others: over its limit, as one is;
    with its dynamic metadata if ``metadata``."""
    decided = iter(() if verdict is None else answer(verdict).statuses)
    statuses = tuple(
        _always_over(one.limit) if refused and one.limit is not None else next(decided)
        for one, refused in zip(call.descriptors, over, strict=True)
    )
    found = None
    if metadata:
        engine_statuses = iter(() if verdict is None else verdict.statuses)
        found = dynamic_metadata(
            call, [None if refused else next(engine_statuses) for refused in over]
        )
    return Answer(OVER_LIMIT, statuses, verdict is not None and verdict.degraded, found)


def _always_over(limit: tuple[int, str]) -> WireStatus:
    return WireStatus(OVER_LIMIT, Limited(0, str(limit[1]).upper()), 0, None, float("inf"))


def decide(engine: Engine, call: Call, *, metadata: bool = False) -> Answer:
    """``call`` decided by ``engine``; with ``metadata``, the answer carries its dynamic
    metadata (``Answer.metadata``)."""
    found, hits, over = _prepared(call, engine.rules.domains)
    if over is None:
        return answer(engine.check(call.domain, found, hits), call if metadata else None)
    rest = [one for one, refused in zip(found, over, strict=True) if not refused]
    return _joined(call, over, engine.check(call.domain, rest) if rest else None, metadata)


async def decide_async(engine: AsyncEngine, call: Call, *, metadata: bool = False) -> Answer:
    """``call`` decided by the asyncio ``engine``; see ``decide``."""
    found, hits, over = _prepared(call, engine.rules.domains)
    if over is None:
        return answer(await engine.check(call.domain, found, hits), call if metadata else None)
    rest = [one for one, refused in zip(found, over, strict=True) if not refused]
    return _joined(call, over, await engine.check(call.domain, rest) if rest else None, metadata)
