"""``Engine`` and ``AsyncEngine``: the decision engine, joining rules, overrides and a store.

The two classes are twins kept line-aligned: only I/O differs (the store is awaited, and a
configuration lookup that misses the cache runs in a worker thread, off the event loop). What
they share, their arguments' checks included, is ``base.EngineBase``.

Lifecycle: building an engine starts nothing. Its background work (reloading the rule files,
following the configuration store's changes, expiring the plan cache) starts with the first
decision, or ``start()``, once however many threads decide at once. A forked child starts it
again at its first decision: an engine has no plan cached until it started in its process, so
that decision misses the cache, and a hit on a cached plan does no lifecycle work at all.
``close()`` stops it and closes the stores; a second ``close()`` does nothing. Both twins are
context managers that close on exit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ratekeeper.core.closing import AsyncClosing, Closing
from ratekeeper.core.decisions import Decision
from ratekeeper.core.inputs import MAX_COST, check_cost, check_key
from ratekeeper.core.limits import Limit, charged
from ratekeeper.engine.base import EngineBase
from ratekeeper.engine.checks import prepare, requests
from ratekeeper.engine.plans import Plan
from ratekeeper.engine.statuses import shadowed, single, verdict
from ratekeeper.engine.verdict import Descriptor, Status, Verdict, unlimited
from ratekeeper.rules.model import Entry
from ratekeeper.stores import AsyncStore, Store, open_async_store, open_store
from ratekeeper.stores.memory import AsyncMemoryStore, MemoryStore

_new = tuple.__new__


class Engine(EngineBase, Closing):
    """Decide requests by the limits that rules and the configuration store give them.

    ``store``: the request store (object or URL; default in memory). ``rules``: a ``RuleSet``,
    or rule files and directories to load, validate and hot-reload every ``reload_interval``
    seconds (``None`` turns reloading off). ``config``: the configuration store of per-key
    overrides (object or URL such as ``sqlite:///ratekeeper.db``), which win over the rules.
    ``default``: the limit of a key ``is_allowed`` finds no override for (else it is allowed).
    ``domain``: the namespace of ``is_allowed``'s keys. Plans are cached, at most
    ``cache_size`` of them, none older than ``cache_ttl`` seconds, and a change the configuration
    store reports from any instance drops what it makes wrong at once. ``merge_domains``: rule
    files may share a domain (``load_rules``). ``shadow``: ``check`` lets every refusal through,
    marked ``shadowed`` and logged at DEBUG, as if every limit were a rule's in ``shadow_mode``
    (everything is counted as usual; ``decide``, ``is_allowed`` and ``hit`` answer the store's
    decision as it is). ``quota_mode``: every descriptor of ``check`` is in quota mode, as if
    every rule had ``quota_mode: true`` (a request is refused only when every descriptor not
    ``unlimited`` is over its limit; a descriptor no limit applies to is never over), as
    Envoy's reference service with ``QUOTA_MODE=true``. ``debt``: every limit the engine
    applies (rules, overrides, the default, a limit sent with a descriptor or given to
    ``hit``) counts every hit, refused or not, as Envoy's reference service counts
    (``Limit(debt=True)``; a limit that cannot hold a debt decides as without). Example::

        engine = Engine(rules="ratelimit.yaml", config="sqlite:///ratekeeper.db")
        engine.is_allowed("user:241531")
        engine.check("api", [[("remote_address", "10.0.0.1")]]).allowed
    """

    _memory = MemoryStore
    _open = staticmethod(open_store)
    store: Store
    _apply: Callable[..., Decision]

    def decide(self, key: str, cost: int = 1) -> Decision:
        """Count a hit of ``cost`` on ``key`` under its override, else the default limit.

        A key or cost that is not valid (``ratekeeper.core.inputs``) raises ``InvalidInputError``:
        the key is checked here (its text only before its plan is cached), the cost by the
        store (or here when no limit applies), so that a decision checks each once.
        """
        if key.__class__ is not str:
            key = check_key(key)
        plan = self._lookup(key)  # the plan cache's get: this is the hot path
        if plan is None:
            if not key.isascii() or not key:  # a key with a cached plan was checked for it
                key = check_key(key)
            plan = self._load_key(key)
        if plan.limit is None:
            decision = unlimited(check_cost(cost))
        else:  # the store checks the cost
            decision = self._apply(plan.identity, plan.limit, cost, None)
        if self.observer is not None and cost:
            self._observe(self.planner.domain, plan, decision if plan.limit else None)
        return decision

    def is_allowed(self, key: str, cost: int = 1) -> bool:
        """Whether a hit on ``key`` may go through: ``decide(key, cost).allowed``."""
        if key.__class__ is str and self.observer is None:  # decide's hot path, one call less
            plan = self._lookup(key)
            if plan is not None and plan.limit is not None:
                return self._apply(plan.identity, plan.limit, cost, None)[0]
        return self.decide(key, cost).allowed

    def check(
        self,
        domain: str,
        descriptors: Sequence[Descriptor | Sequence[Entry]],
        hits: int = 1,
        *,
        all_or_nothing: bool = False,
    ) -> Verdict:
        """Decide one request of ``domain`` with Envoy's rate-limit semantics.

        Each descriptor is matched against the rules (overrides win), every counted limit is
        applied in one store call, and the verdict is allowed unless a descriptor is over its
        limit outside shadow mode. ``hits`` is each descriptor's cost (0 only looks). As in
        Envoy, every limit counts even when another refuses; with ``all_or_nothing`` none
        consumes unless all allow. Everything given is checked before anything is counted
        (``checks.requests``): a bad value raises ``InvalidInputError``.
        """
        if (
            (descriptors.__class__ is list or descriptors.__class__ is tuple)
            and len(descriptors) == 1
            and not all_or_nothing
        ):
            plan = self._single(domain, descriptors)
            if plan is not None:
                if plan.limit is None:
                    if hits.__class__ is not int or not 0 <= hits <= MAX_COST:
                        check_cost(hits)
                    result = single(plan, None)
                else:
                    decision = self._apply(plan.identity, plan.limit, hits, None)
                    if decision[0]:  # single(plan, decision), inlined for an allowed hit
                        one = (
                            True,
                            decision,
                            plan.limit,
                            plan.rule,
                            plan.overridden,
                            False,
                            plan.identity,
                        )
                        result = _new(Verdict, (True, (_new(Status, one),)))
                    else:
                        result = single(plan, decision)
                if not result[0] and self.shadow:
                    result = shadowed(domain, result)
                if self.observer is not None and hits:
                    self.observer(domain, result.statuses)
                return result
        if not self._running:
            self._start_unless_closed()
        asked = requests(domain, descriptors, hits)
        plans, batch = prepare(self.planner, domain, asked)
        if len(batch) == 1 and not all_or_nothing:
            decisions = [self._apply(*batch[0])]
        else:
            decisions = self.store.apply_many(batch, all_or_nothing=all_or_nothing) if batch else []
        result = verdict(plans, decisions, quota_mode=self.quota_mode)
        if self.shadow:
            result = shadowed(domain, result)
        if self.observer is not None:
            self._tell(domain, result.statuses, asked)
        return result

    def _tallied(
        self,
        domain: str,
        descriptors: Sequence[Descriptor | Sequence[Entry]],
        hits: int = 1,
        *,
        all_or_nothing: bool = False,
    ) -> Verdict:
        """``check``, its decisions then told to the tally (``EngineBase.tally``)."""
        result = type(self).check(self, domain, descriptors, hits, all_or_nothing=all_or_nothing)
        self._tell_tally(domain, descriptors, hits, result.statuses)
        return result

    def hit(self, key: str, limit: Limit | str, cost: int = 1) -> Decision:
        """Count a hit of ``cost`` on ``key`` under ``limit`` (a ``Limit`` or a rate string),
        given by the caller rather than found in the rules or overrides. The key is counted
        in the engine's domain, as ``decide`` counts it."""
        counted_as, limit = self._given(key, limit)
        decision = self._apply(counted_as, limit, cost, None)
        if self.observer is not None and cost:
            self._observe(self.planner.domain, Plan(counted_as, limit, None, False), decision)
        return decision

    def charge(self, key: str, cost: int = 1, limit: Limit | str | None = None) -> Decision:
        """Count ``cost`` on ``key`` for work already done, even past its limit: under
        ``limit`` as ``hit`` counts, or under the limit ``decide`` finds for it when ``limit``
        is None, on the same counters, with debt (``Limiter.charge``). The decision is allowed
        iff the charge fitted. A limit that cannot hold a debt raises ``InvalidLimitError``."""
        if limit is None:
            if key.__class__ is not str or not key.isascii() or not key:
                key = check_key(key)
            plan = self._lookup(key) or self._load_key(key)
        else:
            plan = Plan(*self._given(key, limit), None, False)
        if plan.limit is None:
            decision = unlimited(check_cost(cost))
        else:
            decision = self._apply(plan.identity, charged(plan.limit), cost, None)
        if self.observer is not None and cost:
            self._observe(self.planner.domain, plan, decision if plan.limit else None)
        return decision

    def peek(self, key: str, limit: Limit | str | None = None) -> Decision:
        """``key``'s state under ``limit``, or under the limit ``decide`` finds for it when
        ``limit`` is None, counting nothing."""
        return self.decide(key, 0) if limit is None else self.hit(key, limit, 0)

    def reset(self, key: str, limit: Limit | str | None = None) -> None:
        """Forget what ``limit`` counted for ``key`` (the limit ``decide`` finds when None)."""
        if limit is None:
            plan = self._load_key(check_key(key))
            if plan.limit is not None:
                self.store.reset(plan.identity, plan.limit)
            return
        counted_as, limit = self._given(key, limit)
        self.store.reset(counted_as, limit)

    def close(self) -> None:
        """Stop the background work and close the stores; again, do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.watcher.stop()
        self.planner.close()
        if self.config is not None:
            self.config.close()
        self.store.close()


class AsyncEngine(EngineBase, AsyncClosing):
    """The asyncio twin of ``Engine``: the same arguments, and awaitable decisions."""

    _memory = AsyncMemoryStore
    _open = staticmethod(open_async_store)
    store: AsyncStore
    _apply: Callable[..., Awaitable[Decision]]

    async def decide(self, key: str, cost: int = 1) -> Decision:
        """Count a hit of ``cost`` on ``key`` under its override, else the default limit.

        A key or cost that is not valid (``ratekeeper.core.inputs``) raises ``InvalidInputError``:
        the key is checked here (its text only before its plan is cached), the cost by the
        store (or here when no limit applies), so that a decision checks each once.
        """
        if key.__class__ is not str:
            key = check_key(key)
        plan = self._lookup(key)  # the plan cache's get: this is the hot path
        if plan is None:
            if not key.isascii() or not key:  # a key with a cached plan was checked for it
                key = check_key(key)
            plan = await self._load(self._load_key, key)
        if plan.limit is None:
            decision = unlimited(check_cost(cost))
        else:  # the store checks the cost
            decision = await self._apply(plan.identity, plan.limit, cost, None)
        if self.observer is not None and cost:
            self._observe(self.planner.domain, plan, decision if plan.limit else None)
        return decision

    async def is_allowed(self, key: str, cost: int = 1) -> bool:
        """Whether a hit on ``key`` may go through: ``decide(key, cost).allowed``."""
        if key.__class__ is str and self.observer is None:  # decide's hot path, one call less
            plan = self._lookup(key)
            if plan is not None and plan.limit is not None:
                return (await self._apply(plan.identity, plan.limit, cost, None))[0]
        return (await self.decide(key, cost)).allowed

    async def check(
        self,
        domain: str,
        descriptors: Sequence[Descriptor | Sequence[Entry]],
        hits: int = 1,
        *,
        all_or_nothing: bool = False,
    ) -> Verdict:
        """Decide one request of ``domain`` with Envoy's rate-limit semantics; see ``Engine``."""
        if (
            (descriptors.__class__ is list or descriptors.__class__ is tuple)
            and len(descriptors) == 1
            and not all_or_nothing
        ):
            plan = self._single(domain, descriptors)
            if plan is not None:
                if plan.limit is None:
                    if hits.__class__ is not int or not 0 <= hits <= MAX_COST:
                        check_cost(hits)
                    result = single(plan, None)
                else:
                    decision = await self._apply(plan.identity, plan.limit, hits, None)
                    if decision[0]:  # single(plan, decision), inlined for an allowed hit
                        one = (
                            True,
                            decision,
                            plan.limit,
                            plan.rule,
                            plan.overridden,
                            False,
                            plan.identity,
                        )
                        result = _new(Verdict, (True, (_new(Status, one),)))
                    else:
                        result = single(plan, decision)
                if not result[0] and self.shadow:
                    result = shadowed(domain, result)
                if self.observer is not None and hits:
                    self.observer(domain, result.statuses)
                return result
        if not self._running:
            await self._load(self._start_unless_closed)
        asked = requests(domain, descriptors, hits)
        loaded: dict[tuple[Entry, ...], Plan] = {}
        if self.config is not None:
            for entries in self.planner.missing(domain, asked):
                loaded[entries] = await self._load(self.planner.load_descriptor, domain, entries)
        plans, batch = prepare(self.planner, domain, asked, loaded)
        if len(batch) == 1 and not all_or_nothing:
            decisions = [await self._apply(*batch[0])]
        else:
            decisions = (
                await self.store.apply_many(batch, all_or_nothing=all_or_nothing) if batch else []
            )
        result = verdict(plans, decisions, quota_mode=self.quota_mode)
        if self.shadow:
            result = shadowed(domain, result)
        if self.observer is not None:
            self._tell(domain, result.statuses, asked)
        return result

    async def _tallied(
        self,
        domain: str,
        descriptors: Sequence[Descriptor | Sequence[Entry]],
        hits: int = 1,
        *,
        all_or_nothing: bool = False,
    ) -> Verdict:
        result = await type(self).check(
            self, domain, descriptors, hits, all_or_nothing=all_or_nothing
        )
        self._tell_tally(domain, descriptors, hits, result.statuses)
        return result

    async def hit(self, key: str, limit: Limit | str, cost: int = 1) -> Decision:
        """Count a hit of ``cost`` on ``key`` under ``limit``; see ``Engine.hit``."""
        counted_as, limit = self._given(key, limit)
        decision = await self._apply(counted_as, limit, cost, None)
        if self.observer is not None and cost:
            self._observe(self.planner.domain, Plan(counted_as, limit, None, False), decision)
        return decision

    async def charge(self, key: str, cost: int = 1, limit: Limit | str | None = None) -> Decision:
        """Count ``cost`` on ``key`` for work already done; see ``Engine.charge``."""
        if limit is None:
            if key.__class__ is not str or not key.isascii() or not key:
                key = check_key(key)
            plan = self._lookup(key) or await self._load(self._load_key, key)
        else:
            plan = Plan(*self._given(key, limit), None, False)
        if plan.limit is None:
            decision = unlimited(check_cost(cost))
        else:
            decision = await self._apply(plan.identity, charged(plan.limit), cost, None)
        if self.observer is not None and cost:
            self._observe(self.planner.domain, plan, decision if plan.limit else None)
        return decision

    async def peek(self, key: str, limit: Limit | str | None = None) -> Decision:
        """``key``'s state, counting nothing; see ``Engine.peek``."""
        return await (self.decide(key, 0) if limit is None else self.hit(key, limit, 0))

    async def reset(self, key: str, limit: Limit | str | None = None) -> None:
        """Forget what ``limit`` counted for ``key``; see ``Engine.reset``."""
        if limit is None:
            plan = await self._load(self._load_key, check_key(key))
            if plan.limit is not None:
                await self.store.reset(plan.identity, plan.limit)
            return
        counted_as, limit = self._given(key, limit)
        await self.store.reset(counted_as, limit)

    async def close(self) -> None:
        """Stop the background work and close the stores; again, do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        await asyncio.to_thread(self.watcher.stop)
        await asyncio.to_thread(self.planner.close)
        if self.config is not None:
            self.config.close()
        await self.store.close()

    async def _load(self, load: Callable[..., Any], *args: Any) -> Any:
        """A cache miss: with a configuration store it is I/O, so it runs in a worker thread."""
        if self.config is None:
            return load(*args)
        return await asyncio.to_thread(load, *args)
