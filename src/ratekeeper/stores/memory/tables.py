"""The keys a ``MemoryStore`` keeps, and how their memory stays bounded (``Tables``).

The keys of each limit sit in a table of their own, least recently used first, each holding its
state and nothing else. Memory is bounded two ways. A key whose limit is fully available again
holds nothing worth keeping, so it is dropped once looks at it (steps of cost 0) say it has been
for ``LINGER`` seconds; and at most ``max_keys`` keys are kept, the least recently used of a
limit evicted first. Expired keys are dropped a few at a time, from the front of their table,
by the calls that add a key (the only calls that grow the store), so no call ever scans the
store: each new key looks at up to ``EXPIRE_PER_INSERT`` keys at the front of its own table,
and as many at the front of one other table, in turn. The front of a table is its least
recently used key: one still in use stops the look, and its table is not looked at again before
that key could go. So a key is dropped ``LINGER`` seconds after it is free, or up to one
``reset_after`` of the key ahead of it later; a hit on a key already kept does no expiry work.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

from ratekeeper.core.errors import StoreConfigError
from ratekeeper.core.limits import Limit

#: The keys of one limit: key -> state, least recently used first.
Table = OrderedDict[str, Any]

#: How many keys each new key may drop from the front of a table: more than one, so that
#: expiry outpaces the inserts.
EXPIRE_PER_INSERT = 8

#: Seconds a key is kept at least after it is free: a busy key of a fast limit (free again
#: microseconds after each hit) is updated in place rather than dropped and made anew.
LINGER = 2.0


class Tables:
    """The tables of a ``MemoryStore``'s keys, one per limit, and their upkeep: a new key
    inserted drops expired ones and evicts past ``max_keys`` (see the module). The store calls
    them under its lock."""

    def __init__(self, max_keys: int) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise StoreConfigError(f"max_keys must be an integer of at least 1, not {max_keys!r}")
        self.max_keys = max_keys
        self._tables: dict[str, Table] = {}  # limit id -> its keys
        self._table = self._tables.get
        self._due: dict[str, float] = {}  # limit id -> when its front key may be free
        # (the limit its keys are looked at with, their table), each table looked at in turn;
        # a dropped table's turn is dropped when it comes
        self._turns: deque[tuple[Limit, Table]] = deque()
        self._largest = ""  # the limit id that held the most keys when last looked for
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _insert(self, limit: Limit, table: Table | None, key: str, state: Any, now: float) -> None:
        limit_id = limit.id
        if table is None:
            table = self._tables[limit_id] = OrderedDict()
            self._due[limit_id] = now
            self._turns.append((limit, table))
        table[key] = state
        self._count += 1
        # Only a new key grows the store, so only a new key drops expired ones and makes room.
        self._expire(limit, table, now)
        self._expire_other(limit_id, now)
        if self._count > self.max_keys:
            self._evict(limit_id)

    def _expire(self, limit: Limit, table: Table, now: float) -> None:
        """Drop up to ``EXPIRE_PER_INSERT`` keys from the front of ``limit``'s table that have
        been free for ``LINGER`` seconds, unless its front key was seen and will not be free
        so soon."""
        due, limit_id = self._due, limit.id
        if due[limit_id] > now:
            return
        step = limit.step
        for _ in range(EXPIRE_PER_INSERT):
            key = next(iter(table))
            state = table[key]
            # The linger first: a key hit within it is not free LINGER seconds ago.
            wait = step(state, now - LINGER, 0, limit)[1][3]  # reset_after, after a look
            if not wait:
                wait = step(state, now, 0, limit)[1][3]  # and free now (a window may not be)
            if wait:
                due[limit_id] = now + wait
                return
            del table[key]
            self._count -= 1
            if not table:
                self._drop_table(limit_id)
                return
        due[limit_id] = now

    def _expire_other(self, limit_id: str, now: float) -> None:
        """Expire keys of the next table in turn other than ``limit_id``'s."""
        tables, turns = self._tables, self._turns
        while turns:
            other, table = turns[0]
            if tables.get(other.id) is not table:  # dropped since
                turns.popleft()
                continue
            turns.rotate(-1)
            if other.id != limit_id:
                self._expire(other, table, now)
                return
            if len(turns) == 1:
                return

    def _evict(self, limit_id: str) -> None:
        """Evict the least recently used key of the limit ``limit_id``, unless it holds less
        than its share of the keys: then of the limit that holds the most."""
        tables = self._tables
        share = self._count / len(tables)
        table = tables[limit_id]
        if len(table) < share or len(table) == 1:
            largest = tables.get(self._largest)
            if largest is None or len(largest) < share:
                self._largest, largest = max(tables.items(), key=_size)
            limit_id, table = self._largest, largest
        del table[next(iter(table))]
        self._count -= 1
        if not table:
            self._drop_table(limit_id)

    def _drop_table(self, limit_id: str) -> None:
        del self._tables[limit_id], self._due[limit_id]


def _size(item: tuple[str, Table]) -> int:
    return len(item[1])
