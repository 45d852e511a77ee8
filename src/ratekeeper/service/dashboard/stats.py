"""The dashboard's figures, from the records of one service's processes (``Shot``), as the
bodies of ``GET /v1/stats`` and ``GET /v1/top``. No I/O here.

- ``top``: the keys with the most decisions and with the most refusals over a window of whole
  slots, each slot's summaries of every process merged into one. Each count is a lower bound,
  at most ``error`` below the truth, and ``error`` never exceeds ``bound``,
  ``total // (capacity + 1)`` (``ratekeeper.core.frequent``).
- ``series``: decisions per second over the last ``HISTORY`` seconds, overall and by domain
  and rule, by result.
- ``latency``: each surface's median and 99th percentile over the last minute, estimated
  from the metrics' histogram buckets as Prometheus's ``histogram_quantile`` does.
- ``tree``: the rules of each domain as a tree, from their paths.
- ``store``: the request store's health over the live processes, as the worst of them sees it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import unquote

from ratekeeper.core.frequent import Summary
from ratekeeper.rules import RuleSet
from ratekeeper.rules.model import Rule
from ratekeeper.service.dashboard.recorder import HISTORY, SLOT, Latest, Shot, rate_text
from ratekeeper.service.http.health import past_failure
from ratekeeper.service.observe.metrics import LATENCY_BUCKETS
from ratekeeper.service.surfaces import SURFACES

#: The results of a decision, as the metrics count them.
RESULTS = ("allowed", "limited", "shadowed", "degraded")
#: Seconds of the latency figures.
LATENCY_WINDOW = 60
#: The windows ``top`` takes, in seconds, and the most keys it lists.
MIN_WINDOW, MAX_WINDOW, MAX_KEYS = SLOT, HISTORY, 100


def top(shots: Sequence[Shot], now: float, window: int, n: int, capacity: int) -> dict[str, Any]:
    """The body of ``GET /v1/top?window=&n=``: the ``n`` keys of most decisions and of most
    refusals over the last ``window`` seconds, in whole slots (the current one included);
    ``span`` is the time they cover, since the service began to record at most."""
    current = int(now // SLOT * SLOT)
    first = current - (math.ceil(window / SLOT) - 1) * SLOT
    since = max(first, started(shots))
    requests: list[Summary] = []
    refused: list[Summary] = []
    for shot in shots:
        for start, slot in shot.slots.items():
            if first <= start <= current:
                requests.append(slot.requests)
                refused.append(slot.refused)
    empty = Summary(capacity)
    return {
        "window": window,
        "span": max(0, round(now - since)),
        "slot": SLOT,
        "capacity": capacity,
        "requests": _listed(empty.merged(requests), n, shots),
        "refused": _listed(empty.merged(refused), n, shots),
    }


def started(shots: Iterable[Shot]) -> float:
    """When the first of the processes ``shots`` are of began to record (0 if none did)."""
    return min((shot.started for shot in shots if shot.started), default=0.0)


def _listed(summary: Summary, n: int, shots: Sequence[Shot]) -> dict[str, Any]:
    keys = []
    for identity, count in summary.top(n):
        domain, _, key = identity.partition("/")
        if not _:  # a bounded identity: no domain to tell
            domain, key = "", identity
        listed: dict[str, Any] = {
            "domain": unquote(domain),
            "key": key,
            "count": count,
            "at_most": count + summary.error,
        }
        listed.update(_latest(identity, shots))
        keys.append(listed)
    return {
        "total": summary.total,
        "error": summary.error,
        "bound": summary.bound,
        "keys": keys,
    }


def _latest(identity: str, shots: Sequence[Shot]) -> dict[str, Any]:
    """The rule, limit and hits remaining of a key's newest decision: of the latest decision
    each process knows, the one recorded last (``Latest``), whichever wrote its record last."""
    found: Latest | None = None
    for shot in shots:
        one = shot.latest.get(identity)
        if one is not None and (found is None or one[5] > found[5]):
            found = one
    if found is None:
        return {"rule": None, "limit": None, "algorithm": None, "remaining": None, "allowed": None}
    rule, limit, algorithm, remaining, allowed, _ = found
    return {
        "rule": rule,
        "limit": limit,
        "algorithm": algorithm,
        "remaining": remaining,
        "allowed": allowed,
    }


def series(
    shots: Iterable[Shot], now: float, rules: RuleSet
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Decisions per second over the last ``HISTORY`` seconds, the current one last: overall,
    and by domain and rule (with the rule's limit and algorithm, when it is one of ``rules``)."""
    start = int(now) - HISTORY + 1
    overall = {result: [0] * HISTORY for result in RESULTS}
    by_rule: dict[tuple[str, str], dict[str, list[int]]] = {}
    for shot in shots:
        for second, counts in shot.seconds:
            at = second - start
            if not 0 <= at < HISTORY:
                continue
            for (domain, rule, result), n in counts.items():
                if result not in overall:
                    continue
                overall[result][at] += n
                row = by_rule.get((domain, rule))
                if row is None:
                    row = by_rule[(domain, rule)] = {one: [0] * HISTORY for one in RESULTS}
                row[result][at] += n
    named = _named(rules)
    rows: list[dict[str, Any]] = []
    for (domain, rule), row in sorted(by_rule.items()):
        limit, algorithm = _limit_of(named.get((domain, rule)))
        rows.append({"domain": domain, "rule": rule, "limit": limit, "algorithm": algorithm, **row})
    return {"step": 1, "start": start, **overall}, rows


def _named(rules: RuleSet) -> dict[tuple[str, str], Rule]:
    """Each rule by its domain and the name the metrics give it."""
    return {(rule.domain, rule.name or rule.path): rule for rule in rules}


def _limit_of(rule: Rule | None) -> tuple[str | None, str | None]:
    if rule is None or rule.limit is None:
        return None, None
    return rate_text(rule.limit.amount, rule.limit.period), rule.limit.algorithm.value


def latency(shots: Iterable[Shot], now: float) -> dict[str, Any]:
    """Each surface's decisions over the last ``LATENCY_WINDOW`` seconds: their count, and
    their median and 99th percentile in seconds (None without decisions)."""
    since = int(now) - LATENCY_WINDOW
    totals = {surface: [0] * (len(LATENCY_BUCKETS) + 1) for surface in SURFACES}
    for shot in shots:
        for second, by_surface in shot.latency:
            if second < since:
                continue
            for surface, counts in by_surface.items():
                found = totals.get(surface)
                if found is not None:
                    for index, n in enumerate(counts):
                        found[index] += n
    surfaces = []
    for surface, counts in totals.items():
        count = sum(counts)
        surfaces.append(
            {
                "surface": surface,
                "count": count,
                "p50": quantile(0.5, counts),
                "p99": quantile(0.99, counts),
            }
        )
    return {"window": LATENCY_WINDOW, "surfaces": surfaces}


def quantile(q: float, counts: Sequence[int]) -> float | None:
    """The ``q`` quantile of the latencies counted in ``counts`` (one count per bucket of
    ``LATENCY_BUCKETS``, then those above it), interpolated within its bucket; the largest
    bound when it lies above it; None when nothing was counted."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    below = 0
    lower = 0.0
    for index, bound in enumerate(LATENCY_BUCKETS):
        n = counts[index]
        if n and below + n >= rank:
            return lower + (bound - lower) * (rank - below) / n
        below += n
        lower = bound
    return LATENCY_BUCKETS[-1]


def tree(rules: RuleSet) -> list[dict[str, Any]]:
    """The rules of each domain as a tree of descriptors (``key``, ``value``, and the rule of
    those that have one), built from the rules' paths, in file order."""
    domains: dict[str, list[dict[str, Any]]] = {}
    nodes: dict[tuple[str, str], dict[str, Any]] = {}  # by domain and path
    for rule in rules:
        level = domains.setdefault(rule.domain, [])
        parts = rule.path.split("/")
        for depth in range(len(parts)):
            path = "/".join(parts[: depth + 1])
            node = nodes.get((rule.domain, path))
            if node is None:
                key, equals, value = parts[depth].partition("=")
                node = nodes[(rule.domain, path)] = {
                    "key": unquote(key),
                    "value": unquote(value) if equals else None,
                    "path": path,
                    **_NO_RULE,
                    "children": [],
                }
                level.append(node)
            if depth == len(parts) - 1:
                node.update(_rule(rule))
            level = node["children"]
    return [
        {"domain": domain, "descriptors": descriptors} for domain, descriptors in domains.items()
    ]


#: A descriptor of the tree without a rule of its own.
_NO_RULE: dict[str, Any] = {
    "name": None,
    "limit": None,
    "algorithm": None,
    "unlimited": False,
    "always_over": False,
    "shadow_mode": False,
    "quota_mode": False,
}


def _rule(rule: Rule) -> dict[str, Any]:
    limit, algorithm = _limit_of(rule)
    return {
        "name": rule.name,
        "limit": limit,
        "algorithm": algorithm,
        "unlimited": rule.unlimited,
        "always_over": rule.always_over,
        "shadow_mode": rule.shadow_mode,
        "quota_mode": rule.quota_mode,
    }


#: Breaker states, the better first: the service's is its worst worker's.
_BREAKERS = ("closed", "half-open", "open")


def store(shots: Sequence[Shot], degraded: int) -> dict[str, Any]:
    """The request store's health over the live workers: ok if it is in every one, the worst
    breaker, every open shard, the latest failure; with the degraded decisions of the last
    minute."""
    found = [shot.health for shot in shots if shot.live and shot.health is not None]
    if not found:
        return {
            "ok": None,
            "breaker": None,
            "error": None,
            "open_shards": [],
            "last_error": None,
            "degraded": degraded,
        }
    breaker = max(
        (one["breaker"] for one in found),
        key=lambda state: _BREAKERS.index(state) if state in _BREAKERS else 0,
    )
    latest = max(found, key=lambda one: one["last_error_at"] or 0.0)
    return {
        "ok": all(one["ok"] for one in found),
        "breaker": breaker,
        "error": next((one["error"] for one in found if one["error"]), None),
        "open_shards": sorted({shard for one in found for shard in one["open_shards"]}),
        "last_error": past_failure(latest["last_error"], latest["last_error_at"]),
        "degraded": degraded,
    }
