"""Envoy's ``POST /json``: its bodies in protobuf's JSON mapping.

Envoy's rate-limit service takes the same request over HTTP as over gRPC, a
``RateLimitRequest`` in protobuf's JSON mapping (field names in snake_case or lowerCamelCase,
enums by name or number, 64-bit integers possibly quoted; an unknown field is an error), and
answers a ``RateLimitResponse`` in that mapping: lowerCamelCase, default values left out,
durations as ``"60s"``. The request becomes a ``translate.Call``; the answer comes from a
``translate.Answer``, with the rate-limit headers in ``responseHeadersToAdd`` and the dynamic
metadata in ``dynamicMetadata`` when asked, as over gRPC.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from ratekeeper.core.errors import InvalidInputError
from ratekeeper.core.inputs import MAX_COST, decimal
from ratekeeper.service.http.bodies import CALL, DESCRIPTOR, ENTRY, OVERRIDE
from ratekeeper.wire.translate import Answer, Call, WireDescriptor, headers_to_add

_UNITS = ("UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK")


def _field(body: Mapping[str, Any], name: str, camel: str) -> Any:
    if name in body and camel in body:  # as protobuf's parser, which takes a field once
        raise InvalidInputError(f"{name} is given twice, as {name} and as {camel}")
    return body[name] if name in body else body.get(camel)


def _uint(value: Any, what: str) -> int:
    if value is None:  # protobuf's JSON: null is the default
        return 0
    if isinstance(value, str) and decimal(value):  # a quoted 64-bit integer
        value = int(value)
    value = _integral(value)
    if value.__class__ is not int or not 0 <= value <= MAX_COST:
        raise InvalidInputError(f"{what} must be an unsigned integer, not {value!r}")
    return int(value)


def _integral(value: Any) -> Any:
    """``value`` as an int when it is a float without a fraction (``3.0``), as protobuf's JSON
    parser reads one; else unchanged."""
    if value.__class__ is float and value.is_integer():
        return int(value)
    return value


def _only(body: Any, names: tuple[str, ...], what: str) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise InvalidInputError(f"{what} must be an object")
    unknown = sorted(body.keys() - _both(names))
    if unknown:
        raise InvalidInputError(f"unknown field {unknown[0]!r} in {what}")
    return body


def _array(body: Mapping[str, Any], name: str) -> list[Any]:
    value = body.get(name)
    if value is None:  # protobuf's JSON: null is the default, an empty array
        return []
    if not isinstance(value, list):
        raise InvalidInputError(f"{name} must be an array")
    return value


@cache
def _both(names: tuple[str, ...]) -> frozenset[str]:
    """``names`` and their lowerCamelCase twins, worked out once."""
    return frozenset(names) | {camel(name) for name in names}


def camel(name: str) -> str:
    """A protobuf field's lowerCamelCase JSON name: ``hits_addend`` gives ``hitsAddend``."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def request(data: Any) -> Call:
    """The ``Call`` of a ``RateLimitRequest`` in protobuf's JSON; ``InvalidInputError`` when it
    is not one (Envoy's service answers 400)."""
    body = _only(data, CALL, "the request")
    domain = body.get("domain", "")
    if not isinstance(domain, str):
        raise InvalidInputError("domain must be a string")
    result = []
    for item in _array(body, "descriptors"):
        one = _only(item, DESCRIPTOR, "a descriptor")
        pairs = []
        for entry in _array(one, "entries"):
            fields = _only(entry, ENTRY, "an entry")
            key, value = fields.get("key", ""), fields.get("value", "")
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidInputError("an entry's key and value are strings")
            pairs.append((key, value))
        limit = None
        if one.get("limit") is not None:
            sent = _only(one["limit"], OVERRIDE, "a limit")
            amount = _uint(
                _field(sent, "requests_per_unit", "requestsPerUnit"), "requests_per_unit"
            )
            unit = _integral(sent.get("unit", "UNKNOWN"))
            if unit.__class__ is int and 0 <= unit < len(_UNITS):
                unit = _UNITS[unit]
            if not isinstance(unit, str):
                raise InvalidInputError("a limit's unit is a name or a number")
            limit = (amount, unit)
        hits = _field(one, "hits_addend", "hitsAddend")
        result.append(
            WireDescriptor(
                tuple(pairs), limit, None if hits is None else _uint(hits, "hits_addend")
            )
        )
    hits_addend = _uint(_field(body, "hits_addend", "hitsAddend"), "hits_addend")
    return Call(domain, tuple(result), hits_addend)


def duration(seconds: float) -> str:
    """``seconds`` as protobuf's JSON ``Duration``: ``"60s"``, ``"1.500s"``."""
    nanos = round(seconds * 1e9)
    whole, fraction = divmod(nanos, 1_000_000_000)
    if not fraction:
        return f"{whole}s"
    digits = f"{fraction:09d}"
    while digits.endswith("000"):
        digits = digits[:-3]
    return f"{whole}.{digits}s"


def response(answer: Answer, header_names: tuple[str, str, str] | None = None) -> dict[str, Any]:
    """A ``RateLimitResponse`` in protobuf's JSON, as Envoy's service sends it: default
    values left out. With ``header_names`` (the limit, remaining and reset headers'), the
    rate-limit headers are in ``responseHeadersToAdd``, as ``{"key": ..., "value": ...}``; the
    answer's dynamic metadata, if any, is ``dynamicMetadata``."""
    statuses = []
    for status in answer.statuses:
        one: dict[str, Any] = {"code": status.code}
        limited = status.current_limit
        if limited is not None:
            current: dict[str, Any] = {}
            if limited.requests_per_unit:
                current["requestsPerUnit"] = limited.requests_per_unit
            if limited.unit != "UNKNOWN":
                current["unit"] = limited.unit
            if limited.name:
                current["name"] = limited.name
            one["currentLimit"] = current
        if status.limit_remaining:
            one["limitRemaining"] = status.limit_remaining
        if status.duration_until_reset is not None:
            one["durationUntilReset"] = duration(status.duration_until_reset)
        statuses.append(one)
    body: dict[str, Any] = {"overallCode": answer.code, "statuses": statuses}
    if header_names is not None:
        added = headers_to_add(answer, header_names)
        if added:
            body["responseHeadersToAdd"] = [{"key": k, "value": v} for k, v in added]
    if answer.metadata is not None:
        body["dynamicMetadata"] = answer.metadata
    return body
