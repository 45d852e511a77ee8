"""``ShouldRateLimit``'s request and answer in fewer steps: the same checks and messages as
``servicer.call_of``, ``translate.decide_async`` and ``servicer.response_of``.

The servicer's hot path reads a request with ``arguments`` and writes the engine's verdict with
``response``. ``arguments`` takes the request nearly every gateway sends, a domain and
descriptors that send no limit and no ``hits_addend`` of their own, straight into
``AsyncEngine.check``'s arguments, as ``translate.arguments`` gives them for the ``Call`` of
``call_of``, without the ``Call`` and its ``WireDescriptor``s; any other request (and every
request that is not valid) is left to the general way, so that each error is its own, word for
word. ``response`` writes what ``response_of(translate.answer(verdict))`` writes, field for
field, without the ``Answer`` and ``WireStatus``es between. ``tests/service/grpc/test_hot.py``
holds the two ways to one result.
"""

from __future__ import annotations

from math import isfinite

from ratekeeper.core.inputs import MAX_COST
from ratekeeper.engine.verdict import Verdict
from ratekeeper.rules.model import Entry
from ratekeeper.service.proto import rls_pb2
from ratekeeper.wire.statuses import OK
from ratekeeper.wire.translate import fields

Response = rls_pb2.RateLimitResponse
_OK, _OVER = Response.OK, Response.OVER_LIMIT
_Unit = Response.RateLimit.Unit
#: ``current_limit``'s units, by name.
_UNITS = dict(_Unit.items())
#: The largest ``requests_per_unit`` (a uint32).
_MOST = 2**32 - 1
_NANOS = 1_000_000_000


def arguments(
    request: rls_pb2.RateLimitRequest,
) -> tuple[str, list[tuple[Entry, ...]], int] | None:
    """``AsyncEngine.check``'s domain, descriptors and hits for ``request``, when its domain is
    given, it has descriptors, its ``hits_addend`` is a cost, and no descriptor sends a limit or
    a ``hits_addend`` of its own; else None (``call_of`` and ``translate`` then decide it)."""
    domain, listed, hits = request.domain, request.descriptors, request.hits_addend or 1
    if not domain or not listed or hits > MAX_COST:
        return None
    found = []
    for descriptor in listed:
        if descriptor.HasField("limit") or descriptor.HasField("hits_addend"):
            return None
        found.append(tuple([(entry.key, entry.value) for entry in descriptor.entries]))
    return domain, found, hits


def response(verdict: Verdict) -> rls_pb2.RateLimitResponse:
    """``response_of(translate.answer(verdict))``: the ``RateLimitResponse`` of the engine's
    ``verdict``, with no headers and no metadata."""
    answer = Response(overall_code=_OK if verdict.allowed else _OVER)
    add = answer.statuses.add
    for one in verdict.statuses:
        code, limited, remaining, reset, _ = fields(one)
        status = add(code=_OK if code == OK else _OVER, limit_remaining=remaining)
        if limited is not None:
            amount, unit, name = limited
            current = status.current_limit
            current.requests_per_unit = min(amount, _MOST)
            number = _UNITS.get(unit)
            current.unit = _Unit.Value(unit) if number is None else number  # raises as it
            if name:
                current.name = name
        if reset is not None and isfinite(reset):
            nanos = round(reset * 1e9)
            until = status.duration_until_reset
            if nanos >= 0:
                until.seconds, until.nanos = divmod(nanos, _NANOS)
            else:  # a negative duration's nanos are negative too
                until.FromNanoseconds(nanos)
    return answer
