"""Counts in messages, as a person writes them: ``1 rule``, ``2 rules``, ``1,000 keys``, and the
verb that agrees with them: ``1 path holds``, ``2 paths hold``."""

from __future__ import annotations


def many(count: int, thing: str, things: str | None = None) -> str:
    """``count`` and ``thing``, in the plural unless ``count`` is 1: ``many(1, "rule")`` is
    ``"1 rule"``, ``many(2, "rule")`` ``"2 rules"``, ``many(1_000, "key")`` ``"1,000 keys"``;
    ``things`` is the plural when it is not ``thing`` plus ``s`` (``many(2, "entry",
    "entries")``)."""
    return f"{count:,} {thing if count == 1 else things or thing + 's'}"


def agreeing(count: int, one: str, more: str) -> str:
    """The form of a verb whose subject counts ``count``: ``one`` when ``count`` is 1, else
    ``more``; ``agreeing(1, "holds", "hold")`` is ``"holds"``, ``agreeing(2, "holds", "hold")``
    ``"hold"``."""
    return one if count == 1 else more
