"""The configuration cache: at most ``maxsize`` entries, stale ones included, none fresh for
longer than a time to live.

A lookup is on the path of every decision, so a hit reads no clock and writes nothing:
``expire()`` empties the cache every ``ttl`` seconds (the engine's planner calls it from a
background thread), so no entry is older than ``ttl``; and a full cache drops its oldest entry
to make room. A hit keeps no order of use: that would be a write on every decision (an
``OrderedDict.move_to_end``, about half the cost of the lookup it follows), and an entry that
is still wanted after being dropped costs one load, which the emptying every ``ttl`` seconds
costs every entry anyway. What was emptied is kept aside as the ``stale``
entries: the last known values, which a process falls back on while the configuration store
is down. They count against ``maxsize`` with the fresh ones, so that memory stays flat across
expiries: a new entry first drops the key's own stale value, then stale values in any order,
then the oldest fresh entry. At a million distinct keys, with stale values held apart, the
cache held twice ``maxsize`` plans (about 520 bytes each) from the first expiry on.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TTLCache(Generic[V]):
    """At most ``maxsize`` entries, fresh and stale together; stale ones dropped first, then
    the oldest.

    ``get`` returns a value or ``None``; the hot path may call ``lookup(key)``, the same plain
    dict get, directly. Safe to share between threads: each operation is one step on a dict
    under the GIL, and a lookup racing an eviction is a miss.
    """

    def __init__(self, maxsize: int, ttl: float) -> None:
        if maxsize < 1:
            raise ValueError(f"cache size must be at least 1, not {maxsize!r}")
        if not ttl > 0:
            raise ValueError(f"cache TTL must be positive seconds, not {ttl!r}")
        self.maxsize = maxsize
        self.ttl = ttl
        self._entries: OrderedDict[Hashable, V] = OrderedDict()  # oldest first
        self._stale: dict[Hashable, V] = {}
        self.lookup = self._entries.get

    def get(self, key: Hashable) -> V | None:
        return self.lookup(key)

    def stale(self, key: Hashable) -> V | None:
        """The key's value, fresh or from before the last expiry."""
        value = self.lookup(key)
        return self._stale.get(key) if value is None else value

    def put(self, key: Hashable, value: V) -> None:
        entries, stale = self._entries, self._stale
        entries[key] = value
        entries.move_to_end(key)  # a value put again counts as new
        stale.pop(key, None)  # the fresh value supersedes it
        while len(entries) + len(stale) > self.maxsize:
            try:
                if stale:
                    stale.popitem()
                else:
                    entries.popitem(last=False)
            except KeyError:  # emptied by another thread meanwhile
                break

    def discard(self, key: Hashable) -> None:
        """Forget ``key``, its stale value too: what it said is known to be wrong."""
        self._entries.pop(key, None)
        self._stale.pop(key, None)

    def clear(self) -> None:
        """Drop every entry, stale ones included: what they said is known to be wrong."""
        self._entries.clear()
        self._stale = {}

    def expire(self) -> None:
        """Empty the cache, keeping its entries aside as stale (the stale ones before them
        are dropped)."""
        self._stale = dict(self._entries)
        self._entries.clear()

    def __len__(self) -> int:
        """The fresh entries (``stale_count`` the others)."""
        return len(self._entries)

    @property
    def stale_count(self) -> int:
        """The entries kept aside at the last expiry and not dropped since."""
        return len(self._stale)
