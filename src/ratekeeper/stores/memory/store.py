"""``MemoryStore`` and its asyncio face ``AsyncMemoryStore``: every decision runs under one
lock (the consistency the package states); the tables of the keys kept, and their upkeep, are
``tables.Tables``, which the store is made on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Unpack

from ratekeeper.algorithms.leases import Records, Taken, exchange
from ratekeeper.core.decisions import Decision
from ratekeeper.core.forks import renew_after_fork
from ratekeeper.core.inputs import MAX_COST, check_hit, check_hits, check_key, check_now
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import spec
from ratekeeper.stores.contract import (
    Admitted,
    Health,
    Hit,
    LeaseTerms,
    check_lease,
    check_release,
)
from ratekeeper.stores.memory.tables import Tables

__all__ = ["AsyncMemoryStore", "Clock", "MemoryStore"]

Clock = Callable[[], float]


class MemoryStore(Tables):
    """Request store in this process's memory.

    ``clock`` returns seconds since the epoch (default ``time.time``; tests pass a
    ``ratekeeper.testing.FakeClock``). ``max_keys`` bounds the number of keys kept.
    """

    def __init__(self, *, clock: Clock = time.time, max_keys: int = 1_000_000) -> None:
        super().__init__(max_keys)
        self.clock = clock
        self._slices: dict[tuple[str, str], Records] = {}  # (limit id, key) -> slices held
        self._lock = threading.Lock()
        renew_after_fork(self)

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        """Apply a hit of ``cost`` on ``key`` under ``limit`` atomically; return the decision."""
        if key.__class__ is not str or cost.__class__ is not int or not 0 <= cost <= MAX_COST:
            key, cost = check_hit(key, cost)
        now = self.clock() if now is None else check_now(now)
        lock = self._lock
        lock.acquire()  # cheaper than ``with`` on this path
        try:
            table = self._table(limit.id)
            if table is not None:
                state = table.get(key)
                if state is not None:  # a key kept is one that was checked
                    state, decision = limit.step(state, now, cost, limit)
                    if decision[6]:  # granted: a look and a refusal (but under debt) count nothing
                        table[key] = state
                    table.move_to_end(key)  # a refused key too: it must not be evicted as idle
                    return decision
            if not key.isascii() or not key:  # checked before anything counts it
                key = check_key(key)
            state, decision = limit.step(None, now, cost, limit)
            if decision[6]:
                self._insert(limit, table, key, state, now)
            return decision
        finally:
            lock.release()

    def apply_many(
        self, hits: Iterable[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        """Apply several hits under one lock; return their decisions in order.

        With ``all_or_nothing``, nothing is consumed unless every hit is allowed: the decisions
        still tell which limits refused, and the allowed ones report the state they would have
        left (their ``granted`` is 0). Hits under a limit with debt count whatever the others
        do: when another refused, they are run again alone, in order, and report what they
        counted.
        """
        now = self.clock() if now is None else check_now(now)
        hits = check_hits(hits)
        table = self._table
        with self._lock:
            results = []
            pending: dict[tuple[str, str], Any] = {}  # a key hit twice sees its first hit
            for key, limit, cost in hits:
                slot = (limit.id, key)
                if slot in pending:
                    state = pending[slot]
                else:
                    keys = table(limit.id)
                    state = None if keys is None else keys.get(key)
                    if all_or_nothing and state is not None and limit.copy_state is not None:
                        state = limit.copy_state(state)  # a state its step updates in place
                result = limit.step(state, now, cost, limit)
                pending[slot] = result[0] if cost else state
                results.append(result)
            if (
                all_or_nothing
                and not all(decision[0] for _, decision in results)
                and not all(limit.debt for _, limit, _ in hits)
            ):
                refused = [
                    decision._replace(granted=0) if decision[0] else decision
                    for _, decision in results
                ]
                if not any(limit.debt for _, limit, _ in hits):
                    return refused
                return self._owed(hits, refused, now)
            self._keep(hits, results, now)
        return [decision for _, decision in results]

    def _keep(self, hits: Sequence[Hit], results: list[tuple[Any, Decision]], now: float) -> None:
        """Store the states ``apply_many``'s hits left, where they counted (under the lock)."""
        table = self._table
        for (key, limit, _), (state, decision) in zip(hits, results, strict=True):
            keys = table(limit.id)
            if keys is not None and key in keys:
                if decision[6]:
                    keys[key] = state
                keys.move_to_end(key)
            elif decision[6]:
                self._insert(limit, keys, key, state, now)

    def _owed(self, hits: Sequence[Hit], decisions: list[Decision], now: float) -> list[Decision]:
        """A refused all_or_nothing batch: its hits under a limit with debt counted alone, in
        order, their decisions put in place of the first run's (under the lock)."""
        table = self._table
        pending: dict[tuple[str, str], Any] = {}
        owed: list[Hit] = []
        results = []
        for index, (key, limit, cost) in enumerate(hits):
            if not limit.debt:
                continue
            slot = (limit.id, key)
            if slot in pending:
                state = pending[slot]
            else:
                keys = table(limit.id)
                state = None if keys is None else keys.get(key)
            result = limit.step(state, now, cost, limit)
            pending[slot] = result[0] if cost else state
            owed.append((key, limit, cost))
            results.append(result)
            decisions[index] = result[1]
        self._keep(owed, results, now)
        return decisions

    def admit(self, hits: Iterable[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        """``apply_many`` on the store's clock, each decision with the time it was taken at
        (``Admitted``), for a ``refund`` of what it granted."""
        now = self.clock()
        decisions = self.apply_many(hits, all_or_nothing=all_or_nothing, now=now)
        return [Admitted(decision, now) for decision in decisions]

    def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        """Give back ``cost`` units ``key`` was granted under ``limit`` at ``at`` (the time of
        its ``Admitted``), by the algorithm's ``refund``: from the window, log or bucket that
        counted them, where the state still holds them (after the window turned, nothing).
        A key never below nothing, a bucket never above its capacity. ``InvalidInputError``
        for a bad key, cost or time."""
        key, cost = check_hit(key, cost)
        at = check_now(at)
        if not cost:
            return
        with self._lock:
            table = self._table(limit.id)
            state = None if table is None else table.get(key)
            if table is None or state is None:
                return
            state = spec(limit.algorithm).refund(state, at, cost, limit)
            if state is not None:
                table[key] = state
                return
            del table[key]
            self._count -= 1
            if not table:
                self._drop_table(limit.id)

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        """Give back up to ``slots`` slots ``key`` holds under the concurrency ``limit``.

        The earliest-expiring slots go first. The decision is allowed; its ``granted`` is the
        number of slots released and ``remaining`` the slots now free.
        """
        key, slots = check_key(key), check_release(limit, slots)
        now = self.clock() if now is None else check_now(now)
        with self._lock:
            table = self._table(limit.id)
            state = None if table is None else table.get(key)
            state, decision = limit.step(state, now, -slots, limit)
            if table is not None and key in table:
                table[key] = state
        return decision._replace(granted=-decision.granted)

    def lease(self, key: str, limit: Limit, want: int, **terms: Unpack[LeaseTerms]) -> Taken:
        """Exchange a slice of a leased limit's budget in one atomic step; see
        ``ratekeeper.stores.contract.LeasingStore``."""
        ask = check_lease(key, limit, want, terms)
        key, want = ask.key, ask.want
        now = self.clock() if ask.now is None else check_now(ask.now)
        slot = (limit.id, key)
        with self._lock:
            table = self._table(limit.id)
            state = None if table is None else table.get(key)
            held = self._slices.get(slot, {})
            after, held, taken = exchange(
                state,
                held,
                now,
                limit,
                holder=ask.holder,
                want=want,
                ttl=ask.ttl,
                returned=ask.returned,
                taken_at=ask.taken_at,
                need=ask.need,
            )
            if held:
                self._slices[slot] = held
            else:
                self._slices.pop(slot, None)
            if table is not None and key in table:
                if after is None:
                    del table[key]
                    self._count -= 1
                    if not table:
                        self._drop_table(limit.id)
                else:
                    table[key] = after
                    table.move_to_end(key)
            elif after is not None:
                self._insert(limit, table, key, after, now)
        return taken

    def reset(self, key: str, limit: Limit) -> None:
        """Forget everything ``limit`` counted for ``key``."""
        key = check_key(key)
        with self._lock:
            self._slices.pop((limit.id, key), None)
            table = self._table(limit.id)
            if table is not None and table.pop(key, None) is not None:
                self._count -= 1
                if not table:
                    self._drop_table(limit.id)

    def clear(self) -> None:
        """Forget every key."""
        with self._lock:
            self._tables.clear()
            self._slices.clear()
            self._due.clear()
            self._turns.clear()
            self._count = 0

    def close(self) -> None:
        """Nothing to release; here so that every store can be closed alike."""

    def ping(self) -> Health:
        """Always healthy: the state is in this process."""
        return Health(True)

    def sweep(self, now: float | None = None) -> int:
        """Drop every expired key at once; return how many were dropped.

        This looks at every key under the lock; the store needs no such call, as it drops
        expired keys a few at a time by itself, but it reclaims their memory at once.
        """
        with self._lock:
            now = self.clock() if now is None else check_now(now)
            dropped = 0
            for limit, table in list(self._turns):
                if self._tables.get(limit.id) is not table:  # dropped since
                    continue
                step = limit.step
                expired = [
                    key for key, state in table.items() if not step(state, now, 0, limit)[1][3]
                ]
                for key in expired:
                    del table[key]
                dropped += len(expired)
                if not table:
                    self._drop_table(limit.id)
            self._count -= dropped
            return dropped

    def _after_fork(self) -> None:
        self._lock = threading.Lock()


class AsyncMemoryStore:
    """The asyncio face of a ``MemoryStore``: same state, awaitable methods.

    A decision never waits on I/O, so each method completes without yielding to the event loop.
    """

    def __init__(self, store: MemoryStore | None = None, **options: Any) -> None:
        self.sync = store if store is not None else MemoryStore(**options)
        self.clock = self.sync.clock

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        return self.sync.apply(key, limit, cost, now)

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        return self.sync.apply_many(hits, all_or_nothing=all_or_nothing, now=now)

    async def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        return self.sync.admit(hits, all_or_nothing=all_or_nothing)

    async def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        self.sync.refund(key, limit, cost, at)

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision:
        return self.sync.release(key, limit, slots, now)

    async def lease(self, key: str, limit: Limit, want: int, **terms: Unpack[LeaseTerms]) -> Taken:
        return self.sync.lease(key, limit, want, **terms)

    async def reset(self, key: str, limit: Limit) -> None:
        self.sync.reset(key, limit)

    async def clear(self) -> None:
        self.sync.clear()

    async def close(self) -> None:
        self.sync.close()

    async def ping(self) -> Health:
        return self.sync.ping()

    def __len__(self) -> int:
        return len(self.sync)
