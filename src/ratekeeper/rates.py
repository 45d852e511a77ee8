"""Moved to ``ratekeeper.core.rates``, and ``parse_period`` to ``ratekeeper.core.periods``;
``parse``, ``parse_many`` and ``parse_period`` also import from ``ratekeeper``. This path warns,
and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.core.periods import parse_period
from ratekeeper.core.rates import cached, parse, parse_many

__all__ = ["cached", "parse", "parse_many", "parse_period"]

moved(__name__, "ratekeeper.core.rates and ratekeeper.core.periods")
