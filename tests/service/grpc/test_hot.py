"""``service.grpc.hot`` is the general way by a shorter one: a request it takes gives the engine
what ``call_of`` and ``translate.arguments`` give it, a request it leaves is one they refuse or
one that sends a limit or a cost of its own, and every verdict is written to the response
``response_of(translate.answer(verdict))`` writes, field for field and byte for byte, for
well-formed, unusual and hostile input alike (an error raised the same way too)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import wrappers_pb2
from hypothesis import given
from hypothesis import strategies as st

from ratekeeper.core.decisions import Decision
from ratekeeper.core.inputs import MAX_COST
from ratekeeper.core.limits import Limit
from ratekeeper.engine.verdict import UNLIMITED, Status, Verdict
from ratekeeper.rules.model import UNITS, Rule
from ratekeeper.service.grpc import call_of, hot, response_of
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2
from ratekeeper.wire import translate

Descriptor = ratelimit_pb2.RateLimitDescriptor
RateLimitOverride = Descriptor.RateLimitOverride


def request(
    *descriptors: Descriptor, hits_addend: int = 0, domain: str = "test"
) -> rls_pb2.RateLimitRequest:
    return rls_pb2.RateLimitRequest(domain=domain, descriptors=descriptors, hits_addend=hits_addend)


def descriptor(*entries: tuple[str, str], **fields: Any) -> Descriptor:
    return Descriptor(
        entries=[Descriptor.Entry(key=key, value=value) for key, value in entries], **fields
    )


ENTRY = ("client", "v1")
REQUESTS = [
    request(descriptor(ENTRY)),
    request(descriptor(ENTRY, ("path", "/a"))),
    request(descriptor(ENTRY), descriptor(("path", "/a")), descriptor(ENTRY)),
    request(descriptor(ENTRY), hits_addend=5),
    request(descriptor(ENTRY), hits_addend=2**32 - 1),
    request(descriptor(ENTRY), domain=""),
    request(),
    request(descriptor()),
    request(descriptor(("", ""))),
    request(descriptor(("client", "é"), ("ключ", "\x00"))),
    request(descriptor(ENTRY, hits_addend=wrappers_pb2.UInt64Value(value=0))),
    request(descriptor(ENTRY, hits_addend=wrappers_pb2.UInt64Value(value=3))),
    request(descriptor(ENTRY, hits_addend=wrappers_pb2.UInt64Value(value=MAX_COST + 1))),
    request(descriptor(ENTRY, limit=RateLimitOverride(requests_per_unit=5, unit=2))),
    request(descriptor(ENTRY, limit=RateLimitOverride(requests_per_unit=0, unit=1))),
    request(descriptor(ENTRY, limit=RateLimitOverride(requests_per_unit=5, unit=99))),
    request(descriptor(ENTRY, limit=RateLimitOverride())),
    request(descriptor(ENTRY), descriptor(ENTRY, limit=RateLimitOverride(requests_per_unit=1))),
]


def outcome_of(run: Callable[[], Any]) -> Any:
    """What ``run()`` returns, or the error it raises (its type and message)."""
    try:
        return run()
    except Exception as error:
        return ("raises", type(error), str(error))


def generally(one: rls_pb2.RateLimitRequest) -> Any:
    """The engine's arguments for ``one`` the general way, as ``hot.arguments`` gives them."""
    found, hits = translate.arguments(call_of(one))
    return one.domain, list(found), hits


def both_read(one: rls_pb2.RateLimitRequest) -> None:
    taken = hot.arguments(one)
    general = outcome_of(lambda: generally(one))
    if taken is not None:
        assert taken == general
        return
    sends_its_own = any(d.HasField("limit") or d.HasField("hits_addend") for d in one.descriptors)
    assert sends_its_own or general[0] == "raises", general


@pytest.mark.parametrize("one", REQUESTS)
def test_a_request_reads_as_the_general_way_reads_it(one: rls_pb2.RateLimitRequest) -> None:
    both_read(one)


TEXT = st.text(max_size=6)
OVERRIDES = st.builds(
    RateLimitOverride,
    requests_per_unit=st.integers(0, 2**32 - 1),
    unit=st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 99]),
)
DESCRIPTORS = st.builds(
    descriptor,
    *[st.tuples(TEXT, TEXT)] * 2,
    limit=st.none() | OVERRIDES,
    hits_addend=st.none() | st.builds(wrappers_pb2.UInt64Value, value=st.integers(0, 2**64 - 1)),
)
REQUEST = st.builds(
    lambda listed, hits, domain: request(*listed, hits_addend=hits, domain=domain),
    st.lists(DESCRIPTORS, max_size=3),
    st.integers(0, 2**32 - 1) | st.sampled_from([0, 1, 2**32 - 1]),
    st.sampled_from(["test", ""]) | TEXT,
)


@given(REQUEST)
def test_any_request_reads_as_the_general_way_reads_it(one: rls_pb2.RateLimitRequest) -> None:
    both_read(one)


NUMBERS = st.integers(-(2**40), 2**40) | st.floats() | st.just(UNLIMITED + 5)
WAITS = NUMBERS | st.none() | st.just(math.inf)
AMOUNTS = st.integers(0, 2**40) | st.sampled_from([2**32 - 1, 2**32])
DECISIONS = st.builds(
    Decision,
    st.booleans(),
    AMOUNTS,
    NUMBERS,
    NUMBERS,
    WAITS,
    st.just(0.0),
    st.just(1),
    st.booleans(),
)
LIMITS = st.builds(Limit, st.integers(1, 2**40), st.sampled_from([*UNITS.values(), 7.0, 0.5, 90.0]))
RULES = st.builds(
    Rule,
    st.just("test"),
    st.just("client"),
    st.none() | LIMITS,
    st.booleans(),
    st.none() | st.sampled_from(["", "everyone", "ünï"]),
    st.just(()),
    st.booleans(),
    st.just(False),
    st.none() | st.sampled_from([*UNITS, "fortnight"]),
    AMOUNTS,
)
STATUSES = st.builds(
    Status,
    st.booleans(),
    st.none() | DECISIONS,
    st.none() | LIMITS,
    st.none() | RULES,
    st.booleans(),
    st.booleans(),
)
VERDICTS = st.builds(Verdict, st.booleans(), st.lists(STATUSES, max_size=3).map(tuple))


def both_write(verdict: Verdict) -> None:
    def serialized(make: Callable[[], rls_pb2.RateLimitResponse]) -> Any:
        answer = make()
        presence = [
            (one.HasField("current_limit"), one.HasField("duration_until_reset"))
            for one in answer.statuses
        ]
        return answer, answer.SerializeToString(deterministic=True), presence

    general = outcome_of(lambda: serialized(lambda: response_of(translate.answer(verdict))))
    assert outcome_of(lambda: serialized(lambda: hot.response(verdict))) == general


@given(VERDICTS)
def test_any_verdict_is_written_as_the_general_way_writes_it(verdict: Verdict) -> None:
    both_write(verdict)


@pytest.mark.parametrize(
    "reset", [0.0, 0.5, 20.5, 86_399.999_999_999_5, 1e-10, -0.5, -1.25, 3e11, math.inf, math.nan]
)
def test_every_duration_is_written_as_the_general_way_writes_it(reset: float) -> None:
    limit = Limit(10, 60)
    rule = Rule("test", "client", limit, False, "each", (), False, False, "minute", 10)
    decision = Decision(False, 10, 0, reset, reset, 0.0, 0, False)
    both_write(Verdict(False, (Status(False, decision, limit, rule, False, False),)))
