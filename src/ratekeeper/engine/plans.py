"""The engine's one core: which limit applies to a key or a descriptor, and under what name.

A ``Plan`` says how one key or descriptor is decided: the identity its counters live under, the
limit (from the configuration store's override, else the matching rule, else the default) and the
rule that matched. Plans are cached (``cache.TTLCache``: bounded, with a TTL) by key, or by
descriptor (an address counted by its block, by its block); the cache is emptied when the rules
are reloaded, and a change the configuration store reports from any instance drops the plans of
the key it names (all plans when it names none).

A check's descriptors are checked and planned into a store batch by ``checks``; its plans and
the store's decisions become statuses and a verdict in ``statuses``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, NamedTuple

from ratekeeper.core.errors import ConfigError, ConfigStoreError
from ratekeeper.core.limits import Limit, with_debt
from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.core.store_keys import descriptor_entries, descriptor_key, identity
from ratekeeper.core.ticker import Ticker
from ratekeeper.engine.cache import TTLCache
from ratekeeper.rules.model import Entry

if TYPE_CHECKING:
    from ratekeeper.config import ConfigStore
    from ratekeeper.rules import Rule, RuleSet

log = logging.getLogger("ratekeeper.engine")

#: How long the engine leaves a failed configuration store alone before trying it again.
RETRY_AFTER_ERROR = 1.0
#: The throttle's keys of the configuration store's failures (logged once a minute, counted).
_UNREAD = "configuration store failed; deciding by the last known limits, else the rules: %s"
_UNFOLLOWED = "cannot follow the configuration store's changes; trying again every %gs: %s"
#: The longest key (a descriptor's ``descriptor_key``) whose plan is cached. A request may
#: carry long values (a header, a path), and the cache keeps what it is keyed by: a plan of a
#: longer key is made again each time, so that the cache holds at most ``cache_size`` keys of
#: this length, whatever the requests say. Its identity is ``bounded`` (``keys``) either way.
MAX_CACHED_KEY = 1024

#: The descriptors whose address block (the slot of their plan) is remembered at most; past
#: it they are forgotten all at once and worked out again.
MAX_BLOCKS = 10_000

#: One descriptor of a check, normalised: ``(entries, limit sent with it, cost)``.
Request = tuple[tuple[Entry, ...], "Limit | None", int]


class Plan(NamedTuple):
    """How one key or descriptor is decided; ``limit`` is None when nothing is counted.

    ``refused``: every hit is refused without counting (a rule of ``requests_per_unit: 0``).
    """

    identity: str
    limit: Limit | None
    rule: Rule | None
    overridden: bool
    refused: bool = False


class Planner:
    """Resolves keys and descriptors to plans, through the cache.

    ``rules`` give limits by descriptor; ``config`` holds per-key overrides that win over them;
    ``default`` is the limit of a key that ``is_allowed`` finds no override for; ``domain`` is
    the namespace of those keys. With a configuration store, once ``start()`` is called, the
    cache expires every ``cache_ttl`` seconds and on every change the store reports. When the
    store fails, plans come from the last known override, else the rules, and the store is left
    alone for ``RETRY_AFTER_ERROR`` seconds of ``clock``.

    ``cache_misses`` counts the plans loaded rather than found in the cache (counted where they
    load, so that a hit costs nothing more); ``config_errors`` the configuration store's
    failures and invalid overrides.

    ``debt``: every limit a plan holds, and every limit sent with a descriptor, counts every
    hit, refused or not (``with_debt``; set by the engine).
    """

    debt = False

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
        # One ``Limit`` object for each distinct override limit in the plans: many keys given
        # the same override share it (and its id, its step), which keeps a decision's working
        # set small. Emptied when it holds as many limits as the cache holds plans.
        self._limits: dict[Limit, Limit] = {}
        # The slot of the plan of each descriptor planned by its address's block (only those
        # under rules with ``ipv6_prefix`` or ``ipv4_prefix``), which the engine's hot path
        # reads too.
        self.blocks: dict[tuple[str, tuple[Entry, ...]], Hashable] = {}
        self.config_errors = 0
        self.cache_misses = 0
        self._config_down_until = 0.0
        self._subscribed = False
        self._ticker = Ticker(cache_ttl, self._tick, "ratekeeper-cache")
        self._failing = LogThrottle(log, clock=clock)

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
            self._failing.log(logging.WARNING, _UNFOLLOWED, self.cache.ttl, error)
            return
        self._subscribed = True
        if self._failing.clear(_UNFOLLOWED):
            log.warning("following the configuration store's changes again")

    def set_rules(self, rules: RuleSet) -> None:
        self.rules = rules
        self.blocks.clear()
        self.cache.clear()

    def load_key(self, key: str) -> Plan:
        domain = self.domain
        return self._load(key, domain, key, identity(domain, key), None, self.default)

    def load_descriptor(self, domain: str, entries: tuple[Entry, ...]) -> Plan:
        """The plan of a descriptor the cache has not under its entries. An address counted by
        its block (``ipv6_prefix``, ``ipv4_prefix``) is planned by its block: its plan is
        cached, and its override looked up, under the entries with the block for the address,
        so that one client rotating addresses within its /64 costs one configuration-store
        lookup and one cache entry, not one per address."""
        block = self._block_of(domain, entries)
        if block is not None:
            plan = self.cache.lookup(block)
            if plan is not None:
                return plan
        rule, counted, blocked = self.rules.locate(domain, entries)
        slot: Hashable = (domain, entries) if blocked is entries else (domain, blocked)
        if block is not None and slot != block:  # remembered under rules reloaded since
            self.blocks.pop((domain, entries), None)
        key = descriptor_key(blocked)
        shared = key if counted is blocked else descriptor_key(counted)  # share_threshold
        return self._load(slot, domain, key, identity(domain, shared), rule, None)

    def missing(self, domain: str, requests: list[Request]) -> list[tuple[Entry, ...]]:
        """The entries of ``requests`` whose plans are not cached, under their entries nor
        under their addresses' blocks (the async engine loads them in a thread, away from the
        event loop)."""
        cached = self.cache.lookup
        missed = []
        for entries, limit, _ in requests:
            if limit is not None or cached((domain, entries)) is not None:
                continue
            block = self._block_of(domain, entries)
            if block is None or cached(block) is None:
                missed.append(entries)
        return missed

    def _block_of(self, domain: str, entries: tuple[Entry, ...]) -> Hashable | None:
        """The slot of the plan of ``entries``' address block, None when they hold no address
        a rule counts by its block. Remembered for ``MAX_BLOCKS`` descriptors, so that a client
        that keeps its address does not work its block out (parse it) on every request; as
        the cache, not for descriptors longer than ``MAX_CACHED_KEY``."""
        slot = self.blocks.get((domain, entries))
        if slot is None:
            blocked = self.rules.locate(domain, entries)[2]
            if blocked is entries:
                return None
            slot = (domain, blocked)
            if sum(len(key) + len(value) + 2 for key, value in entries) <= MAX_CACHED_KEY:
                if len(self.blocks) >= MAX_BLOCKS:
                    self.blocks.clear()
                self.blocks[(domain, entries)] = slot
        return slot

    def _load(  # noqa: PLR0917 - one private call site per entry point
        self,
        slot: Hashable,
        domain: str,
        key: str,
        counted_as: str,
        rule: Rule | None,
        fallback: Limit | None,
    ) -> Plan:
        self.cache_misses += 1
        override = None
        # A key holding NUL (a request may send one, "%00" in a path) can have no override:
        # configuration stores refuse to hold one, so the store is not asked.
        if self.config is not None and "\x00" not in key:
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
                    self._failing.log(logging.WARNING, _UNREAD, error)
                    if stale is not None:
                        return stale
                except ConfigError as error:  # the key's stored override no longer validates
                    self.config_errors += 1
                    log.warning(
                        "invalid override in the configuration store; deciding %r by its last"
                        " known limit, else the rules: %s",
                        key,
                        error,
                        extra={"domain": domain, "rule": rule.name or rule.path if rule else None},
                    )
                    if stale is not None:
                        self.cache.put(slot, stale)  # until the next change or expiry
                        return stale
                else:
                    if self._failing.holds(_UNREAD):
                        self._failing.clear(_UNREAD)
                        log.warning("configuration store answering again")
        if override is not None:
            plan = Plan(counted_as, self._shared(override.limit), rule, True)
        elif rule is not None:
            plan = Plan(counted_as, rule.limit, rule, False, rule.always_over)
        else:
            plan = Plan(counted_as, fallback, None, False)
        if self.debt and plan.limit is not None:
            plan = plan._replace(limit=with_debt(plan.limit))
        if len(key) <= MAX_CACHED_KEY and self.clock() >= self._config_down_until:
            self.cache.put(slot, plan)  # a plan made without the store is not kept
        return plan

    def _shared(self, limit: Limit) -> Limit:
        """The ``Limit`` equal to ``limit`` that plans already hold, else ``limit``."""
        limits = self._limits
        shared = limits.get(limit)
        if shared is None:
            if len(limits) >= self.cache.maxsize:
                limits.clear()
            shared = limits[limit] = limit
        return shared

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
