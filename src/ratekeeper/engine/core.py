"""Moved: ``Engine`` and ``AsyncEngine`` import from ``ratekeeper.engine`` (or ``ratekeeper``).
This path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.engine import AsyncEngine, Engine

__all__ = ["AsyncEngine", "Engine"]

moved(__name__, "ratekeeper.engine")
