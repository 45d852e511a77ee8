"""Moved to ``ratekeeper.core.redaction``; ``redacted`` also imports from ``ratekeeper.config``.
This path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.core.redaction import redacted

__all__ = ["redacted"]

moved(__name__, "ratekeeper.core.redaction")
