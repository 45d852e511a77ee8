"""Moved to ``ratekeeper.service.runtime.settings``, and the choices and bounds of the values
to ``ratekeeper.service.runtime.values``. This path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.service.runtime.settings import (
    EXAMPLE_RULES,
    IN_MEMORY_CONFIG,
    Settings,
    add_arguments,
)
from ratekeeper.service.runtime.settings import ListenAddress as Address
from ratekeeper.service.runtime.values import (
    CONFIG_SCHEMES,
    ENVOY_HEADER_NAMES,
    LOG_FORMATS,
    LOG_LEVELS,
    MAX_PLAN_CACHE_SIZE,
    MAX_WORKERS,
    POLICIES,
    SERVERS,
    STORE_SCHEMES,
)

__all__ = [
    "CONFIG_SCHEMES",
    "ENVOY_HEADER_NAMES",
    "EXAMPLE_RULES",
    "IN_MEMORY_CONFIG",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MAX_PLAN_CACHE_SIZE",
    "MAX_WORKERS",
    "POLICIES",
    "SERVERS",
    "STORE_SCHEMES",
    "Address",
    "Settings",
    "add_arguments",
]

moved(__name__, "ratekeeper.service.runtime.settings and ratekeeper.service.runtime.values")
