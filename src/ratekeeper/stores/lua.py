"""Moved to ``ratekeeper.stores.redis.scripts``; this path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.stores.redis.scripts import (
    BATCH_HEADER,
    DECISION,
    REFUND,
    REFUND_HEADER,
    RELEASE,
    SINGLE,
    SOURCE,
    arguments,
    batch_source,
    decision,
    decisions,
    decisions_at,
    limit_args,
    now_arg,
    released,
)

__all__ = [
    "BATCH_HEADER",
    "DECISION",
    "REFUND",
    "REFUND_HEADER",
    "RELEASE",
    "SINGLE",
    "SOURCE",
    "arguments",
    "batch_source",
    "decision",
    "decisions",
    "decisions_at",
    "limit_args",
    "now_arg",
    "released",
]

moved(__name__, "ratekeeper.stores.redis.scripts")
