"""Moved to ``ratekeeper.service.observe.metrics``, ``MetricsApp`` to
``ratekeeper.service.observe.exposition``, ``SURFACES`` to ``ratekeeper.service.surfaces`` and
the ASGI types to ``ratekeeper.service.asgi``. This path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.service.asgi import Receive, Scope, Send
from ratekeeper.service.observe.exposition import MetricsApp
from ratekeeper.service.observe.metrics import (
    ALLOWED,
    CONTENT_TYPE,
    DEGRADED,
    LATENCY_BUCKETS,
    LIMITED,
    OTHER,
    SHADOWED,
    UNKNOWN,
    Metrics,
)
from ratekeeper.service.surfaces import SURFACES

__all__ = [
    "ALLOWED",
    "CONTENT_TYPE",
    "DEGRADED",
    "LATENCY_BUCKETS",
    "LIMITED",
    "OTHER",
    "SHADOWED",
    "SURFACES",
    "UNKNOWN",
    "Metrics",
    "MetricsApp",
    "Receive",
    "Scope",
    "Send",
]

moved(
    __name__,
    "ratekeeper.service.observe.metrics and ratekeeper.service.observe.exposition and "
    "ratekeeper.service.surfaces and ratekeeper.service.asgi",
)
