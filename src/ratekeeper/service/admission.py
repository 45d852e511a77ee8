"""Moved to ``ratekeeper.service.inflight``, where ``Admission`` is ``InFlightBound``. This
path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.service.inflight import (
    DEFAULT_MAX_IN_FLIGHT,
    MOST_IN_FLIGHT,
    QUIET,
    RETRY_AFTER,
    check_limit,
)
from ratekeeper.service.inflight import InFlightBound as Admission

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "MOST_IN_FLIGHT",
    "QUIET",
    "RETRY_AFTER",
    "Admission",
    "check_limit",
]

moved(__name__, "ratekeeper.service.inflight")
