"""What a loaded rule file holds: rules, and the descriptor tree that ``match`` walks.

The tree is built once by the loader and never changed afterwards, so it can be read from any
number of threads without locks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ratekeeper.limit import Limit
from ratekeeper.rates import parse_period

#: Envoy's units and their lengths in seconds, as rate strings count them (a month is 30 days,
#: a year 365 days), so a rule's ``unit: month`` and an override's ``"1 month"`` agree.
UNITS: dict[str, float] = {
    name: parse_period(name)
    for name in ("second", "minute", "hour", "day", "week", "month", "year")
}


@dataclass(frozen=True, slots=True)
class Rule:
    """One descriptor's ``rate_limit``, loaded.

    ``path`` identifies the descriptor within its domain: one ``key=value`` (or bare ``key``)
    per level, joined by ``/``, e.g. ``"generic_key=default/user"``; ``%``, ``/`` and ``=``
    inside keys and values are percent-escaped so that paths stay unique. ``limit`` is ``None``
    exactly when ``unlimited`` is true, and ``requests_per_unit`` is then 0. ``unit`` is the
    Envoy unit name when the rule gave one, ``None`` when it gave a ``period`` instead.
    """

    domain: str
    path: str
    limit: Limit | None
    unlimited: bool
    name: str | None
    replaces: tuple[str, ...]
    shadow_mode: bool
    detailed_metric: bool
    unit: str | None
    requests_per_unit: int


class Descriptor:
    """A node of the tree: the descriptor's rule (if any) and the level below it."""

    __slots__ = ("children", "rule")

    def __init__(self, rule: Rule | None, children: Level) -> None:
        self.rule = rule
        self.children = children


class KeyGroup:
    """The descriptors of one level that share a key.

    ``exact`` maps a literal value to its descriptor; ``wildcards`` holds the values with ``*``
    as (test, descriptor) pairs in file order; ``bare`` is the descriptor without a value.
    """

    __slots__ = ("bare", "exact", "wildcards")

    def __init__(self) -> None:
        self.exact: dict[str, Descriptor] = {}
        self.wildcards: tuple[tuple[Callable[[str], object], Descriptor], ...] = ()
        self.bare: Descriptor | None = None


#: One level of the tree: the key groups by key.
Level = dict[str, KeyGroup]


def wildcard_test(pattern: str) -> Callable[[str], object]:
    """Return a function whose result is truthy when a value matches ``pattern``.

    Each ``*`` matches zero or more characters; every other character matches itself.
    """
    parts = pattern.split("*")
    if len(parts) == 2 and not parts[1]:
        return _startswith(parts[0])
    regex = re.compile(".*".join(re.escape(part) for part in parts), re.DOTALL)
    return regex.fullmatch


def _startswith(prefix: str) -> Callable[[str], bool]:
    def test(value: str) -> bool:
        return value.startswith(prefix)

    return test


def path_part(key: str, value: str | None) -> str:
    """One level of a ``Rule.path``: ``key=value``, or ``key`` when there is no value."""
    key = _escape(key)
    return key if value is None else f"{key}={_escape(value)}"


def _escape(text: str) -> str:
    if "%" in text or "/" in text or "=" in text:
        return text.replace("%", "%25").replace("/", "%2F").replace("=", "%3D")
    return text
