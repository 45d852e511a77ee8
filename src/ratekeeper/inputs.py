"""Moved to ``ratekeeper.core.inputs``; this path warns, and is removed in 0.3.0."""

from ratekeeper.core.inputs import (
    MAX_COST,
    check_cost,
    check_hit,
    check_hits,
    check_key,
    check_now,
    check_text,
    decimal,
)
from ratekeeper.core.moved import moved

__all__ = [
    "MAX_COST",
    "check_cost",
    "check_hit",
    "check_hits",
    "check_key",
    "check_now",
    "check_text",
    "decimal",
]

moved(__name__, "ratekeeper.core.inputs")
