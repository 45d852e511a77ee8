"""Envoy's rate-limit protocol and the standard health service as a raw ASGI app, for an ASGI
server that speaks HTTP/2 and sends trailers (``http.response.trailers``), such as pyvoy.

``GrpcApp`` answers what ``grpc.aio`` answers for ``serve_grpc`` (``ratekeeper.service.grpc``),
with the same ``RateLimitServicer``: it routes by path, reads the one length-prefixed message
of the request's body, and answers 200 ``application/grpc``, the length-prefixed response, and
``grpc-status``, ``grpc-message`` (percent-encoded) and the trailing metadata in the HTTP/2
trailers. The methods:

- ``/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit``: the servicer's, bytes that
  are no ``RateLimitRequest`` ``INVALID_ARGUMENT``;
- ``/grpc.health.v1.Health/Check``: ``SERVING`` for each of ``HEALTH_NAMES`` (for those of
  ``FOLLOWING``, ``NOT_SERVING`` while the service's health check fails), ``NOT_FOUND`` for
  any other name;
- ``/grpc.health.v1.Health/Watch``: the status once (``SERVICE_UNKNOWN`` for another name),
  then the stream stays open, as grpcio's health servicer keeps it, until the client leaves
  (a later change of a followed status is not sent on it);
- any other path: ``UNIMPLEMENTED``.

A compressed message (its flag set; ``grpc-encoding`` other than ``identity``) is answered
``UNIMPLEMENTED``, with ``grpc-accept-encoding: identity`` (Envoy compresses none); a message
over ``MAX_MESSAGE`` bytes (grpc.aio's default bound, 4 MiB) ``RESOURCE_EXHAUSTED``, read no
further; a body that is not one whole message ``INTERNAL``. A ``grpc-timeout`` bounds the call
as grpc.aio bounds it: past it the decision is cancelled and the answer is
``DEADLINE_EXCEEDED``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2

from ratekeeper.service.asgi import Receive, Scope, Send
from ratekeeper.service.grpc.deadlines import Deadlines
from ratekeeper.service.grpc.servicer import FOLLOWING, HEALTH_NAMES, SERVICE, _parse

if TYPE_CHECKING:
    from ratekeeper.service.grpc.servicer import RateLimitServicer
    from ratekeeper.service.healthcheck import HealthCheck
    from ratekeeper.service.observe.access import AccessLog
    from ratekeeper.service.observe.tracing import Tracing

log = logging.getLogger("ratekeeper.service")

#: The largest request message taken, in bytes: grpc.aio's default bound.
MAX_MESSAGE = 4 * 1024 * 1024
SHOULD_RATE_LIMIT = f"/{SERVICE}/ShouldRateLimit"
CHECK = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"

_GRPC = (b"content-type", b"application/grpc")
_START = {"type": "http.response.start", "status": 200, "headers": [_GRPC], "trailers": True}
#: The start of the answer refusing a compressed message.
_IDENTITY_ONLY = {**_START, "headers": [_GRPC, (b"grpc-accept-encoding", b"identity")]}
#: What ``grpc-message`` may hold as it is: printable ASCII but ``%`` (the gRPC spec).
_SAFE = "".join(chr(code) for code in range(0x20, 0x7F) if chr(code) != "%")
#: ``grpc-timeout``'s units, in seconds.
_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_Health = health_pb2.HealthCheckResponse


class Aborted(Exception):
    """A call ended with a status other than OK (``Context.abort``)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, details)
        self.code = code
        self.details = details


class Context:
    """What ``RateLimitServicer``, ``AccessLog.grpc`` and ``Tracing.grpc`` use of grpc.aio's
    servicer context: ``abort`` raises ``Aborted``, ``set_trailing_metadata`` keeps the
    trailers, ``code`` is the status the call was aborted with (None until then),
    ``invocation_metadata`` the request's ``headers`` (an ASGI scope's) as gRPC metadata."""

    __slots__ = ("_code", "_headers", "trailing")

    def __init__(self, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self._code: grpc.StatusCode | None = None
        self._headers = headers
        self.trailing: tuple[tuple[str, str], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return tuple(
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in self._headers
            if not name.startswith(b":")
        )

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        self._code = code
        raise Aborted(code, details)

    def set_trailing_metadata(self, metadata: Iterable[tuple[str, str]]) -> None:
        self.trailing = tuple(metadata)

    def code(self) -> grpc.StatusCode | None:
        return self._code


def frame(message: bytes) -> bytes:
    """``message`` length-prefixed: the uncompressed flag and its 4-byte big-endian length."""
    return struct.pack(">BI", 0, len(message)) + message


def trailers(
    code: grpc.StatusCode, details: str = "", metadata: Iterable[tuple[str, str]] = ()
) -> dict[str, Any]:
    """The trailers message of a call ending with ``code``: ``grpc-status``, ``grpc-message``
    (percent-encoded) when there are ``details``, and ``metadata``."""
    headers = [(b"grpc-status", b"%d" % code.value[0])]
    if details:
        headers.append((b"grpc-message", quote(details, safe=_SAFE).encode("ascii")))
    headers += [(key.encode("ascii"), value.encode("ascii")) for key, value in metadata]
    return {"type": "http.response.trailers", "headers": headers, "more_trailers": False}


@functools.lru_cache(maxsize=64)  # a gateway sends the same value with every call
def timeout_of(value: bytes) -> float | None:
    """The seconds a ``grpc-timeout`` value (``100m``: up to 8 digits and a unit) allows; None
    for a value that is none."""
    digits, unit = value[:-1], _UNITS.get(value[-1:].decode("latin-1"))
    if unit is None or not 1 <= len(digits) <= 8 or not digits.isdigit():
        return None
    return int(digits) * unit


#: The trailers of a call that ends well, with no metadata.
_OK = trailers(grpc.StatusCode.OK)


class _Refused(Exception):
    """The request's body is no message this app takes: the status to answer."""

    def __init__(self, code: grpc.StatusCode, details: str, start: dict[str, Any]) -> None:
        super().__init__(code, details)
        self.code, self.details, self.start = code, details, start


async def read_message(receive: Receive, encoding: bytes) -> bytes | None:
    """The one message of the request's body (None if the client left first); ``_Refused`` if
    it is compressed, larger than ``MAX_MESSAGE``, or not one whole message."""
    received = await receive()
    if received["type"] == "http.request" and not received.get("more_body", False):
        whole = received.get("body", b"")  # a unary call's body, as gateways send it
        size = len(whole) - 5
        if whole[:1] == b"\x00" and int.from_bytes(whole[1:5], "big") == size <= MAX_MESSAGE:
            return bytes(whole[5:])
    body = bytearray()
    while True:
        if received["type"] == "http.disconnect":
            return None  # nobody to answer
        body += received.get("body", b"")
        more = received.get("more_body", False)
        if len(body) >= 5:
            if body[0] != 0:
                named = encoding.decode("latin-1") or "no grpc-encoding"
                raise _Refused(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"compressed messages are not taken ({named}); send them uncompressed",
                    _IDENTITY_ONLY,
                )
            length = int.from_bytes(body[1:5], "big")
            if length > MAX_MESSAGE:
                raise _Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"Received message larger than max ({length} vs. {MAX_MESSAGE})",
                    _START,
                )
            if len(body) > 5 + length:
                break
        if not more:
            break
        received = await receive()
    if len(body) < 5 or len(body) != 5 + int.from_bytes(body[1:5], "big"):
        raise _Refused(
            grpc.StatusCode.INTERNAL, "the request's body is not one whole gRPC message", _START
        )
    return bytes(body[5:])


class GrpcApp:
    """The gRPC methods of the module over ``servicer``, each ``ShouldRateLimit`` call logged
    by ``access_log`` and traced by ``tracing``, if given, the health of ``FOLLOWING``
    following ``health_check``, if given. An ASGI app for ``http`` scopes; the lifespan is the
    HTTP app's (``ratekeeper.service.runtime.pyvoy_app`` runs both)."""

    def __init__(
        self,
        servicer: RateLimitServicer,
        access_log: AccessLog | None = None,
        tracing: Tracing | None = None,
        health_check: HealthCheck | None = None,
    ) -> None:
        method: Callable[[Any, Any], Awaitable[Any]] = servicer.ShouldRateLimit
        if access_log is not None:
            method = access_log.grpc(method)
        if tracing is not None:
            method = tracing.grpc(method)
        self._method = method
        self._deadlines = Deadlines()
        self._statuses: dict[str, int] = dict.fromkeys(HEALTH_NAMES, _Health.SERVING)
        if health_check is not None:
            health_check.listeners.append(self._follow)
            self._set(health_check.healthy)

    async def _follow(self, healthy: bool) -> None:
        self._set(healthy)

    def _set(self, healthy: bool) -> None:
        for name in FOLLOWING:
            self._statuses[name] = _Health.SERVING if healthy else _Health.NOT_SERVING

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        encoding, timeout = b"", None
        for name, value in scope["headers"]:
            if name == b"grpc-encoding" and value != b"identity":
                encoding = value
            elif name == b"grpc-timeout":
                timeout = timeout_of(value)
        path = scope["path"]
        try:
            data = await read_message(receive, encoding)
        except _Refused as refused:
            await send(refused.start)
            await send({"type": "http.response.body", "body": b""})
            await send(trailers(refused.code, refused.details))
            return
        if data is None:
            return
        if path == SHOULD_RATE_LIMIT:
            await self._should_rate_limit(data, timeout, send, scope["headers"])
        elif path == CHECK:
            await self._check(data, send)
        elif path == WATCH:
            await self._watch(data, receive, send)
        else:
            await _answer(send, None, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    async def _should_rate_limit(
        self,
        data: bytes,
        timeout: float | None,
        send: Send,
        headers: Iterable[tuple[bytes, bytes]],
    ) -> None:
        context = Context(headers)
        deadline = None if timeout is None else self._deadlines.start(timeout)
        try:
            try:
                response = await self._method(_parse(data), context)
            finally:
                if deadline is not None:
                    self._deadlines.end(deadline)
                    if deadline.expired:  # its cancellation is over, as asyncio.timeout's
                        deadline.task.uncancel()
        except Aborted as aborted:
            await _answer(send, None, aborted.code, aborted.details, context.trailing)
            return
        except (Exception, asyncio.CancelledError) as error:
            if deadline is not None and deadline.expired:
                if (
                    isinstance(error, asyncio.CancelledError)
                    and deadline.task.cancelling() > deadline.cancelling
                ):
                    raise  # cancelled from elsewhere too (the server stopping)
                await _answer(send, None, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
                return
            if isinstance(error, asyncio.CancelledError):
                raise
            # what grpc.aio answers a servicer that fails unexpectedly
            log.exception("ShouldRateLimit failed")
            details = f"Unexpected {type(error)}: {error}"
            await _answer(send, None, grpc.StatusCode.UNKNOWN, details)
            return
        await _answer(send, response.SerializeToString(), grpc.StatusCode.OK, "", context.trailing)

    def _status(self, data: bytes) -> tuple[str, int] | None:
        try:
            service = health_pb2.HealthCheckRequest.FromString(data).service
        except DecodeError:
            return None
        return service, self._statuses.get(service, _Health.SERVICE_UNKNOWN)

    async def _check(self, data: bytes, send: Send) -> None:
        found = self._status(data)
        if found is None:
            await _answer(send, None, grpc.StatusCode.INVALID_ARGUMENT, "not a HealthCheckRequest")
        elif found[1] == _Health.SERVICE_UNKNOWN:
            await _answer(send, None, grpc.StatusCode.NOT_FOUND, f"unknown service {found[0]!r}")
        else:
            await _answer(send, _Health(status=found[1]).SerializeToString(), grpc.StatusCode.OK)

    async def _watch(self, data: bytes, receive: Receive, send: Send) -> None:
        found = self._status(data)
        if found is None:
            await _answer(send, None, grpc.StatusCode.INVALID_ARGUMENT, "not a HealthCheckRequest")
            return
        await send(_START)
        message = frame(_Health(status=found[1]).SerializeToString())
        await send({"type": "http.response.body", "body": message, "more_body": True})
        # The stream stays open, sending nothing more (a followed status's change included),
        # until the client leaves (or the server stops).
        while (await receive())["type"] != "http.disconnect":
            pass


async def _answer(
    send: Send,
    message: bytes | None,
    code: grpc.StatusCode,
    details: str = "",
    metadata: Iterable[tuple[str, str]] = (),
) -> None:
    """A unary call's answer: ``message``, if any, then the trailers."""
    await send(_START)
    body = b"" if message is None else frame(message)
    await send({"type": "http.response.body", "body": body})
    ok = code is grpc.StatusCode.OK and not details and not metadata
    await send(_OK if ok else trailers(code, details, metadata))
