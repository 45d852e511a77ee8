"""The HTTP JSON API's bodies: requests parsed into what the engine takes, answers formatted.

Free of any web framework, so every rule of the wire is here and tested alone. A parser raises
``Problem`` (``ratekeeper.wire.problems``) naming what is wrong and where (a JSON Pointer into
the body); the service answers it. Costs, limits sent with descriptors and Envoy's statuses are
``translate``'s: a descriptor check becomes a ``translate.Call``.

A check is one of (``cost`` and ``hits_addend`` default to 1; 0 only looks):

- ``{"key": K, "limit": "10/minute" | {"capacity": 10, "time_window_sec": 60, ...}, "cost": n}``
  counts ``K`` under the limit given (``AsyncEngine.hit``);
- ``{"key": K, "cost": n}`` counts ``K`` under its override or the default (``decide``);
- ``{"domain": D, "descriptors": [{"entries": [{"key": k, "value": v}], "limit":
  {"requests_per_unit": n, "unit": "MINUTE"}, "hits_addend": n}], "hits_addend": n}`` is
  decided by the rules, as Envoy's rate-limit service decides it.

Envoy's ``POST /json`` has bodies of its own: ``ratekeeper.service.http.envoy_json``.
``POST /v1/check``'s hot path reads and writes the common shapes by a shorter way
(``ratekeeper.service.http.hot``) that gives the same checks, problems and bytes as this module.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import ConfigError, InvalidInputError, InvalidLimitError
from ratekeeper.core.inputs import MAX_COST, check_key
from ratekeeper.core.limits import Limit
from ratekeeper.core.overrides import Override
from ratekeeper.core.rates import cached
from ratekeeper.engine.verdict import UNLIMITED
from ratekeeper.wire import translate
from ratekeeper.wire.problems import Problem, pointer
from ratekeeper.wire.statuses import OK, OVER_LIMIT, WireStatus
from ratekeeper.wire.translate import Answer, Call, WireDescriptor

#: The largest body a request may have, in bytes.
MAX_BODY = 64 * 1024
#: The most checks one batch may hold.
MAX_BATCH = 1000

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class KeyCheck:
    """A check of one key: under ``limit`` when given, else under the key's override."""

    key: str
    limit: Limit | None
    cost: int


Check = KeyCheck | Call


def invalid(detail: str, path: Path = ()) -> Problem:
    """A 422 problem at ``path``."""
    return Problem.of("invalid", detail, pointer(path) if path else None)


def is_json(content_type: str) -> bool:
    """Whether a ``Content-Type`` names JSON: ``application/json`` or ``application/*+json``,
    parameters (``; charset=utf-8``) aside."""
    media_type = content_type.partition(";")[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def loads(raw: bytes) -> Any:
    """The JSON value of a body; a 400 problem when it is not JSON."""
    try:  # json.loads, less building a decoder for every body
        return decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except (ValueError, RecursionError) as error:
        raise Problem.of("malformed", f"the body is not valid JSON: {error}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


#: The decoder of ``loads``, built once; ``decode`` gives the JSON value of a body's text
#: (``ValueError`` when it is not JSON).
decoder = json.JSONDecoder(parse_constant=_no_constant)
decode = decoder.decode


def _object(value: Any, path: Path, fields: Sequence[str], what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"{what} must be a JSON object, not {_kind(value)}", path)
    unknown = sorted(value.keys() - fields)
    if unknown:
        raise invalid(
            f"unknown field {unknown[0]!r} in {what}; expected some of: {', '.join(fields)}",
            (*path, unknown[0]),
        )
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def _count(value: Any, path: Path, what: str) -> int:
    if value.__class__ is not int or not 0 <= value <= MAX_COST:
        raise invalid(f"{what} must be an integer from 0 to {MAX_COST}, not {value!r}", path)
    return int(value)


def _text(value: Any, path: Path, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise invalid(f"{what} must be a non-empty string, not {value!r}", path)
    try:
        return check_key(value, what) if value else value
    except InvalidInputError as error:
        raise invalid(str(error), path) from None


def check(data: Any, path: Path = (), *, looks: bool = False) -> Check:
    """The check ``data`` asks for (see the module); ``looks`` makes every cost 0 (a peek)."""
    if isinstance(data, dict) and "domain" in data:
        return _call(data, path, looks=looks)
    body = _object(data, path, KEY_CHECK, "a check")
    if "key" not in body:
        raise invalid("a check names a key, or a domain and its descriptors", path)
    key = _text(body["key"], (*path, "key"), "key")
    limit = _limit(body["limit"], (*path, "limit")) if body.get("limit") is not None else None
    cost = _count(body.get("cost", 1), (*path, "cost"), "cost")
    return KeyCheck(key, limit, 0 if looks else cost)


def key_of(data: Any) -> KeyCheck:
    """The key and limit of a reset: ``{"key": K, "limit": ...}`` (limit optional)."""
    body = _object(data, (), ("key", "limit"), "a reset")
    if "key" not in body:
        raise invalid("a reset names its key")
    key = _text(body["key"], ("key",), "key")
    limit = _limit(body["limit"], ("limit",)) if body.get("limit") is not None else None
    return KeyCheck(key, limit, 0)


def _limit(value: Any, path: Path) -> Limit:
    if isinstance(value, str):
        try:
            limits = cached(value)
        except InvalidLimitError as error:
            raise invalid(str(error), path) from None
        if len(limits) != 1:
            raise invalid(f"a check's limit is one limit, not {value!r}", path)
        return limits[0]
    if isinstance(value, dict):
        try:
            return Override.from_dict(value, "limit").limit
        except ConfigError as error:
            raise invalid(str(error), path) from None
    raise invalid(
        f"limit is a rate string such as '10/minute' or an object of capacity and "
        f"time_window_sec, not {_kind(value)}",
        path,
    )


#: The fields of a key's check.
KEY_CHECK = ("key", "limit", "cost")
#: The fields of each object of a descriptor check (Envoy's names, in snake_case).
CALL = ("domain", "descriptors", "hits_addend")
DESCRIPTOR = ("entries", "limit", "hits_addend")
ENTRY = ("key", "value")
OVERRIDE = ("requests_per_unit", "unit")


def _call(data: dict[str, Any], path: Path, *, looks: bool) -> Call:
    body = _object(data, path, CALL, "a rate-limit request")
    domain = _text(body.get("domain"), (*path, "domain"), "domain")
    listed = body.get("descriptors")
    if not isinstance(listed, list) or not listed:
        raise invalid("descriptors must be a non-empty array", (*path, "descriptors"))
    hits = _count(body.get("hits_addend", 0), (*path, "hits_addend"), "hits_addend")
    result = []
    for index, item in enumerate(listed):
        at = (*path, "descriptors", index)
        one = _descriptor(item, at)
        if looks:
            one = WireDescriptor(one.entries, one.limit, 0)
        if one.limit is not None:
            try:  # translate's own check, here to say which descriptor's limit is wrong
                translate.sent_limit(one.limit)
            except InvalidInputError as error:
                raise invalid(str(error), at) from None
        result.append(one)
    return Call(domain, tuple(result), hits)


def _descriptor(item: Any, path: Path) -> WireDescriptor:
    body = _object(item, path, DESCRIPTOR, "a descriptor")
    entries = body.get("entries")
    if not isinstance(entries, list) or not entries:
        raise invalid("entries must be a non-empty array", (*path, "entries"))
    pairs = []
    for index, entry in enumerate(entries):
        at = (*path, "entries", index)
        fields = _object(entry, at, ENTRY, "an entry")
        key = _text(fields.get("key"), (*at, "key"), "an entry's key")
        value = _text(fields.get("value", ""), (*at, "value"), "an entry's value", empty=True)
        pairs.append((key, value))
    limit = None
    if body.get("limit") is not None:
        at = (*path, "limit")
        sent = _object(body["limit"], at, OVERRIDE, "a descriptor's limit")
        amount = _count(
            sent.get("requests_per_unit"), (*at, "requests_per_unit"), "requests_per_unit"
        )
        unit = sent.get("unit")
        if not isinstance(unit, str):
            raise invalid(f"unit must be a string such as 'MINUTE', not {unit!r}", (*at, "unit"))
        limit = (amount, unit)
    hits = None
    if body.get("hits_addend") is not None:
        hits = _count(body["hits_addend"], (*path, "hits_addend"), "hits_addend")
    return WireDescriptor(tuple(pairs), limit, hits)


def batch(data: Any, *, looks: bool = False) -> list[Check]:
    """The checks of a batch: a JSON array of checks, at most ``MAX_BATCH``."""
    if not isinstance(data, list) or not data:
        raise invalid(f"a batch is a non-empty array of checks, not {_kind(data)}")
    if len(data) > MAX_BATCH:
        raise invalid(f"a batch holds at most {MAX_BATCH} checks, not {len(data)}")
    return [check(item, (index,), looks=looks) for index, item in enumerate(data)]


# Answers.


def _seconds(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


def decision_status(decision: Decision) -> dict[str, Any]:
    """One key's decision as a status of the API."""
    unlimited = decision.allowed and decision.limit == 0 and decision.remaining >= UNLIMITED
    return {
        "code": OK if decision.allowed else OVER_LIMIT,
        "limit": None if unlimited else decision.limit,
        "remaining": min(decision.remaining, UNLIMITED),
        "reset_after": decision.reset_after,
        "retry_after": _seconds(decision.retry_after),
        "current_limit": None,
    }


def wire_status(status: WireStatus) -> dict[str, Any]:
    """One descriptor's status as a status of the API."""
    limited = status.current_limit
    return {
        "code": status.code,
        "limit": None if limited is None else limited.requests_per_unit,
        "remaining": status.limit_remaining,
        "reset_after": status.duration_until_reset,
        "retry_after": _seconds(status.retry_after),
        "current_limit": None
        if limited is None
        else {
            "requests_per_unit": limited.requests_per_unit,
            "unit": limited.unit,
            "name": limited.name,
        },
    }


def result(outcome: Decision | Answer) -> dict[str, Any]:
    """The body of one check's answer: the overall result, and every status in order."""
    if isinstance(outcome, Answer):
        statuses = [wire_status(one) for one in outcome.statuses]
        allowed, degraded = outcome.code == OK, outcome.degraded
    else:
        statuses = [decision_status(outcome)]
        allowed, degraded = outcome.allowed, outcome.degraded
    return {
        "allowed": allowed,
        "code": OK if allowed else OVER_LIMIT,
        "degraded": degraded,
        "statuses": statuses,
    }
