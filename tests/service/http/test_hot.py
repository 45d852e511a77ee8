"""``service.hot`` is ``bodies`` by a shorter way: every body parses to the same check or the
same problem, every outcome is written to the same bytes, and the raw rate-limit headers are
``rate_limit_headers``'s, for well-formed, unusual and hostile input alike."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from ratekeeper.engine.verdict import UNLIMITED, Status
from ratekeeper.service.http import bodies, hot
from ratekeeper.service.http.responses import encode
from ratekeeper.wire import translate
from ratekeeper.wire.headers import (
    rate_limit_headers,
    raw_decision_headers,
    raw_rate_limit_headers,
    raw_wire_headers,
)
from ratekeeper.wire.problems import Problem
from ratekeeper.wire.statuses import OK, OVER_LIMIT, Limited, WireStatus
from ratekeeper.wire.translate import Answer, Call

ENTRY = {"key": "client", "value": "v1"}
BODIES: list[Any] = [
    {"key": "k1", "limit": "1000000000/day"},
    {"key": "k1", "limit": "10/minute", "cost": 3},
    {"key": "k1", "limit": "10/minute", "cost": 0},
    {"key": "k1"},
    {"key": "k1", "cost": 2},
    {"key": "k1", "limit": None},
    {"key": "k1", "limit": {"capacity": 10, "time_window_sec": 60}},
    {"key": "k1", "limit": "10/minute; 20/hour"},
    {"key": "k1", "limit": "ten a minute"},
    {"key": "k1", "limit": ""},
    {"key": "k1", "limit": 10},
    {"key": "k1", "limit": "10/minute", "cost": -1},
    {"key": "k1", "limit": "10/minute", "cost": 10**30},
    {"key": "k1", "limit": "10/minute", "cost": 1.0},
    {"key": "k1", "limit": "10/minute", "cost": True},
    {"key": "k1", "limit": "10/minute", "cost": "1"},
    {"key": "k1", "limit": "10/minute", "cost": None},
    {"key": "", "limit": "10/minute"},
    {"key": 5, "limit": "10/minute"},
    {"key": None},
    {"key": ["k"]},
    {"key": "ключ", "limit": "10/minute"},
    {"key": "k\udc80", "limit": "10/minute"},
    {"key": "k1", "limit": "10/minute", "extra": 1},
    {"limit": "10/minute"},
    {},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY]}]},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY, {"key": "path"}]}]},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY]}, {"entries": [ENTRY]}]},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY]}], "hits_addend": 5},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY]}], "hits_addend": 0},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY]}], "hits_addend": -1},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY]}], "hits_addend": 2.5},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY], "hits_addend": 2}]},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY], "limit": None}]},
    {
        "domain": "bench",
        "descriptors": [{"entries": [ENTRY], "limit": {"requests_per_unit": 5, "unit": "MINUTE"}}],
    },
    {"domain": "bench", "descriptors": [{"entries": [ENTRY], "limit": {"unit": "FORTNIGHT"}}]},
    {"domain": "bench", "descriptors": [{"entries": [{"key": "client", "value": ""}]}]},
    {"domain": "bench", "descriptors": [{"entries": [{"key": "", "value": "v"}]}]},
    {"domain": "bench", "descriptors": [{"entries": [{"key": "client", "value": 7}]}]},
    {"domain": "bench", "descriptors": [{"entries": [{"key": "client", "value": "é"}]}]},
    {"domain": "bench", "descriptors": [{"entries": [{"key": "c", "other": "v"}]}]},
    {"domain": "bench", "descriptors": [{"entries": []}]},
    {"domain": "bench", "descriptors": [{"entries": "client"}]},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY], "extra": 1}]},
    {"domain": "bench", "descriptors": [{}]},
    {"domain": "bench", "descriptors": ["client"]},
    {"domain": "bench", "descriptors": []},
    {"domain": "bench", "descriptors": {"entries": [ENTRY]}},
    {"domain": "bench"},
    {"domain": "", "descriptors": [{"entries": [ENTRY]}]},
    {"domain": None, "descriptors": [{"entries": [ENTRY]}]},
    {"domain": "bench", "descriptors": [{"entries": [ENTRY]}], "key": "k1"},
    [],
    [{"key": "k1"}],
    "k1",
    None,
    3,
]
RAW = [
    b"",
    b"{",
    b'{"key": "k1"',
    b'{"key": "k1"} trailing',
    b'{"key": "k1"}   \n',
    b'{"key": "k1"}\r\n\t',
    b'{"key": "k1"}\x0b',
    b'{"key": "k1"}\xc2\xa0',
    b'{"key": "k1"} {}',
    b'  {"key": "k1"}',
    b'{"key": "k1", "cost": NaN}',
    b'{"key": "k1", "cost": Infinity}',
    b'{"key": "k1", "cost": -Infinity}',
    b'{"key": "k1", "cost": 1e400}',
    b'{"key": "k1", "key": "k2"}',
    b'{"key": "k\\u0000"}',
    b'{"key": "k\xff"}',
    b"\xef\xbb\xbf" + b'{"key": "k1"}',
    '{"key": "k1"}'.encode("utf-16-le"),
    '{"key": "k1"}'.encode("utf-16"),
    '{"key": "k1"}'.encode("utf-32"),
    b"{\x00",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
]


def outcome_of(run: Any) -> Any:
    """What ``run()`` returns, or the problem it raises (status, kind, detail, where)."""
    try:
        return run()
    except Problem as problem:
        return ("problem", problem.status, problem.kind, problem.detail, problem.where)


def engine_gets(check: Any) -> Any:
    """A check as the engine gets it: a key's as ``hot.Key``, a ``Call`` of bare descriptors
    as ``hot.Bare``."""
    if isinstance(check, bodies.KeyCheck):
        return hot.Key(check.key, check.limit, check.cost)
    if isinstance(check, Call) and all(
        one.limit is None and one.hits_addend is None for one in check.descriptors
    ):
        found, hits = translate.arguments(check)
        return hot.Bare(check.domain, list(found), hits)  # type: ignore[arg-type]
    return check


def both_parse(raw: bytes) -> None:
    assert outcome_of(lambda: engine_gets(hot.parse(raw))) == outcome_of(
        lambda: engine_gets(bodies.check(bodies.loads(raw)))
    )


@pytest.mark.parametrize("body", BODIES, ids=repr)
def test_a_body_parses_as_bodies_parses_it(body: Any) -> None:
    both_parse(json.dumps(body).encode())
    both_parse(json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("raw", RAW, ids=lambda raw: repr(raw[:30]))
def test_raw_bytes_parse_as_bodies_parses_them(raw: bytes) -> None:
    both_parse(raw)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["key", "limit", "cost", "domain", "descriptors", "entries", "value"])
            | st.text(max_size=4),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(JSON)
def test_any_json_parses_as_bodies_parses_it(body: Any) -> None:
    both_parse(json.dumps(body).encode())


NUMBERS = st.integers(-(2**40), 2**40) | st.floats() | st.just(UNLIMITED + 5)
WAITS = NUMBERS | st.none() | st.just(math.inf)


DECISIONS = st.builds(
    Decision,
    st.booleans(),
    NUMBERS,
    NUMBERS,
    NUMBERS,
    WAITS,
    st.just(0.0),
    st.just(1),
    st.booleans(),
)


@given(DECISIONS)
def test_a_decision_is_written_as_bodies_writes_it(decision: Decision) -> None:
    assert hot.answer(decision) == encode(bodies.result(decision)).encode()


LIMITED = st.none() | st.builds(
    Limited,
    st.integers(0, 2**32) | st.booleans(),
    st.sampled_from(["MINUTE", "DAY", "UNKNOWN", 'dé"j\\à']),
    st.none() | st.text(max_size=6),
)
WIRE = st.builds(
    WireStatus,
    st.sampled_from([OK, OVER_LIMIT]),
    LIMITED,
    st.integers(0, 2**32),
    st.none() | NUMBERS,
    NUMBERS | st.just(math.inf),
)


@given(st.sampled_from([OK, OVER_LIMIT]), st.lists(WIRE, min_size=1, max_size=3), st.booleans())
def test_an_answer_is_written_as_bodies_writes_it(
    code: str, statuses: list[WireStatus], degraded: bool
) -> None:
    outcome = Answer(code, tuple(statuses), degraded)
    assert hot.answer(outcome) == encode(bodies.result(outcome)).encode()


def raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode(), value.encode()) for name, value in headers.items()]


COUNTS = st.integers(0, 2**40)
SECONDS = st.floats(0, 1e7) | st.just(math.inf) | st.just(math.nan) | st.integers(0, 10**6)


DECIDED = st.builds(
    Decision,
    st.booleans(),
    COUNTS,
    st.integers(-5, 2**40),
    SECONDS,
    SECONDS,
    st.just(0.0),
    st.just(1),
    st.just(False),
)


@given(DECIDED, st.booleans())
def test_raw_headers_are_the_headers_of_a_decision(decision: Decision, ietf: bool) -> None:
    allowed, limit = decision.allowed, decision.limit
    expected = raw(rate_limit_headers([decision], ietf=ietf))
    assert raw_rate_limit_headers([decision], ietf=ietf) == expected
    if not ietf:
        assert raw_decision_headers(decision, given=False) == expected
    status = Status(allowed, decision, Limit(max(limit, 1), 60), None, False, False)
    assert raw_decision_headers(decision, given=True) == raw(rate_limit_headers([status]))


@given(st.lists(WIRE, min_size=1, max_size=3), st.booleans())
def test_raw_headers_are_the_headers_of_an_answer(statuses: list[WireStatus], ietf: bool) -> None:
    assert raw_rate_limit_headers(statuses, ietf=ietf) == raw(
        rate_limit_headers(statuses, ietf=ietf)
    )


def fields_of(status: WireStatus) -> translate.Fields:
    limited = status.current_limit
    return (
        status.code,
        None if limited is None else (limited.requests_per_unit, limited.unit, limited.name),
        status.limit_remaining,
        status.duration_until_reset,
        status.retry_after,
    )


@given(WIRE, st.booleans())
def test_one_status_is_written_as_its_answer_is(status: WireStatus, degraded: bool) -> None:
    allowed = status.code == OK
    outcome = Answer(status.code, (status,), degraded)
    assert hot.answer_of(allowed, degraded, fields_of(status)) == hot.answer(outcome)
    amount = None if status.current_limit is None else status.current_limit.requests_per_unit
    assert raw_wire_headers(
        status.code, amount, status.limit_remaining, status.duration_until_reset,
        status.retry_after,
    ) == raw_rate_limit_headers([status])  # fmt: skip
