"""Moved to ``ratekeeper.core.limits``; ``Limit`` also imports from ``ratekeeper``. This path
warns, and is removed in 0.3.0."""

from ratekeeper.core.limits import (
    CALENDAR_PERIODS,
    MAX_AMOUNT,
    MAX_BUCKETS,
    MAX_PERIOD,
    MIN_PERIOD,
    Limit,
    algorithm_of,
)
from ratekeeper.core.moved import moved

__all__ = [
    "CALENDAR_PERIODS",
    "MAX_AMOUNT",
    "MAX_BUCKETS",
    "MAX_PERIOD",
    "MIN_PERIOD",
    "Limit",
    "algorithm_of",
]

moved(__name__, "ratekeeper.core.limits")
