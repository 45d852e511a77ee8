"""The engine's one core: which limit applies to a key or a descriptor, and under what name.

A ``Plan`` says how one key or descriptor is decided: the identity its counters live under, the
limit (from the configuration store's override, else the matching rule, else the default) and the
rule that matched. Plans are cached (LRU with a TTL); the cache is emptied when the rules are
reloaded, and a change the configuration store reports from any instance drops the plans of
the key it names (all plans when it names none).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import unquote

from ratekeeper.engine.cache import TTLCache
from ratekeeper.engine.ticker import Ticker
from ratekeeper.engine.verdict import Descriptor, Entry, Status, Verdict
from ratekeeper.errors import ConfigStoreError
from ratekeeper.rules.matching import replaced_names

if TYPE_CHECKING:
    from ratekeeper.config import ConfigStore
    from ratekeeper.decision import Decision
    from ratekeeper.limit import Limit
    from ratekeeper.rules import Rule, RuleSet
    from ratekeeper.stores import Hit

log = logging.getLogger("ratekeeper.engine")

_new = tuple.__new__

#: How long the engine leaves a failed configuration store alone before trying it again.
RETRY_AFTER_ERROR = 1.0

_ESCAPE_KEY = str.maketrans({"%": "%25", "|": "%7C", ":": "%3A"})
_ESCAPE_VALUE = str.maketrans({"%": "%25", "|": "%7C"})


def descriptor_key(entries: Sequence[Entry]) -> str:
    """The override key of a descriptor: ``key:value`` per entry, joined by ``|``.

    ``[("user", "241531")]`` gives ``user:241531``, the form the source design's per-key
    configuration uses. ``%``, ``|`` (and ``:`` in keys) are percent-escaped, so no two
    descriptors share a key.
    """
    return "|".join(
        f"{key.translate(_ESCAPE_KEY)}:{value.translate(_ESCAPE_VALUE)}" for key, value in entries
    )


#: One descriptor of a check, normalised: ``(entries, limit sent with it, cost)``.
Request = tuple[tuple[Entry, ...], "Limit | None", int]


def descriptor_entries(key: str) -> tuple[Entry, ...] | None:
    """The entries whose ``descriptor_key`` is ``key``; None when no descriptor has it."""
    entries = []
    for part in key.split("|"):
        name, colon, value = part.partition(":")
        if not colon:
            return None
        entries.append((unquote(name), unquote(value)))
    return tuple(entries)


class Plan(NamedTuple):
    """How one key or descriptor is decided; ``limit`` is None when nothing is counted."""

    identity: str
    limit: Limit | None
    rule: Rule | None
    overridden: bool


class Planner:
    """Resolves keys and descriptors to plans, through the cache.

    ``rules`` give limits by descriptor; ``config`` holds per-key overrides that win over them;
    ``default`` is the limit of a key that ``is_allowed`` finds no override for; ``domain`` is
    the namespace of those keys. With a configuration store, once ``start()`` is called, the
    cache expires every ``cache_ttl`` seconds and on every change the store reports. When the
    store fails, plans come from the last known override, else the rules, and the store is left
    alone for ``RETRY_AFTER_ERROR`` seconds of ``clock``.
    """

    def __init__(
        self,
        rules: RuleSet,
        *,
        config: ConfigStore | None,
        default: Limit | None,
        domain: str,
        cache_size: int,
        cache_ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rules = rules
        self.config = config
        self.default = default
        self.domain = domain
        self.clock = clock
        self.cache: TTLCache[Plan] = TTLCache(cache_size, cache_ttl)
        self.config_errors = 0
        self._config_down_until = 0.0
        self._subscribed = False
        self._ticker = Ticker(cache_ttl, self._tick, "ratekeeper-cache")

    def start(self) -> None:
        """With a configuration store: follow the changes it reports, and expire the cache
        every ``cache_ttl`` seconds on a thread; again in a forked child, whose thread is gone.

        A store that cannot be subscribed to is logged, and tried again at each expiry; until
        then the expiry bounds how long a change goes unseen.
        """
        if self.config is not None:
            self._subscribe()
            self._ticker.start()

    def close(self) -> None:
        self._ticker.stop()

    def _tick(self) -> None:
        self.cache.expire()
        self._subscribe()

    def _subscribe(self) -> None:
        if self._subscribed or self.config is None:  # a forked child keeps its subscription
            return
        try:
            self.config.subscribe(self._changed)
        except ConfigStoreError as error:
            self.config_errors += 1
            log.warning(
                "cannot follow the configuration store's changes; trying again in %gs: %s",
                self.cache.ttl,
                error,
            )
            return
        self._subscribed = True

    def set_rules(self, rules: RuleSet) -> None:
        self.rules = rules
        self.cache.clear()

    def load_key(self, key: str) -> Plan:
        domain = self.domain
        identity = f"{domain}/{key}" if domain else key
        return self._load(key, domain, key, identity, None, self.default)

    def load_descriptor(self, domain: str, entries: tuple[Entry, ...]) -> Plan:
        key = descriptor_key(entries)
        identity = f"{domain}/{key}" if domain else key
        rule = self.rules.match(domain, entries)
        return self._load((domain, entries), domain, key, identity, rule, None)

    def missing(self, domain: str, requests: list[Request]) -> list[tuple[Entry, ...]]:
        """The entries of ``requests`` whose plans are not cached (the async engine loads them
        in a thread, away from the event loop)."""
        cached = self.cache.lookup
        return [
            entries
            for entries, limit, _ in requests
            if limit is None and cached((domain, entries)) is None
        ]

    def _load(  # noqa: PLR0917 - one private call site per entry point
        self,
        slot: Hashable,
        domain: str,
        key: str,
        identity: str,
        rule: Rule | None,
        fallback: Limit | None,
    ) -> Plan:
        override = None
        if self.config is not None:
            stale = self.cache.stale(slot)
            if self.clock() < self._config_down_until:
                if stale is not None:
                    return stale
            else:
                try:
                    override = self.config.get(key, domain)
                except ConfigStoreError as error:
                    self.config_errors += 1
                    self._config_down_until = self.clock() + RETRY_AFTER_ERROR
                    log.warning(
                        "configuration store failed; deciding by the last known limits, "
                        "else the rules, for %gs: %s",
                        RETRY_AFTER_ERROR,
                        error,
                    )
                    if stale is not None:
                        return stale
        if override is not None:
            plan = Plan(identity, override.limit, rule, True)
        elif rule is not None:
            plan = Plan(identity, rule.limit, rule, False)
        else:
            plan = Plan(identity, fallback, None, False)
        if self.clock() >= self._config_down_until:
            self.cache.put(slot, plan)  # a plan made without the store is not kept
        return plan

    def _changed(self, domain: str | None, key: str | None) -> None:
        """A change reported by the configuration store: forget what it makes wrong."""
        if domain is None or key is None:  # anything may have changed
            self.cache.expire()
            return
        if domain == self.domain:
            self.cache.discard(key)  # is_allowed(key)
        entries = descriptor_entries(key)
        if entries is not None:
            self.cache.discard((domain, entries))  # check(domain, [entries])


def requests(descriptors: Sequence[Descriptor | Sequence[Entry]], hits: int) -> list[Request]:
    """Each descriptor as ``(entries, limit, cost)``, its entries a hashable tuple."""
    result: list[Request] = []
    entries: Any
    for descriptor in descriptors:
        if isinstance(descriptor, Descriptor):
            entries, limit, given = descriptor
            cost = hits if given is None else given
        else:
            entries, limit, cost = descriptor, None, hits
        if entries.__class__ is not tuple or (entries and entries[0].__class__ is not tuple):
            entries = tuple((key, value) for key, value in entries)
        result.append((entries, limit, cost))
    return result


def prepare(planner: Planner, domain: str, requests: list[Request]) -> tuple[list[Plan], list[Hit]]:
    """The plans of a ``check`` and its store batch, which skips what is not counted."""
    plans: list[Plan] = []
    batch: list[Hit] = []
    replaced = False
    cached = planner.cache.get
    for entries, limit, _ in requests:
        if limit is not None:
            key = descriptor_key(entries)
            plan = Plan(f"{domain}/{key}" if domain else key, limit, None, False)
        else:
            plan = cached((domain, entries)) or planner.load_descriptor(domain, entries)
            if plan.rule is not None and plan.rule.replaces:
                replaced = True
        plans.append(plan)
    if replaced:
        plans = _replace(plans)
    for plan, (_, _, cost) in zip(plans, requests, strict=True):
        if plan.limit is not None:
            batch.append((plan.identity, plan.limit, cost))
    return plans, batch


def _replace(plans: list[Plan]) -> list[Plan]:
    """Drop every matched limit that another matched limit ``replaces`` (Envoy's semantics)."""
    names = replaced_names(plan.rule for plan in plans)
    return [
        plan._replace(limit=None)
        if plan.rule is not None and plan.rule.name in names and not plan.overridden
        else plan
        for plan in plans
    ]


def status(plan: Plan, decision: Decision | None) -> Status:
    """The status of one descriptor decided by ``plan``; ``decision`` is None if not counted."""
    if decision is None:
        return _new(Status, (True, None, None, plan.rule, plan.overridden, False))
    if decision.allowed:
        return _new(Status, (True, decision, plan.limit, plan.rule, plan.overridden, False))
    shadowed = plan.rule is not None and plan.rule.shadow_mode
    return _new(Status, (shadowed, decision, plan.limit, plan.rule, plan.overridden, shadowed))


def single(plan: Plan, decision: Decision | None) -> Verdict:
    """The verdict of a check of one descriptor (``check``'s hot path: one call, two tuples)."""
    if decision is None:
        one = _new(Status, (True, None, None, plan.rule, plan.overridden, False))
    elif decision[0]:
        one = _new(Status, (True, decision, plan.limit, plan.rule, plan.overridden, False))
    else:
        one = status(plan, decision)
    return _new(Verdict, (one[0], (one,)))


def verdict(plans: list[Plan], decisions: Sequence[Decision]) -> Verdict:
    """Join the plans of a ``check`` with the decisions of the counted ones."""
    counted = iter(decisions)
    statuses = tuple(status(plan, None if plan.limit is None else next(counted)) for plan in plans)
    return _new(Verdict, (all(one.allowed for one in statuses), statuses))
