"""The HTTP surface's decisions: ``POST /v1/check``, ``/v1/check/batch`` and ``/v1/peek`` in
ratekeeper's JSON (``ratekeeper.service.http.bodies``), Envoy's ``POST /json`` and nginx's
``GET /v1/nginx``. Each parses its request, has the one engine decide it, and answers with the
rate-limit headers of ``ratekeeper.wire.headers``; a decision made by the store's failure policy
adds ``X-RateLimit-Degraded: true``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import InvalidInputError
from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.engine.verdict import Status, Verdict
from ratekeeper.service.asgi import Receive, Scope
from ratekeeper.service.http import bodies, envoy_json, hot, nginx
from ratekeeper.service.http.reading import (
    MAX_BODY,
    check_length,
    check_media_type,
    read_body,
    read_json,
    receive_body,
)
from ratekeeper.service.http.responses import RawHeaders, json_response
from ratekeeper.wire import translate
from ratekeeper.wire.headers import (
    DEGRADED,
    rate_limit_headers,
    raw_decision_headers,
    raw_rate_limit_headers,
    raw_wire_headers,
)
from ratekeeper.wire.problems import Problem
from ratekeeper.wire.statuses import OK, OVER_LIMIT, WireStatus
from ratekeeper.wire.translate import Answer, Call, decide_async

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine

log = logging.getLogger("ratekeeper.service")
#: nginx misconfigured sends every request so: logged once a minute, with a count.
_refusals = LogThrottle(log)
#: The fewest digits of a ``Content-Length`` over ``MAX_BODY``.
_LENGTH_DIGITS = len(str(MAX_BODY + 1))
_JSON = (b"content-type", b"application/json")
_DEGRADED = (DEGRADED.lower().encode("latin-1"), b"true")


class Checks:
    """The decision routes' handlers over one engine; ``ietf_headers`` adds ``RateLimit`` and
    ``RateLimit-Policy`` to the rate-limit headers; ``envoy_headers`` (the names of the limit,
    remaining and reset headers) puts them in Envoy's ``POST /json`` answers too, as
    ``responseHeadersToAdd``; ``dynamic_metadata`` puts the dynamic metadata there, as
    ``dynamicMetadata``."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        ietf_headers: bool = False,
        envoy_headers: tuple[str, str, str] | None = None,
        dynamic_metadata: bool = False,
    ) -> None:
        self.engine = engine
        self.ietf_headers = ietf_headers
        self.envoy_headers = envoy_headers
        self.dynamic_metadata = dynamic_metadata

    async def _decide(self, check: bodies.Check) -> Decision | Answer:
        engine = self.engine
        if isinstance(check, Call):
            return await decide_async(engine, check)
        if check.limit is None:
            return await engine.decide(check.key, check.cost)
        return await engine.hit(check.key, check.limit, check.cost)

    async def _look(self, check: bodies.Check) -> Decision | Answer:
        if isinstance(check, Call):
            return await decide_async(self.engine, check)
        return await self.engine.peek(check.key, check.limit)

    def _statuses(
        self, outcome: Decision | Answer, check: bodies.Check | hot.Key | hot.Bare
    ) -> tuple[WireStatus | Status | Decision, ...]:
        """What the rate-limit headers of ``outcome`` describe."""
        if isinstance(outcome, Answer):
            return outcome.statuses
        if isinstance(check, hot.Key | bodies.KeyCheck) and check.limit is not None:  # window known
            return (Status(outcome.allowed, outcome, check.limit, None, False, False),)
        return (outcome,)

    def _headers(self, outcome: Decision | Answer, check: bodies.Check) -> dict[str, str]:
        headers = rate_limit_headers(self._statuses(outcome, check), ietf=self.ietf_headers)
        if outcome.degraded:
            headers[DEGRADED] = "true"
        return headers

    async def check(self, request: Request) -> Response:
        """``POST /v1/check``: 200 when allowed, 429 when refused."""
        check = bodies.check(await read_json(request))
        outcome = await self._decide(check)
        body = bodies.result(outcome)
        return json_response(body, 200 if body["allowed"] else 429, self._headers(outcome, check))

    async def check_raw(self, scope: Scope, receive: Receive) -> tuple[int, RawHeaders, bytes]:
        """``POST /v1/check`` on the bare ASGI interface: its status, headers and body, as
        ``check`` answers them, less Starlette's request and response objects (and, by
        ``service.http.hot``, less the dicts between the JSON and the engine)."""
        content_type = length = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"content-length":
                length = value
        if content_type is not None and content_type != b"application/json":
            check_media_type(content_type.decode("latin-1"))
        if length is not None and len(length) >= _LENGTH_DIGITS:  # else under MAX_BODY
            check_length(length, MAX_BODY)
        check = hot.parse(await receive_body(receive, MAX_BODY))
        engine = self.engine
        if isinstance(check, hot.Bare):
            verdict = await engine.check(check.domain, check.descriptors, check.hits)
            if len(verdict.statuses) == 1 and not self.ietf_headers:
                return self._one_status(verdict)
            outcome: Decision | Answer = translate.answer(verdict)
        elif isinstance(check, hot.Key):  # _decide, one call less
            limit = check.limit
            if limit is None:
                outcome = await engine.decide(check.key, check.cost)
            else:
                outcome = await engine.hit(check.key, limit, check.cost)
        else:
            outcome = await self._decide(check)
        payload = hot.answer(outcome)
        headers = [_JSON, (b"content-length", b"%d" % len(payload))]
        if type(outcome) is Decision and not self.ietf_headers:
            given = isinstance(check, hot.Key | bodies.KeyCheck) and check.limit is not None
            headers += raw_decision_headers(outcome, given=given)
            allowed = outcome.allowed
        else:
            statuses = self._statuses(outcome, check)
            headers += raw_rate_limit_headers(statuses, ietf=self.ietf_headers)
            allowed = outcome.code == OK if isinstance(outcome, Answer) else outcome.allowed
        if outcome.degraded:
            headers.append(_DEGRADED)
        return 200 if allowed else 429, headers, payload

    @staticmethod
    def _one_status(verdict: Verdict) -> tuple[int, RawHeaders, bytes]:
        """The answer of a verdict of one status, without the IETF fields: as ``check_raw``
        answers its ``translate.answer``, less the objects between."""
        allowed, degraded = verdict.allowed, verdict.degraded
        status = translate.fields(verdict.statuses[0])
        payload = hot.answer_of(allowed, degraded, status)
        code, limited, remaining, reset, retry_after = status
        amount = None if limited is None else limited[0]
        headers = [_JSON, (b"content-length", b"%d" % len(payload))]
        headers += raw_wire_headers(code, amount, remaining, reset, retry_after)
        if degraded:
            headers.append(_DEGRADED)
        return 200 if allowed else 429, headers, payload

    async def batch(self, request: Request) -> Response:
        """``POST /v1/check/batch``: every check parsed before any is counted; 200."""
        checks = bodies.batch(await read_json(request))
        outcomes = [await self._decide(one) for one in checks]
        results = [bodies.result(one) for one in outcomes]
        headers = {DEGRADED: "true"} if any(one.degraded for one in outcomes) else {}
        allowed = all(one["allowed"] for one in results)
        return json_response({"allowed": allowed, "results": results}, 200, headers)

    async def peek(self, request: Request) -> Response:
        """``POST /v1/peek``: a check that counts nothing; 200."""
        check = bodies.check(await read_json(request), looks=True)
        outcome = await self._look(check)
        return json_response(bodies.result(outcome), 200, self._headers(outcome, check))

    # Envoy's and nginx's.

    async def envoy_json(self, request: Request) -> Response:
        """``POST /json``: 200, 429 or 400 ``Bad Request``, as Envoy's service answers."""
        try:
            call = envoy_json.request(bodies.loads(await read_body(request)))
            answer = await decide_async(self.engine, call, metadata=self.dynamic_metadata)
        except (Problem, InvalidInputError):  # a store's failure is answered as the API's
            return PlainTextResponse("Bad Request\n", 400)
        status = 429 if answer.code == OVER_LIMIT else 200
        headers = {DEGRADED: "true"} if answer.degraded else None
        return json_response(envoy_json.response(answer, self.envoy_headers), status, headers)

    async def nginx(self, request: Request) -> Response:
        """``GET /v1/nginx``: nginx's ``auth_request``. Only 200 (let through) or 403 (refused),
        with the rate-limit headers; a request nginx could not describe is refused too, so that
        nginx never turns the answer into a 500 (see ``service.http.nginx``). A store that fails
        is a 503, as elsewhere: nginx's failure mode (``@fail_open`` in the shipped file)
        decides."""
        try:
            answer = await decide_async(self.engine, nginx.call_of(request.headers))
        except InvalidInputError as error:  # a store's failure is a 503: nginx's to answer
            _refusals.log(logging.WARNING, "nginx auth_request refused: %s", error)
            return Response(status_code=nginx.REFUSED, headers={"X-RateLimit-Problem": "invalid"})
        headers = rate_limit_headers(answer.statuses, ietf=self.ietf_headers)
        if answer.degraded:
            headers[DEGRADED] = "true"
        return Response(status_code=nginx.status_of(answer), headers=headers)
