"""Moved to ``ratekeeper.core.overrides``; ``Override`` also imports from ``ratekeeper``. This
path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.core.overrides import DEFAULT_ALGORITHM, FIELDS, Override

__all__ = ["DEFAULT_ALGORITHM", "FIELDS", "Override"]

moved(__name__, "ratekeeper.core.overrides")
