"""Moved to ``ratekeeper.cli.commands``; this path warns, and is removed in 0.3.0."""

from ratekeeper.cli.commands import LOOKUPS, config_url, limits, one_line, validate
from ratekeeper.core.moved import moved

__all__ = ["LOOKUPS", "config_url", "limits", "one_line", "validate"]

moved(__name__, "ratekeeper.cli.commands")
