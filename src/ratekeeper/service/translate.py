"""Moved to ``ratekeeper.wire.translate``; the statuses it also gave (``OK``, ``OVER_LIMIT``,
``Limited``, ``WireStatus``) are ``ratekeeper.wire.statuses``'. This path warns, and is removed
in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.wire.statuses import OK, OVER_LIMIT, Limited, WireStatus
from ratekeeper.wire.translate import (
    MAX_REMAINING,
    UNIT_OF_PERIOD,
    Answer,
    Call,
    Fields,
    WireDescriptor,
    answer,
    arguments,
    costs,
    decide,
    decide_async,
    descriptors,
    fields,
    headers_to_add,
    sent_limit,
)

__all__ = [
    "MAX_REMAINING",
    "OK",
    "OVER_LIMIT",
    "UNIT_OF_PERIOD",
    "Answer",
    "Call",
    "Fields",
    "Limited",
    "WireDescriptor",
    "WireStatus",
    "answer",
    "arguments",
    "costs",
    "decide",
    "decide_async",
    "descriptors",
    "fields",
    "headers_to_add",
    "sent_limit",
]

moved(__name__, "ratekeeper.wire.translate and ratekeeper.wire.statuses")
