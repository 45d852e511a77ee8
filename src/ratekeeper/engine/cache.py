"""The configuration cache: least recently used entries, each valid for a time to live."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TTLCache(Generic[V]):
    """At most ``maxsize`` entries, each fresh for ``ttl`` seconds of ``clock``.

    ``get`` returns the value while it is fresh, else ``None``; ``stale`` returns it even after
    its time to live (what a process falls back on while the configuration store is down). Safe
    to share between threads: every operation is one step on a dict under the GIL, and a lookup
    racing an eviction is a miss.
    """

    def __init__(self, maxsize: int, ttl: float, clock: Callable[[], float]) -> None:
        if maxsize < 1:
            raise ValueError(f"cache size must be at least 1, not {maxsize!r}")
        if not ttl > 0:
            raise ValueError(f"cache TTL must be positive seconds, not {ttl!r}")
        self.maxsize = maxsize
        self.ttl = ttl
        self.clock = clock
        self._entries: OrderedDict[Hashable, tuple[V, float]] = OrderedDict()
        self._get = self._entries.get
        self._touch = self._entries.move_to_end

    def get(self, key: Hashable) -> V | None:
        entry = self._get(key)
        if entry is None or entry[1] <= self.clock():
            return None
        try:  # noqa: SIM105 - suppress() costs a context manager on every hit
            self._touch(key)
        except KeyError:  # evicted by another thread meanwhile
            pass
        return entry[0]

    def stale(self, key: Hashable) -> V | None:
        entry = self._get(key)
        return None if entry is None else entry[0]

    def put(self, key: Hashable, value: V, ttl: float | None = None) -> None:
        entries = self._entries
        entries[key] = (value, self.clock() + (self.ttl if ttl is None else ttl))
        entries.move_to_end(key)
        while len(entries) > self.maxsize:
            try:
                entries.popitem(last=False)
            except KeyError:  # emptied by another thread meanwhile
                break

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
