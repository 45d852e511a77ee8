"""envoyproxy/ratelimit's statistics, counted as it counts them.

``ReferenceStats`` is an engine's tally (``ratekeeper.engine.verdict.Tally``): told of every
check with its descriptors, it counts each counted descriptor under the name the reference
gives it (``ratelimit.service.rate_limit.<domain>.<key…>.<stat>``, the key from
``ratekeeper.rules.stat_keys``), as ``src/limiter/base_limiter.go`` does:

- ``total_hits`` by the descriptor's cost (its ``hits_addend``);
- allowed: ``within_limit`` by the cost, and ``near_limit`` by the part of it past
  ``floor(limit x near_limit_ratio)``;
- refused: ``over_limit`` by the part of the cost past the limit, ``near_limit`` by the part
  between the near-limit threshold and the limit, and ``shadow_mode`` as ``over_limit`` when the
  rule is in shadow mode.

The count before a hit is read from the decision: ``limit - remaining`` before an allowed or a
refused-and-not-counted hit. A refusal under ``--debt`` (the reference's default way of
counting) reports nothing left, so a refused hit of cost above 1 counts its whole cost as
``over_limit``; the reference splits the one request that crosses the limit with its counter's
value. A descriptor that no rule limits counts nothing; one of an unknown domain counts
``<domain>.domain_not_found``. Beside them: ``config_load_success`` and ``config_load_error``
(the rule files' loads) and ``call.should_rate_limit.redis_error`` (a check the request store
failed), ``global_shadow_mode`` (a check the engine's shadow mode let through).

``take()`` hands the counts since the last ``take()`` (what a StatsD flush sends) and adds them
to ``totals`` (what a Prometheus scrape reads). Thread-safe; the tally never raises.
"""

from __future__ import annotations

import logging
import math
import struct
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ratekeeper.rules.stat_keys import rule_key, sanitized, sent_key, stat_key

if TYPE_CHECKING:
    from ratekeeper.core.decisions import Decision
    from ratekeeper.core.limits import Limit
    from ratekeeper.engine import AsyncEngine, Engine, Status
    from ratekeeper.rules import Rule, RuleSet
    from ratekeeper.rules.model import Entry

log = logging.getLogger("ratekeeper.service")

#: The reference's ``NEAR_LIMIT_RATIO``.
NEAR_LIMIT_RATIO = 0.8
#: The descriptors whose statistics key is remembered at most; past it they are forgotten at
#: once and worked out again.
MAX_KEYS = 10_000

PREFIX = "ratelimit.service."
_RATE_LIMIT = PREFIX + "rate_limit."

Request = tuple[tuple["Entry", ...], "Limit | None", int]


def tag_suffix(tags: Mapping[str, str]) -> str:
    """``tags`` as gostats writes them after a name: ``.__key=value`` for each, sorted by key,
    the value's ``.``, ``:`` and ``|`` made ``_``; pairs with an empty side left out."""
    table = str.maketrans({".": "_", ":": "_", "|": "_"})
    return "".join(
        f".__{key}={value.translate(table)}" for key, value in sorted(tags.items()) if key and value
    )


def _float32(value: float) -> float:
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


class ReferenceStats:
    """The reference's statistics of ``engine``'s checks (``track`` makes it its tally).

    ``near_limit_ratio`` is the reference's ``NEAR_LIMIT_RATIO``; ``tags`` (its
    ``EXTRA_TAGS``) end every name, as gostats writes them (``tag_suffix``).
    """

    def __init__(
        self,
        engine: Engine | AsyncEngine,
        *,
        near_limit_ratio: float = NEAR_LIMIT_RATIO,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        self.engine = engine
        self.ratio = _float32(near_limit_ratio)
        self.suffix = tag_suffix(tags or {})
        self.totals: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._keys: dict[tuple[str, tuple[Entry, ...], bool], str | None] = {}
        self._rules: RuleSet | None = None
        self._near: dict[int, int] = {}
        self._loads = (0, 0)  # the watcher's (reloads, errors) taken so far
        self._counts[self._name("config_load_success")] = 1  # the load at start

    def track(self, engine: Engine | AsyncEngine | None = None) -> None:
        """Become the tally of ``engine`` (default: the one given)."""
        (engine or self.engine).tally = self

    def __call__(
        self, domain: str, requests: Sequence[Request], statuses: tuple[Status, ...]
    ) -> None:
        try:
            self._tally(domain, requests, statuses)
        except Exception:  # a statistic must never fail a decision
            log.exception("envoyproxy/ratelimit's statistics: a check was not counted")

    def _tally(
        self, domain: str, requests: Sequence[Request], statuses: tuple[Status, ...]
    ) -> None:
        rules = self.engine.rules
        if rules is not self._rules:
            self._keys.clear()
            self._rules = rules
        counted: list[tuple[str, int]] = []
        if domain not in rules.domains:
            name = f"{_RATE_LIMIT}{sanitized(domain)}.domain_not_found{self.suffix}"
            counted.append((name, len(requests)))
        degraded = global_shadow = False
        for (entries, sent, cost), one in zip(requests, statuses, strict=True):
            decision = one.decision
            if decision is None or not cost:
                continue
            degraded = degraded or decision.degraded
            rule = one.rule
            in_shadow = rule is not None and rule.shadow_mode
            global_shadow = global_shadow or (one.shadowed and not in_shadow)
            key = self._key(rules, domain, entries, sent is not None, rule)
            if key is not None:
                self._count(counted, key, decision, cost, in_shadow)
        if degraded:
            counted.append((self._name("call.should_rate_limit.redis_error"), 1))
        if global_shadow:
            counted.append((self._name("global_shadow_mode"), 1))
        with self._lock:
            counts = self._counts
            for name, amount in counted:
                if amount:
                    counts[name] = counts.get(name, 0) + amount

    def _key(
        self,
        rules: RuleSet,
        domain: str,
        entries: tuple[Entry, ...],
        sent: bool,
        rule: Rule | None,
    ) -> str | None:
        slot = (domain, entries, sent)
        try:
            return self._keys[slot]
        except KeyError:
            pass
        if sent:
            key = sent_key(domain, entries)
        else:
            found = stat_key(rules, domain, entries)
            key = found or (rule_key(rule) if rule is not None else sent_key(domain, entries))
        if len(self._keys) >= MAX_KEYS:
            self._keys.clear()
        self._keys[slot] = key
        return key

    def _count(
        self, counted: list[tuple[str, int]], key: str, decision: Decision, cost: int, shadow: bool
    ) -> None:
        """The reference's arithmetic for one descriptor (``GetResponseDescriptorStatus``)."""
        allowed, limit, remaining = decision.allowed, decision.limit, decision.remaining
        name = f"{_RATE_LIMIT}{key}."
        near = self._threshold(limit)
        counted.append((f"{name}total_hits{self.suffix}", cost))
        if allowed:
            after = limit - remaining
            if after > near:
                counted.append((f"{name}near_limit{self.suffix}", min(cost, after - near)))
            counted.append((f"{name}within_limit{self.suffix}", cost))
            return
        before = limit if decision.granted else limit - remaining  # a debt reports nothing left
        after = before + cost
        over = cost if before >= limit else after - limit
        counted.append((f"{name}over_limit{self.suffix}", over))
        if before < limit:
            counted.append((f"{name}near_limit{self.suffix}", limit - max(near, before)))
        if shadow:
            counted.append((f"{name}shadow_mode{self.suffix}", over))

    def _threshold(self, limit: int) -> int:
        """``floor(limit x ratio)`` in the reference's float32."""
        near = self._near.get(limit)
        if near is None:
            near = self._near[limit] = math.floor(_float32(_float32(limit) * self.ratio))
        return near

    def _name(self, stat: str) -> str:
        return f"{PREFIX}{stat}{self.suffix}"

    def take(self) -> dict[str, int]:
        """The counts since the last ``take``, each added to ``totals``."""
        watcher = getattr(self.engine, "watcher", None)
        if watcher is not None:
            reloads, errors = watcher.reloads, watcher.errors
            done, failed = reloads - self._loads[0], errors - self._loads[1]
            self._loads = (reloads, errors)
        else:
            done = failed = 0
        with self._lock:
            taken, self._counts = self._counts, {}
            if done:
                name = self._name("config_load_success")
                taken[name] = taken.get(name, 0) + done
            if failed:
                name = self._name("config_load_error")
                taken[name] = taken.get(name, 0) + failed
            totals = self.totals
            for name, amount in taken.items():
                totals[name] = totals.get(name, 0) + amount
        return taken

    def snapshot(self) -> dict[str, int]:
        """The totals counted so far, those not taken yet included (a scrape's figures)."""
        with self._lock:
            merged = dict(self.totals)
            for name, amount in self._counts.items():
                merged[name] = merged.get(name, 0) + amount
        return merged
