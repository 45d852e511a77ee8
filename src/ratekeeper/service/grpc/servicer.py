"""Envoy's rate-limit service over gRPC: ``ShouldRateLimit`` and the standard health service.

``RateLimitServicer`` only translates: an Envoy ``RateLimitRequest`` becomes a ``translate.Call``,
the one ``AsyncEngine`` decides it (``translate.decide_async``), and the ``translate.Answer``
becomes a ``RateLimitResponse`` whose statuses are in the request's order; a request of bare
descriptors, answered with no headers and no metadata, takes ``hot``'s shorter way to the same
response. A request ratekeeper refuses as invalid (an empty domain, no descriptors, a limit with an
unknown unit, or bytes that are no ``RateLimitRequest``) is answered ``INVALID_ARGUMENT`` with the
reason; a store that fails with no failure policy to answer, or is misconfigured, ``UNAVAILABLE``
(Envoy's ``failure_mode_deny`` then decides), and so is a call past the bound of an
``InFlightBound`` (``ratekeeper.service.inflight``), at once. Told the names of the rate-limit
headers, the response carries them in ``response_headers_to_add`` (``translate.headers_to_add``),
for Envoy to add to its client's answer, 429 or the application's; told to, it carries the answer's
dynamic metadata in ``dynamic_metadata`` (``ratekeeper.wire.metadata``). grpc.aio serves it
(``aio``), and so does the ASGI app pyvoy runs (``asgi``).
"""

from __future__ import annotations

import logging
import time
from math import isfinite
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from ratekeeper.core.errors import InvalidInputError, InvalidLimitError
from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.core.moved import deprecated_name, keywords_renamed
from ratekeeper.service.grpc import hot
from ratekeeper.service.inflight import RETRY_AFTER, InFlightBound
from ratekeeper.service.proto import ratelimit_unit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.wire import translate
from ratekeeper.wire.problems import UNAVAILABLE_ERRORS
from ratekeeper.wire.statuses import OK
from ratekeeper.wire.translate import (
    Answer,
    Call,
    WireDescriptor,
    decide_async,
    headers_to_add,
)

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.service.observe.metrics import Metrics

log = logging.getLogger("ratekeeper.service")
#: A store failing every call is logged once a minute, with a count.
_failures = LogThrottle(log)

#: The service's full name, as the health service reports it.
SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
#: The names the health service answers SERVING for: the whole server, the service, and the
#: name Envoy's own rate-limit service registers (health checks copied from its deployments).
HEALTH_NAMES = ("", SERVICE, "ratelimit")
#: The names whose status follows the service's health check, when it has one
#: (``ratekeeper.service.healthcheck``); the overall server's, ``""``, stays SERVING, as in
#: Envoy's own rate-limit service.
FOLLOWING = (SERVICE, "ratelimit")

Response = rls_pb2.RateLimitResponse
#: ``RateLimitUnit``'s names, by number.
_UNIT_NAMES = {number: name for name, number in ratelimit_unit_pb2.RateLimitUnit.items()}


def call_of(request: rls_pb2.RateLimitRequest) -> Call:
    """The ``Call`` a ``RateLimitRequest`` asks for."""
    descriptors = []
    for descriptor in request.descriptors:
        entries = tuple((entry.key, entry.value) for entry in descriptor.entries)
        limit = None
        if descriptor.HasField("limit"):
            unit = _UNIT_NAMES.get(descriptor.limit.unit)
            if unit is None:
                number = descriptor.limit.unit
                raise InvalidInputError(f"a limit's unit is a RateLimitUnit, not {number}")
            limit = (descriptor.limit.requests_per_unit, unit)
        hits = descriptor.hits_addend.value if descriptor.HasField("hits_addend") else None
        descriptors.append(WireDescriptor(entries, limit, hits))
    return Call(request.domain, tuple(descriptors), request.hits_addend)


def response_of(
    answer: Answer, header_names: tuple[str, str, str] | None = None
) -> rls_pb2.RateLimitResponse:
    """The ``RateLimitResponse`` of an ``Answer``; with ``header_names`` (the limit, remaining
    and reset headers'), it carries the rate-limit headers in ``response_headers_to_add``, and
    the answer's metadata, if any, in ``dynamic_metadata``."""
    response = Response(overall_code=Response.OK if answer.code == OK else Response.OVER_LIMIT)
    if answer.metadata is not None:
        response.dynamic_metadata.update(answer.metadata)
    if header_names is not None:
        for key, value in headers_to_add(answer, header_names):
            response.response_headers_to_add.add(key=key, value=value)
    for one in answer.statuses:
        status = response.statuses.add(
            code=Response.OK if one.code == OK else Response.OVER_LIMIT,
            limit_remaining=one.limit_remaining,
        )
        limited = one.current_limit
        if limited is not None:
            status.current_limit.requests_per_unit = min(limited.requests_per_unit, 2**32 - 1)
            status.current_limit.unit = Response.RateLimit.Unit.Value(limited.unit)
            if limited.name:
                status.current_limit.name = limited.name
        reset = one.duration_until_reset
        if reset is not None and isfinite(reset):
            status.duration_until_reset.FromNanoseconds(round(reset * 1e9))
    return response


class RateLimitServicer(rls_pb2_grpc.RateLimitServiceServicer):
    """``ShouldRateLimit`` over ``engine``; each call's time goes to ``metrics``, if given,
    ``in_flight_bound`` (``admission`` before), if given, bounds the calls in flight,
    ``header_names``, if given, name the rate-limit headers each response carries
    (``response_of``), and ``dynamic_metadata`` has each response carry its dynamic
    metadata."""

    @keywords_renamed("RateLimitServicer", {"admission": "in_flight_bound"})
    def __init__(
        self,
        engine: AsyncEngine,
        metrics: Metrics | None = None,
        in_flight_bound: InFlightBound | None = None,
        header_names: tuple[str, str, str] | None = None,
        *,
        dynamic_metadata: bool = False,
    ) -> None:
        self.engine = engine
        self.dynamic_metadata = dynamic_metadata
        self.metrics = metrics
        self._observe = None if metrics is None else metrics.latency_observer("grpc")
        self.in_flight_bound = in_flight_bound
        self.header_names = header_names

    @property
    def admission(self) -> InFlightBound | None:
        """The old name of ``in_flight_bound``; deprecated, removed in 0.3.0."""
        deprecated_name("RateLimitServicer.admission", "RateLimitServicer.in_flight_bound")
        return self.in_flight_bound

    async def ShouldRateLimit(
        self, request: rls_pb2.RateLimitRequest | DecodeError, context: Any
    ) -> rls_pb2.RateLimitResponse:
        if isinstance(request, DecodeError):  # bytes that are no RateLimitRequest (_parse)
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"not a RateLimitRequest: {request}"
            )
            raise request  # abort raises; this line is never reached
        bound = self.in_flight_bound
        if bound is None:
            return await self._decide(request, context)
        if bound.enter("grpc"):
            try:
                return await self._decide(request, context)
            finally:
                bound.leave()
        context.set_trailing_metadata((("retry-after", str(RETRY_AFTER)),))
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"overloaded: {bound.why()}; try again in {RETRY_AFTER} s",
        )
        raise AssertionError("abort raises; this line is never reached")

    async def _decide(
        self, request: rls_pb2.RateLimitRequest, context: Any
    ) -> rls_pb2.RateLimitResponse:
        started = time.perf_counter()
        try:
            found = None if self.dynamic_metadata else hot.arguments(request)
            if found is None:
                answer = await decide_async(
                    self.engine, call_of(request), metadata=self.dynamic_metadata
                )
            else:  # the hot path: decide_async's, less the objects between
                verdict = await self.engine.check(*found)
        except (InvalidInputError, InvalidLimitError) as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            raise  # abort raises; this line is never reached
        except UNAVAILABLE_ERRORS as error:
            _failures.log(
                logging.WARNING, "ShouldRateLimit: %s", error, extra={"domain": request.domain}
            )
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
            raise
        finally:
            if self._observe is not None:
                self._observe(time.perf_counter() - started)
        if found is None:
            return response_of(answer, self.header_names)
        if self.header_names is None:
            return hot.response(verdict)
        return response_of(translate.answer(verdict), self.header_names)


def _parse(data: bytes) -> rls_pb2.RateLimitRequest | DecodeError:
    """The request ``data`` holds, or why it holds none, for ``ShouldRateLimit`` to answer
    ``INVALID_ARGUMENT`` (the generated stub's parser would fail the call as ``UNKNOWN``)."""
    try:
        return rls_pb2.RateLimitRequest.FromString(data)
    except DecodeError as error:  # bad UTF-8 in a string, or bytes that are no message
        return error
