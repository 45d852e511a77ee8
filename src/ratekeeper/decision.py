"""Moved to ``ratekeeper.core.decisions``; ``Decision`` also imports from ``ratekeeper``. This
path warns, and is removed in 0.3.0."""

from ratekeeper.core.decisions import Decision, allow, deny
from ratekeeper.core.moved import moved

__all__ = ["Decision", "allow", "deny"]

moved(__name__, "ratekeeper.core.decisions")
