"""Moved to ``ratekeeper.core.errors``; every exception but ``TraceError`` also imports from
``ratekeeper``. This path warns, and is removed in 0.3.0."""

from ratekeeper.core.errors import (
    ConfigError,
    ConfigStoreError,
    InvalidInputError,
    InvalidLimitError,
    MissingExtraError,
    RatekeeperError,
    RateLimitExceeded,
    StoreConfigError,
    StoreError,
    TraceError,
)
from ratekeeper.core.moved import moved

__all__ = [
    "ConfigError",
    "ConfigStoreError",
    "InvalidInputError",
    "InvalidLimitError",
    "MissingExtraError",
    "RateLimitExceeded",
    "RatekeeperError",
    "StoreConfigError",
    "StoreError",
    "TraceError",
]

moved(__name__, "ratekeeper.core.errors")
