"""What a loaded rule file holds: rules, and the descriptor tree that ``match`` walks.

The tree is built once by the loader and never changed afterwards, so it can be read from any
number of threads without locks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ratekeeper.core.limits import Limit
from ratekeeper.core.networks import Prefixes
from ratekeeper.core.periods import parse_period

#: Envoy's units and their lengths in seconds, as rate strings count them (a month is 30 days,
#: a year 365 days), so a rule's ``unit: month`` and an override's ``"1 month"`` agree.
UNITS: dict[str, float] = {
    name: parse_period(name)
    for name in ("second", "minute", "hour", "day", "week", "month", "year")
}

#: One descriptor entry: ``(key, value)``, e.g. ``("remote_address", "10.0.0.1")``.
Entry = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Rule:
    """One descriptor's ``rate_limit``, loaded.

    ``path`` identifies the descriptor within its domain: one ``key=value`` (or bare ``key``)
    per level, joined by ``/``, e.g. ``"generic_key=default/user"``; ``%``, ``/`` and ``=``
    inside keys and values are percent-escaped so that paths stay unique. ``unit`` is the
    Envoy unit name when the rule gave one, ``None`` when it gave a ``period`` instead (or is
    ``unlimited``).

    ``limit`` is ``None`` in two cases: ``unlimited`` (every hit allowed, never counted) and
    ``requests_per_unit: 0``, which Envoy treats as always over the limit: every hit is refused,
    never counted (``always_over``). ``requests_per_unit`` is 0 in both.

    ``quota_mode``: a request is refused by this rule's descriptors only when every quota-mode
    descriptor of the request is over its limit. ``metadata`` is the descriptor's ``metadata``
    mapping as written (Envoy returns it with the response); ``detailed_metric`` is carried
    for statistics. Neither changes a decision.
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
    quota_mode: bool = False
    metadata: dict[str, Any] | None = field(default=None, hash=False)

    @property
    def always_over(self) -> bool:
        """True for ``requests_per_unit: 0``: every hit is refused without being counted."""
        return self.limit is None and not self.unlimited


class RuleNode:
    """A node of the tree: the descriptor's rule (if any) and the level below it.

    ``shared`` is the descriptor's composed key (``key_value``) when it is a wildcard with
    ``share_threshold``: every value it matches counts under that one pattern. ``prefixes``
    are the address blocks of a descriptor with ``ipv4_prefix`` or ``ipv6_prefix``: a value it
    matches counts under ``prefixes.key(value)``, its address's block. ``source`` and ``where``
    name the file and the path inside it that defined the descriptor. ``value_to_metric``:
    the statistics of a rule below name this level by the request's value (``stat_keys``).
    """

    __slots__ = ("children", "prefixes", "rule", "shared", "source", "value_to_metric", "where")

    def __init__(  # noqa: PLR0917 - built in one place, the schema's walker
        self,
        rule: Rule | None,
        children: Level,
        shared: str | None,
        source: str,
        where: str,
        prefixes: Prefixes | None = None,
    ) -> None:
        self.rule = rule
        self.children = children
        self.shared = shared
        self.source = source
        self.where = where
        self.prefixes = prefixes
        self.value_to_metric = False


class Level:
    """One level of the tree, keyed as Envoy's rate-limit service keys it.

    ``nodes`` maps each descriptor's composed key to it: ``key_value``, or ``key`` for a
    descriptor without a value. ``wildcards`` holds the descriptors whose composed key has a
    ``*``, as (test, descriptor) pairs in file order; each test takes a request entry's
    composed ``key_value``.
    """

    __slots__ = ("nodes", "wildcards")

    def __init__(self) -> None:
        self.nodes: dict[str, RuleNode] = {}
        self.wildcards: list[tuple[Callable[[str], bool], RuleNode]] = []

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)


def composed(key: str, value: str | None) -> str:
    """A descriptor's key in its level, as Envoy composes it: ``key_value``, or ``key``."""
    return key if value is None else f"{key}_{value}"


def wildcard_test(pattern: str) -> Callable[[str], bool]:
    """Return a function telling whether a text matches ``pattern``.

    Each ``*`` matches zero or more characters; every other character matches itself. This is
    the matcher of Envoy's rate-limit service: the text must start with the part before the
    first ``*`` and end with the part after the last, and the parts between must appear in
    order in what lies between. Linear in the text; no backtracking.
    """
    parts = pattern.split("*")
    first, last = parts[0], parts[-1]
    if len(parts) == 1:
        return pattern.__eq__
    if len(parts) == 2 and not last:
        return _startswith(first)
    middle = [part for part in parts[1:-1] if part]
    fixed = sum(map(len, parts))

    def test(text: str) -> bool:
        if len(text) < fixed or not text.startswith(first) or not text.endswith(last):
            return False
        position, end = len(first), len(text) - len(last)
        for part in middle:
            found = text.find(part, position, end)
            if found < 0:
                return False
            position = found + len(part)
        return True

    return test


def _startswith(prefix: str) -> Callable[[str], bool]:
    def test(text: str) -> bool:
        return text.startswith(prefix)

    return test


def path_part(key: str, value: str | None) -> str:
    """One level of a ``Rule.path``: ``key=value``, or ``key`` when there is no value."""
    key = _escape(key)
    return key if value is None else f"{key}={_escape(value)}"


def _escape(text: str) -> str:
    if "%" in text or "/" in text or "=" in text:
        return text.replace("%", "%25").replace("/", "%2F").replace("=", "%3D")
    return text
