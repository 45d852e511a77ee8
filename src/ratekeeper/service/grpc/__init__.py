"""The decision service's gRPC door: Envoy's rate-limit protocol and the standard health
service.

``servicer`` translates ``ShouldRateLimit`` to the engine and back (``hot``: the same, in
fewer steps, for the requests gateways send); ``aio`` serves it, and the health service, on
grpc.aio (``serve_grpc``); ``asgi`` answers the same methods as a raw ASGI app, for an ASGI
server that speaks HTTP/2 (pyvoy), each call's ``grpc-timeout`` kept by ``deadlines``. The
generated protocol modules are ``ratekeeper.service.proto``.
"""

from ratekeeper.service.grpc.aio import serve_grpc
from ratekeeper.service.grpc.servicer import (
    HEALTH_NAMES,
    SERVICE,
    RateLimitServicer,
    call_of,
    response_of,
)

__all__ = ["HEALTH_NAMES", "SERVICE", "RateLimitServicer", "call_of", "response_of", "serve_grpc"]
