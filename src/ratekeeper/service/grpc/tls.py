"""gRPC over TLS, and mutual TLS, as envoyproxy/ratelimit serves it.

``GrpcTls`` holds the server's certificate and key files, and optionally the CA that client
certificates must be signed by (mTLS: a client without a certificate fails the handshake) and
the SAN they must carry. grpc's Python server verifies the chain but cannot check a name in the
handshake, so the SAN is checked on every call (``SanCheck``, an interceptor in front of the
rate-limit and the health services): a call whose certificate does not carry the name is
answered ``UNAUTHENTICATED`` before it is decided. The reference refuses the same certificate
in the handshake (its ``verifyClient``), which a gRPC client sees as ``UNAVAILABLE``; either
way nothing is decided for it. ``UNAUTHENTICATED`` rather than ``PERMISSION_DENIED``, because
the name is part of what makes the certificate a credential here, as in the reference's check,
and not a permission granted to a known caller.

The name is matched as the reference matches it (Go's ``x509.Certificate.VerifyHostname``): an
IP address against the certificate's IP SANs, any other name against its DNS SANs, without
regard to case, a SAN's leading ``*.`` standing for one label. The common name is not read.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from inspect import isasyncgenfunction
from typing import TYPE_CHECKING, Any

import grpc


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """The files of gRPC's TLS: the server's ``cert`` (its chain) and ``key``; ``client_ca``,
    to require client certificates signed by it; ``client_san``, a name they must carry."""

    cert: str
    key: str
    client_ca: str | None = None
    client_san: str | None = None

    def credentials(self) -> grpc.ServerCredentials:
        """grpc's server credentials of these files, read now."""
        with open(self.cert, "rb") as cert, open(self.key, "rb") as key:
            pair = (key.read(), cert.read())
        root = None
        if self.client_ca is not None:
            with open(self.client_ca, "rb") as ca:
                root = ca.read()
        return grpc.ssl_server_credentials(
            [pair], root_certificates=root, require_client_auth=root is not None
        )

    def interceptors(self) -> tuple[grpc.aio.ServerInterceptor, ...]:
        """The server's interceptors: the SAN check, when a name is required."""
        return () if self.client_san is None else (SanCheck(self.client_san),)

    def __str__(self) -> str:
        """``TLS``, ``mTLS``, or ``mTLS, client SAN NAME``, as the listening line says it."""
        if self.client_ca is None:
            return "TLS"
        return "mTLS" if self.client_san is None else f"mTLS, client SAN {self.client_san}"


def san_matches(name: str, dns_names: Iterable[str], ip_addresses: Iterable[str]) -> bool:
    """Whether a certificate with these SANs is one for ``name`` (an IP address or a DNS
    name), as Go's ``VerifyHostname`` says."""
    try:
        wanted = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        pass
    else:
        return any(_ip(address) == wanted for address in ip_addresses)
    host = name.lower().rstrip(".")
    return any(_dns_matches(pattern.lower().rstrip("."), host) for pattern in dns_names)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _dns_matches(pattern: str, host: str) -> bool:
    if not pattern.startswith("*."):
        return pattern == host
    first, _, rest = host.partition(".")
    return bool(first) and rest == pattern[2:]


def _peer_names(context: grpc.aio.ServicerContext[Any, Any]) -> tuple[list[str], list[str]]:
    """The DNS and IP SANs of the certificate of ``context``'s peer (none without one)."""
    auth = context.auth_context()

    def texts(key: str) -> list[str]:
        return [value.decode(errors="replace") for value in auth.get(key, ())]

    return texts("peer_dns"), texts("peer_ip")


if TYPE_CHECKING:
    _Handler = grpc.RpcMethodHandler[Any, Any]


class SanCheck(grpc.aio.ServerInterceptor):
    """Answers ``UNAUTHENTICATED`` to every call whose client certificate does not carry
    ``name`` among its SANs (``san_matches``), before the service hears of it."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def _check(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        dns_names, ip_addresses = _peer_names(context)
        if not san_matches(self.name, dns_names, ip_addresses):
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"the client certificate does not carry the SAN {self.name}",
            )

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> _Handler | None:
        handler = await continuation(details)
        if handler is None:  # no such method: grpc answers UNIMPLEMENTED
            return None
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # the services here have no other kind of method

    def _unary(self, behaviour: Any) -> Any:
        async def checked(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await self._check(context)
            return await behaviour(request, context)

        return checked

    def _streaming(self, behaviour: Any) -> Any:
        if isasyncgenfunction(behaviour):

            async def generated(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                await self._check(context)
                async for answer in behaviour(request, context):
                    yield answer

            return generated

        async def written(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await self._check(context)
            return await behaviour(request, context)  # it writes with context.write

        return written
