"""The engine's one core: which limit applies to a key or a descriptor, and under what name.

A ``Plan`` says how one key or descriptor is decided: the identity its counters live under, the
limit (from the configuration store's override, else the matching rule, else the default) and the
rule that matched. Plans are cached (``cache.TTLCache``: bounded, with a TTL) by key, or by
descriptor (an address counted by its block, by its block); the cache is emptied when the rules
are reloaded, and a change the configuration store reports from any instance drops the plans of
the key it names (all plans when it names none).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Sequence
from math import inf
from typing import TYPE_CHECKING, Any, NamedTuple

from ratekeeper.core.decisions import deny
from ratekeeper.core.errors import ConfigError, ConfigStoreError, InvalidInputError
from ratekeeper.core.inputs import check_cost, check_key, check_text
from ratekeeper.core.limits import Limit, with_debt
from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.core.store_keys import descriptor_entries, descriptor_key, identity
from ratekeeper.core.ticker import Ticker
from ratekeeper.engine.cache import TTLCache
from ratekeeper.engine.verdict import Descriptor, Status, Verdict
from ratekeeper.rules.matching import replaced_names
from ratekeeper.rules.model import Entry

if TYPE_CHECKING:
    from ratekeeper.config import ConfigStore
    from ratekeeper.core.decisions import Decision
    from ratekeeper.rules import Rule, RuleSet
    from ratekeeper.stores import Hit

log = logging.getLogger("ratekeeper.engine")

_new = tuple.__new__

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


#: The decision of a rule that is always over the limit: a limit of 0, which no hit fits.
ALWAYS_OVER = deny(0, 0, 0.0, inf)


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


def requests(
    domain: str, descriptors: Sequence[Descriptor | Sequence[Entry]], hits: int
) -> list[Request]:
    """Each descriptor as ``(entries, limit, cost)``, its entries a hashable tuple.

    Everything is checked here, once, before anything is counted: the domain is a string; each
    descriptor is a ``Descriptor`` or a sequence of ``(key, value)`` string pairs (keys
    non-empty); a limit sent with one is a ``Limit``; costs are valid (``ratekeeper.core.inputs``).
    Raises ``InvalidInputError`` naming the bad value.
    """
    check_text(domain, "domain")
    given: Any = descriptors  # typed for callers; checked as anything
    if isinstance(given, str | bytes) or not isinstance(given, Sequence):
        raise InvalidInputError(f"descriptors must be a list of descriptors, not {descriptors!r}")
    if not descriptors:
        raise InvalidInputError("a check needs at least one descriptor")
    hits = check_cost(hits)
    result: list[Request] = []
    entries: Any
    for descriptor in descriptors:
        if isinstance(descriptor, Descriptor):
            entries, limit, given = descriptor
            cost = hits if given is None else check_cost(given)
            if limit is not None and not isinstance(limit, Limit):
                raise InvalidInputError(f"a descriptor's limit must be a Limit, not {limit!r}")
        else:
            entries, limit, cost = descriptor, None, hits
        result.append((_entries(entries), limit, cost))
    return result


def _entries(entries: Any) -> tuple[Entry, ...]:
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise InvalidInputError(f"a descriptor is a list of (key, value) entries, not {entries!r}")
    checked = []
    for entry in entries:
        if isinstance(entry, str | bytes) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise InvalidInputError(f"a descriptor entry is a (key, value) pair, not {entry!r}")
        key, value = entry
        checked.append((check_key(key, "descriptor key"), check_text(value, "descriptor value")))
    return tuple(checked)


def prepare(
    planner: Planner,
    domain: str,
    requests: list[Request],
    loaded: dict[tuple[Entry, ...], Plan] | None = None,
) -> tuple[list[Plan], list[Hit]]:
    """The plans of a ``check`` and its store batch, which skips what is not counted.

    ``loaded`` holds plans the caller loaded already (the async engine, away from its event
    loop): used when the cache does not have them, which it may not keep (a long key) or may
    have dropped since."""
    plans: list[Plan] = []
    batch: list[Hit] = []
    replaced = False
    cached = planner.cache.get
    for entries, limit, _ in requests:
        if limit is not None:
            known = domain in planner.rules.domains  # as Envoy: no limit in an unknown domain
            counted_as = identity(domain, descriptor_key(entries))
            sent = with_debt(limit) if planner.debt else limit
            plan = Plan(counted_as, sent if known else None, None, False)
        else:
            plan = (
                cached((domain, entries))
                or (loaded and loaded.get(entries))
                or planner.load_descriptor(domain, entries)
            )
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
        plan._replace(limit=None, refused=False)
        if plan.rule is not None and plan.rule.name in names and not plan.overridden
        else plan
        for plan in plans
    ]


def status(plan: Plan, decision: Decision | None) -> Status:
    """The status of one descriptor decided by ``plan``; ``decision`` is None if not counted."""
    if decision is None:
        if plan.refused:
            return _refused(plan)
        return _new(Status, (True, None, None, plan.rule, plan.overridden, False, plan.identity))
    if decision.allowed:
        return _new(
            Status, (True, decision, plan.limit, plan.rule, plan.overridden, False, plan.identity)
        )
    shadowed = plan.rule is not None and plan.rule.shadow_mode
    return _new(
        Status,
        (shadowed, decision, plan.limit, plan.rule, plan.overridden, shadowed, plan.identity),
    )


def single(plan: Plan, decision: Decision | None) -> Verdict:
    """The verdict of a check of one descriptor (``check``'s hot path: one call, two tuples)."""
    if decision is None:
        if plan.refused:
            one = _refused(plan)
        else:
            one = _new(Status, (True, None, None, plan.rule, plan.overridden, False, plan.identity))
    elif decision[0]:
        one = _new(
            Status, (True, decision, plan.limit, plan.rule, plan.overridden, False, plan.identity)
        )
    else:
        one = status(plan, decision)
    return _new(Verdict, (one[0], (one,)))


def verdict(plans: list[Plan], decisions: Sequence[Decision]) -> Verdict:
    """Join the plans of a ``check`` with the decisions of the counted ones."""
    counted = iter(decisions)
    statuses = tuple(status(plan, None if plan.limit is None else next(counted)) for plan in plans)
    return _new(Verdict, (_allowed(statuses), statuses))


def shadowed(domain: str, result: Verdict) -> Verdict:
    """``result`` with every refusal let through and marked ``shadowed``, each logged at DEBUG:
    the engine's ``shadow`` mode, as if every limit were a rule's in ``shadow_mode``."""
    statuses = result.statuses
    for one in statuses:
        if not one.allowed:
            break
    else:
        return result
    let_through = []
    for one in statuses:
        if one.allowed:
            let_through.append(one)
            continue
        if log.isEnabledFor(logging.DEBUG):
            rule = one.rule
            what = "no rule" if rule is None else f"rule {rule.name or rule.path}"
            log.debug("shadow mode: domain %s, %s: over its limit, let through", domain, what)
        let_through.append(_new(Status, (True, *one[1:5], True, one[6])))
    return _new(Verdict, (True, tuple(let_through)))


def _refused(plan: Plan) -> Status:
    """The status of a plan that refuses every hit: let through only in shadow mode."""
    shadowed = plan.rule is not None and plan.rule.shadow_mode
    return _new(
        Status, (shadowed, ALWAYS_OVER, None, plan.rule, plan.overridden, shadowed, plan.identity)
    )


def _allowed(statuses: tuple[Status, ...]) -> bool:
    """Envoy's overall answer: refused when a descriptor is over its limit, except that
    descriptors whose rule is in ``quota_mode`` refuse only when every one of them is."""
    quota = over = 0
    for one in statuses:
        if one.rule is not None and one.rule.quota_mode and one.decision is not None:
            quota += 1
            over += not one.allowed
        elif not one.allowed:
            return False
    return over < quota or quota == 0
