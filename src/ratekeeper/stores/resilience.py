"""Moved to ``ratekeeper.stores.wrappers.resilience``; this path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.stores.wrappers.resilience import (
    POLICIES,
    AsyncResilient,
    Resilient,
    check_instances,
)

__all__ = ["POLICIES", "AsyncResilient", "Resilient", "check_instances"]

moved(__name__, "ratekeeper.stores.wrappers.resilience")
