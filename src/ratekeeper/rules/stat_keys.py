"""The name envoyproxy/ratelimit gives a descriptor's statistics: ``<domain>.<key…>``.

Envoy's reference service counts each rule's hits under a key built as it matches the
descriptor (``src/config/config_impl.go``, ``GetLimit``), and its statistics are named
``ratelimit.service.rate_limit.<key>.total_hits`` and so on. ``stat_key`` builds the same key
from a rule set and a request descriptor:

- by default, the rule's place in its file: ``domain.key1_value1.key2`` (one ``key_value``,
  or bare ``key``, per level, as the file composes it; a wildcard as written, ``path_foo*``);
- ``value_to_metric`` on a level: the request's value stands there (``key2_bob``) where the
  level matched the bare key or a wildcard;
- ``detailed_metric`` on the rule: every level is the request's ``key_value`` (``key_`` for an
  empty value), except the levels a ``share_threshold`` wildcard matched, which keep their
  pattern.

``sent_key`` is the key of a descriptor that came with its own limit (Envoy's
``RateLimitOverride``). Both are ``sanitized`` as the reference's statistics are: ``:`` and
``|`` become ``_``, and so do the dots of an IPv4 address. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import unquote

from ratekeeper.rules.matching import RuleSet
from ratekeeper.rules.model import Entry, Level, Rule, RuleNode

__all__ = ["rule_key", "sanitized", "sent_key", "stat_key"]

_IPV4 = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}")
_SEPARATORS = str.maketrans({":": "_", "|": "_"})


def sanitized(name: str) -> str:
    """``name`` as the reference writes a statistic's name (``utils.SanitizeStatName``)."""
    name = name.translate(_SEPARATORS)
    if "." in name:
        name = _IPV4.sub(lambda found: found.group().replace(".", "_"), name)
    return name


def sent_key(domain: str, entries: Sequence[Entry]) -> str:
    """The key of a descriptor sent with its own limit: ``domain.key_value.key…``."""
    parts = (key if not value else f"{key}_{value}" for key, value in entries)
    return sanitized(f"{domain}.{'.'.join(parts)}")


def rule_key(rule: Rule) -> str:
    """The key of ``rule`` by its place in its file: ``domain.key1_value1.key2``."""
    parts = []
    for part in rule.path.split("/"):
        key, equals, value = part.partition("=")
        parts.append(f"{unquote(key)}_{unquote(value)}" if equals else unquote(key))
    return sanitized(f"{rule.domain}.{'.'.join(parts)}")


def stat_key(rules: RuleSet, domain: str, entries: Sequence[Entry]) -> str | None:
    """The key the reference counts ``entries`` of ``domain`` under; None when no rule applies
    (the domain is unknown, no level matches, or the matching descriptor has no limit)."""
    level = rules.domains.get(domain)
    if level is None:
        return None
    detailed, valued = [domain], [domain]
    shared: dict[int, str] = {}
    rule: Rule | None = None
    last = len(entries) - 1
    for index, (key, value) in enumerate(entries):
        final = f"{key}_{value}"
        detailed.append(final)
        node, wildcard = _matched(level, final)
        by_value = node is not None
        if node is None:
            node = level.nodes.get(key)
        if node is None:
            valued.append(key)
            break
        if wildcard is not None and node.shared is not None:
            shared[index] = node.shared.removeprefix(f"{key}_")
        valued.append(
            _valued(key, value, node, wildcard, by_value=by_value, pattern=shared.get(index))
        )
        if node.rule is not None and index == last:
            rule = node.rule
        if not node.children:
            break
        level = node.children
    if rule is None:
        return None
    if not rule.detailed_metric:
        return sanitized(".".join(valued))
    if not shared:
        return sanitized(".".join(detailed))
    parts = [
        f"{key}_{shared[index]}" if index in shared else key if not value else f"{key}_{value}"
        for index, (key, value) in enumerate(entries)
    ]
    return sanitized(f"{domain}.{'.'.join(parts)}")


def _matched(level: Level, final: str) -> tuple[RuleNode | None, str | None]:
    """The descriptor of ``level`` whose composed key is ``final``, else the first wildcard
    matching it, with that wildcard's composed key."""
    node = level.nodes.get(final)
    if node is not None:
        return node, None
    for test, candidate in level.wildcards:
        if test(final):
            composed = next(name for name, one in level.nodes.items() if one is candidate)
            return candidate, composed
    return None, None


def _valued(
    key: str,
    value: str,
    node: RuleNode,
    wildcard: str | None,
    *,
    by_value: bool,
    pattern: str | None,
) -> str:
    """One level of the ``value_to_metric`` key: the key, and the value that stands for it."""
    if wildcard is not None:
        if pattern is not None:
            used = pattern
        elif node.value_to_metric:
            used = value
        else:
            used = wildcard.removeprefix(f"{key}_")
    elif by_value:
        used = value
    else:
        used = value if node.value_to_metric else ""
    return f"{key}_{used}" if used else key
