"""The in-memory request store: the embedded default.

Consistency: exact. Every ``apply`` runs the algorithm's ``step`` under one lock, so decisions
on a key are serialised across threads, and an asyncio task can never be interrupted inside one
(the store never awaits). The state lives in this process only: several processes need a shared
store such as Redis. A forked child starts with a copy of the state and a fresh lock (a lock
held by another thread at the fork would otherwise stay held in the child for ever).

Memory is bounded two ways. A key whose limit is fully available again holds nothing worth
keeping, so it expires ``reset_after`` seconds after its last hit; and at most ``max_keys`` keys
are kept, the least recently used evicted first. Expired keys are dropped a few at a time, by
the calls that add a key (the only calls that grow the store), so no call ever scans the store:
each key is filed under a time shortly after it expires (within a quarter of its time to live),
and every new key looks at up to ``EXPIRE_PER_INSERT`` keys whose time has come, drops those
that are expired, and files again those hit since. A hit on a key already kept does no
expiry work at all.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from heapq import heappop, heappush
from math import ceil, frexp, ldexp
from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.decision import Decision
from ratekeeper.errors import InvalidInputError, InvalidLimitError, StoreConfigError
from ratekeeper.forks import renew_after_fork
from ratekeeper.inputs import MAX_COST, check_hit, check_hits, check_key
from ratekeeper.limit import Limit
from ratekeeper.stores.health import Health

Clock = Callable[[], float]

#: One hit in a batch: ``(key, limit, cost)``.
Hit = tuple[str, Limit, int]

Slot = tuple[str, str]

#: How many due keys each new key looks at: more than one, so expiry outpaces the inserts.
EXPIRE_PER_INSERT = 8

#: The finest filing time (2**-4 s): a key is filed at a multiple of a power of two seconds.
_FINEST = -4

#: Seconds a key is kept at least after it was written, expired or not: a key hit again soon
#: (a busy key of a fast limit, whose state frees up within microseconds) is updated in place
#: rather than dropped and made anew on every hit.
LINGER = 2.0


class MemoryStore:
    """Request store in this process's memory.

    ``clock`` returns seconds since the epoch (default ``time.time``; tests pass a
    ``ratekeeper.testing.FakeClock``). ``max_keys`` bounds the number of keys kept.
    """

    def __init__(self, *, clock: Clock = time.time, max_keys: int = 1_000_000) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise StoreConfigError(f"max_keys must be an integer of at least 1, not {max_keys!r}")
        self.clock = clock
        self.max_keys = max_keys
        # (limit id, key) -> [state, time the state expires, the filing set it is in]; the
        # first two are updated in place by every hit
        self._entries: OrderedDict[Slot, list[Any]] = OrderedDict()
        self._get = self._entries.get
        self._touch = self._entries.move_to_end
        self._lock = threading.Lock()
        self._filed: dict[float, set[Slot]] = {}  # filing time -> the keys filed under it
        self._times: list[float] = []  # the filing times, a heap
        self._due: set[Slot] = set()  # the keys of a filing time that came, not all looked at
        renew_after_fork(self)

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        """Apply a hit of ``cost`` on ``key`` under ``limit`` atomically; return the decision."""
        if (
            key.__class__ is not str
            or cost.__class__ is not int
            or not 0 <= cost <= MAX_COST
            or not key.isascii()
            or not key
        ):
            key, cost = check_hit(key, cost)
        if now is None:
            now = self.clock()
        slot = (limit.id, key)
        lock = self._lock
        lock.acquire()  # cheaper than ``with`` on this path
        try:
            entry = self._get(slot)
            if entry is not None:
                state, decision = limit.step(entry[0], now, cost, limit)
                if decision[0] and cost:  # a look (cost 0) or a refusal changes nothing
                    entry[0] = state
                    entry[1] = now + decision[3]
                self._touch(slot)  # a refused key too: it must not be evicted as idle
                return decision
            state, decision = limit.step(None, now, cost, limit)
            if state is not None and cost:
                self._insert(slot, state, now + decision[3], now)
            return decision
        finally:
            lock.release()

    def apply_many(
        self, hits: Iterable[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        """Apply several hits under one lock; return their decisions in order.

        With ``all_or_nothing``, nothing is consumed unless every hit is allowed: the decisions
        still tell which limits refused, and the allowed ones report the state they would have
        left (their ``granted`` is 0).
        """
        if now is None:
            now = self.clock()
        hits = check_hits(hits)
        entries = self._entries
        with self._lock:
            results = []
            pending: dict[tuple[str, str], Any] = {}  # a key hit twice sees its first hit
            for key, limit, cost in hits:
                slot = (limit.id, key)
                if slot in pending:
                    state = pending[slot]
                else:
                    entry = entries.get(slot)
                    state = None if entry is None else entry[0]
                    if all_or_nothing and state is not None and limit.copy_state is not None:
                        state = limit.copy_state(state)  # a state its step updates in place
                result = limit.step(state, now, cost, limit)
                pending[slot] = result[0] if cost else state
                results.append(result)
            if all_or_nothing and not all(decision[0] for _, decision in results):
                return [
                    decision._replace(granted=0) if decision[0] else decision
                    for _, decision in results
                ]
            for (key, limit, cost), (state, decision) in zip(hits, results, strict=True):
                if state is not None and cost:
                    slot = (limit.id, key)
                    entry = entries.get(slot)
                    if entry is not None:
                        entry[0], entry[1] = state, now + decision[3]
                        entries.move_to_end(slot)
                    else:
                        self._insert(slot, state, now + decision[3], now)
        return [decision for _, decision in results]

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        """Give back up to ``slots`` leases ``key`` holds under the concurrency ``limit``.

        The earliest-expiring leases go first. The decision is allowed; its ``granted`` is the
        number of slots released and ``remaining`` the slots now free.
        """
        key, slots = check_key(key), check_release(limit, slots)
        if now is None:
            now = self.clock()
        slot = (limit.id, key)
        with self._lock:
            entry = self._get(slot)
            state = None if entry is None else entry[0]
            state, decision = limit.step(state, now, -slots, limit)
            if entry is not None:
                entry[0] = state
                entry[1] = now + decision[3]
        return decision._replace(granted=-decision.granted)

    def reset(self, key: str, limit: Limit) -> None:
        """Forget everything ``limit`` counted for ``key``."""
        slot = (limit.id, check_key(key))
        with self._lock:
            entry = self._entries.pop(slot, None)
            if entry is not None:
                entry[2].discard(slot)

    def clear(self) -> None:
        """Forget every key."""
        with self._lock:
            self._entries.clear()
            self._filed.clear()
            self._times.clear()
            self._due = set()

    def close(self) -> None:
        """Nothing to release; here so that every store can be closed alike."""

    def ping(self) -> Health:
        """Always healthy: the state is in this process."""
        return Health(True)

    def sweep(self, now: float | None = None) -> int:
        """Drop every expired key at once; return how many were dropped.

        This scans every key under the lock; the store needs no such call, as it drops expired
        keys a few at a time by itself, but it reclaims their memory at once.
        """
        with self._lock:
            if now is None:
                now = self.clock()
            entries = self._entries
            expired = [slot for slot, entry in entries.items() if entry[1] <= now]
            for slot in expired:
                entries.pop(slot)[2].discard(slot)
            return len(expired)

    def __len__(self) -> int:
        return len(self._entries)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    def _insert(self, slot: Slot, state: Any, expires: float, now: float) -> None:
        entries = self._entries
        entry = [state, expires, None]
        entries[slot] = entry
        self._file(slot, entry, now)
        # Only a new key grows the store, so only a new key drops expired ones and makes room.
        if self._due or self._times[0] <= now:
            self._expire(now, EXPIRE_PER_INSERT)
        if len(entries) > self.max_keys:
            evicted, entry = entries.popitem(last=False)
            entry[2].discard(evicted)

    def _file(self, slot: Slot, entry: list[Any], now: float) -> None:
        """File ``slot`` under a time a little after it expires (and at least ``LINGER``
        seconds from now): a multiple of a power of two seconds that is at least an eighth of
        its time to live."""
        expires = entry[1]
        if expires < now + LINGER:
            expires = now + LINGER
        scale = frexp((expires - now) * 0.125)[1]  # 2**scale >= an eighth of the time to live
        if scale < _FINEST:
            scale = _FINEST
        when = ldexp(ceil(ldexp(expires, -scale)), scale)
        keys = self._filed.get(when)
        if keys is None:
            keys = self._filed[when] = set()
            heappush(self._times, when)
        keys.add(slot)
        entry[2] = keys

    def _expire(self, now: float, budget: int) -> None:
        """Look at up to ``budget`` keys filed under a time that has come: drop the expired,
        and file again those hit since they were filed."""
        entries, times = self._entries, self._times
        due = self._due
        while budget:
            if not due:
                if not times or times[0] > now:
                    return
                due = self._due = self._filed.pop(heappop(times))
                continue
            slot = due.pop()
            budget -= 1
            entry = entries.get(slot)
            if entry is None or entry[2] is not due:  # gone, or filed elsewhere since
                continue
            if entry[1] <= now:
                del entries[slot]
            else:
                self._file(slot, entry, now)


def check_release(limit: Limit, slots: Any) -> int:
    """``slots`` if it can be released from ``limit``: ``InvalidLimitError`` unless ``limit`` is a
    concurrency limit, ``InvalidInputError`` unless ``slots`` is an integer from 1 to
    ``MAX_COST``."""
    if limit.algorithm is not Algorithm.CONCURRENCY:
        raise InvalidLimitError(f"release needs a concurrency limit, not {limit.algorithm.value}")
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_COST:
        raise InvalidInputError(f"slots must be a positive integer, not {slots!r}")
    return int(slots)


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

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision:
        return self.sync.release(key, limit, slots, now)

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
