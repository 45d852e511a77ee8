"""``POST /v1/check``'s body and answer in fewer steps: the same checks and bytes as ``bodies``.

The hot path (``Checks.check_raw``) reads a check with ``parse`` and writes its answer with
``answer``. Each takes the shapes nearly every request has, a key with a rate string or a domain
with descriptors of bare entries, by the shortest way, and hands anything else to ``bodies``:
an unusual body, and every body that is not valid, so that each problem is ``bodies``'s own,
word for word. ``answer`` writes what ``encode(bodies.result(outcome))`` writes, byte for byte,
without building the dicts. ``tests/service/http/test_hot.py`` holds the two ways to one result.
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring
from typing import Any, NamedTuple

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import InvalidLimitError
from ratekeeper.core.inputs import MAX_COST
from ratekeeper.core.limits import Limit
from ratekeeper.core.rates import cached
from ratekeeper.engine.verdict import UNLIMITED
from ratekeeper.rules.model import Entry
from ratekeeper.service.http import bodies
from ratekeeper.service.http.responses import encode
from ratekeeper.wire.statuses import OK, OVER_LIMIT, Limited, WireStatus
from ratekeeper.wire.translate import Answer, Fields

#: The fields of each shape ``parse`` takes by the short way.
_KEY_CHECK = frozenset(bodies.KEY_CHECK)
_CALL = frozenset(bodies.CALL)
_ENTRY = frozenset(bodies.ENTRY)
_ENTRIES = frozenset(("entries",))

_float = float.__repr__
_int = int.__repr__
#: ``bodies.decoder``'s own scanner: ``decode`` less the white space before the value.
_scan = vars(bodies.decoder)["scan_once"]
#: JSON's white space, which may follow the value.
_WHITESPACE = " \t\n\r"
#: ``"code":...`` and ``"allowed":...`` of an answer, by whether it allowed.
_OK, _OVER = encode_basestring(OK), encode_basestring(OVER_LIMIT)


def loads(raw: bytes) -> Any:
    """``bodies.loads(raw)``, less guessing the encoding of a body that opens an object and
    looking for white space before it: a body that is anything else, or not JSON, is
    ``bodies.loads``'s to read or refuse."""
    if raw[:1] == b"{" and raw[1:2] != b"\x00":  # json.detect_encoding's answer: UTF-8
        try:
            text = raw.decode("utf-8", "surrogatepass")
            value, end = _scan(text, 0)
        except (StopIteration, ValueError, RecursionError):
            pass
        else:
            if end == len(text) or not text[end:].strip(_WHITESPACE):
                return value
    return bodies.loads(raw)


class Key(NamedTuple):
    """A check of a key: the ``bodies.KeyCheck`` ``bodies`` would have made, as a tuple (a
    frozen dataclass is slower to make)."""

    key: str
    limit: Limit | None
    cost: int


class Bare(NamedTuple):
    """A check of descriptors of bare entries: ``AsyncEngine.check``'s arguments, as
    ``translate.decide_async`` gives them for the ``Call`` ``bodies`` would have made."""

    domain: str
    descriptors: list[tuple[Entry, ...]]
    hits: int


def parse(raw: bytes) -> bodies.Check | Key | Bare:
    """The check a body asks for: ``bodies.check(bodies.loads(raw))``, as a ``Key`` when it
    is a key's with a rate string or none, and as its ``Bare`` arguments when it is a domain
    and descriptors of bare entries."""
    data = loads(raw)
    if data.__class__ is dict:
        if "domain" in data:
            bare = _bare(data)
            if bare is not None:
                return bare
        elif data.keys() <= _KEY_CHECK:
            key, limit, cost = data.get("key"), data.get("limit"), data.get("cost", 1)
            if (
                key.__class__ is str
                and key
                and key.isascii()
                and cost.__class__ is int
                and 0 <= cost <= MAX_COST
            ):
                if limit is None:
                    return Key(key, None, cost)
                if limit.__class__ is str:
                    try:
                        limits = cached(limit)
                    except InvalidLimitError:
                        limits = ()
                    if len(limits) == 1:
                        return Key(key, limits[0], cost)
    return bodies.check(data)


def _bare(data: dict[str, Any]) -> Bare | None:
    """A domain and descriptors of bare entries (no limit, no ``hits_addend`` of their own),
    every text ASCII: its ``Bare``; else None."""
    if not data.keys() <= _CALL:
        return None
    domain, listed, hits = data["domain"], data.get("descriptors"), data.get("hits_addend", 0)
    if (
        domain.__class__ is not str
        or not domain
        or not domain.isascii()
        or listed.__class__ is not list
        or not listed
        or hits.__class__ is not int
        or not 0 <= hits <= MAX_COST
    ):
        return None
    found = []
    for item in listed:
        if item.__class__ is not dict or item.keys() != _ENTRIES:
            return None
        entries = item["entries"]
        if entries.__class__ is not list or not entries:
            return None
        pairs = []
        for entry in entries:
            if entry.__class__ is not dict or not entry.keys() <= _ENTRY:
                return None
            key, value = entry.get("key"), entry.get("value", "")
            if (
                key.__class__ is not str
                or not key
                or not key.isascii()
                or value.__class__ is not str
                or not value.isascii()
            ):
                return None
            pairs.append((key, value))
        found.append(tuple(pairs))
    return Bare(domain, found, hits or 1)  # translate's costs: 0 means 1


def answer(outcome: Decision | Answer) -> bytes:
    """The body of one check's answer: ``encode(bodies.result(outcome)).encode()``."""
    try:
        if type(outcome) is Answer:
            allowed = outcome.code == OK
            statuses = ",".join([_wire_status(one) for one in outcome.statuses])
        elif type(outcome) is Decision:
            allowed = outcome.allowed
            statuses = _decision_status(outcome)
        else:
            raise _Unusual
        return (
            f'{{"allowed":{_bool(allowed)},"code":{_OK if allowed else _OVER},'
            f'"degraded":{_bool(outcome.degraded)},"statuses":[{statuses}]}}'
        ).encode()
    except _Unusual:
        return encode(bodies.result(outcome)).encode()


def answer_of(allowed: bool, degraded: bool, status: Fields) -> bytes:
    """The body of the answer of one descriptor's ``status`` (``translate.fields``), as
    ``answer`` writes that of its ``Answer``."""
    try:
        return (
            f'{{"allowed":{_bool(allowed)},"code":{_OK if allowed else _OVER},'
            f'"degraded":{_bool(degraded)},"statuses":[{_fields(*status)}]}}'
        ).encode()
    except _Unusual:
        code, limited, remaining, reset, retry_after = status
        current = None if limited is None else Limited(*limited)
        wire = WireStatus(code, current, remaining, reset, retry_after)
        outcome = Answer(OK if allowed else OVER_LIMIT, (wire,), degraded)
        return encode(bodies.result(outcome)).encode()


class _Unusual(Exception):
    """A value ``_scalar`` leaves to the encoder's own way."""


def _bool(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    raise _Unusual


def _scalar(value: Any) -> str:
    """A number, a string or null of an answer, as ``encode`` writes it."""
    kind = value.__class__
    if kind is int:
        return _int(value)
    if kind is float and value - value == 0.0:  # finite
        return _float(value)
    if value is None:
        return "null"
    if kind is str:
        return encode_basestring(value)
    raise _Unusual


def _wait(value: Any) -> str:
    """A ``retry_after`` as ``bodies`` gives it: null when there is none or it is endless."""
    return "null" if value is None or math.isinf(value) else _scalar(value)


def _decision_status(decision: Decision) -> str:
    """``bodies.decision_status(decision)``, written."""
    allowed, limit, remaining, reset, retry = decision[:5]
    code = _OK if allowed else _OVER
    unlimited = allowed and limit == 0 and remaining >= UNLIMITED
    if (  # the common case: counts and finite seconds
        limit.__class__ is int
        and remaining.__class__ is int
        and reset.__class__ is float
        and retry.__class__ is float
        and reset - reset == 0.0
        and retry - retry == 0.0
    ):
        return (
            f'{{"code":{code},"limit":{"null" if unlimited else _int(limit)},'
            f'"remaining":{_int(min(remaining, UNLIMITED))},"reset_after":{_float(reset)},'
            f'"retry_after":{_float(retry)},"current_limit":null}}'
        )
    return (
        f'{{"code":{code},"limit":{"null" if unlimited else _scalar(limit)},'
        f'"remaining":{_scalar(min(remaining, UNLIMITED))},"reset_after":{_scalar(reset)},'
        f'"retry_after":{_wait(retry)},"current_limit":null}}'
    )


def _wire_status(status: WireStatus) -> str:
    """``bodies.wire_status(status)``, written."""
    limited = status.current_limit
    return _fields(
        status.code,
        None if limited is None else (limited.requests_per_unit, limited.unit, limited.name),
        status.limit_remaining,
        status.duration_until_reset,
        status.retry_after,
    )


def _fields(
    code: Any, limited: tuple[Any, Any, Any] | None, remaining: Any, reset: Any, retry: Any
) -> str:
    """``bodies.wire_status`` of a ``WireStatus`` of these fields, written."""
    if (  # the common case: a current limit, counts and finite seconds
        limited is not None
        and code.__class__ is str
        and remaining.__class__ is int
        and reset.__class__ is float
        and retry.__class__ is float
        and reset - reset == 0.0
        and retry - retry == 0.0
        and limited[0].__class__ is int
        and limited[1].__class__ is str
    ):
        amount, name = _int(limited[0]), limited[2]
        return (
            f'{{"code":{encode_basestring(code)},"limit":{amount},"remaining":{_int(remaining)},'
            f'"reset_after":{_float(reset)},"retry_after":{_float(retry)},"current_limit":'
            f'{{"requests_per_unit":{amount},"unit":{encode_basestring(limited[1])},'
            f'"name":{"null" if name is None else _scalar(name)}}}}}'
        )
    if limited is None:
        limit = current = "null"
    else:
        limit = _scalar(limited[0])
        current = (
            f'{{"requests_per_unit":{limit},"unit":{_scalar(limited[1])},'
            f'"name":{_scalar(limited[2])}}}'
        )
    return (
        f'{{"code":{_scalar(code)},"limit":{limit},"remaining":{_scalar(remaining)},'
        f'"reset_after":{_scalar(reset)},"retry_after":{_wait(retry)},"current_limit":{current}}}'
    )
