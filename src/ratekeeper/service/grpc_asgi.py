"""Moved to ``ratekeeper.service.grpc.asgi``, and the ASGI types to ``ratekeeper.service.asgi``.
This path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.service.asgi import Receive, Scope, Send
from ratekeeper.service.grpc.asgi import (
    CHECK,
    MAX_MESSAGE,
    SHOULD_RATE_LIMIT,
    WATCH,
    Aborted,
    Context,
    GrpcApp,
    frame,
    read_message,
    timeout_of,
    trailers,
)

__all__ = [
    "CHECK",
    "MAX_MESSAGE",
    "SHOULD_RATE_LIMIT",
    "WATCH",
    "Aborted",
    "Context",
    "GrpcApp",
    "Receive",
    "Scope",
    "Send",
    "frame",
    "read_message",
    "timeout_of",
    "trailers",
]

moved(__name__, "ratekeeper.service.grpc.asgi and ratekeeper.service.asgi")
