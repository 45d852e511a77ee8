"""Moved to ``ratekeeper.stores.wrappers.leasing``; this path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.stores.wrappers.leasing import (
    HORIZON,
    SHARE,
    TTL,
    AsyncLeasing,
    Leasing,
    check_options,
)

__all__ = ["HORIZON", "SHARE", "TTL", "AsyncLeasing", "Leasing", "check_options"]

moved(__name__, "ratekeeper.stores.wrappers.leasing")
