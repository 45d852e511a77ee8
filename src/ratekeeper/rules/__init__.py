"""Envoy rate-limit service rule files: loading, strict validation and matching.

A rule file is the YAML the Envoy rate-limit service reads (``domain``, nested
``descriptors`` with ``key``, optional ``value`` and ``rate_limit``), loaded unchanged, plus
additive ratekeeper fields inside ``rate_limit``: ``algorithm``, ``period``, ``burst``,
``granularity``, ``calendar`` and ``debt``; and on a descriptor, ``ipv6_prefix`` and
``ipv4_prefix`` (an address entry counted by its block). ``load_rules`` and ``parse_rules``
need the ``rules`` extra (PyYAML); ``RuleSet.match``, ``RuleSet.lookup``, ``RuleSet.locate``
and ``RuleSet.resolve`` are pure. See ``docs/rules.md``.
"""

from ratekeeper.rules.loader import load_rules, parse_rules
from ratekeeper.rules.matching import RuleSet
from ratekeeper.rules.model import Rule

__all__ = ["Rule", "RuleSet", "load_rules", "parse_rules"]
