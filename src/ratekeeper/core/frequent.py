"""The most frequent keys of a stream, in bounded memory: a mergeable Misra-Gries summary.

A ``Summary`` keeps at most ``capacity`` keys with a count each, however many distinct keys
the stream has. Each count is a lower bound on the key's true count, and at most ``error``
below it::

    count <= true count <= count + error,   error <= total / (capacity + 1)

where ``total`` is the weight summarized. A key whose true count exceeds ``error`` is always
kept, so with a stream of N hits every key of more than N / (capacity + 1) hits is found.

Summaries merge (Agarwal et al., "Mergeable summaries", 2012): ``merged`` adds the counts of
any number of summaries, exact counts included, and keeps the ``capacity`` largest by taking
the next largest count off every key. The bound then holds over the merged stream, which is
how a sliding window is summarized (one summary per slot of time, merged when asked) and how
the summaries of several processes add up. No I/O and no clock here.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Summary"]


@dataclass(frozen=True, slots=True)
class Summary:
    """At most ``capacity`` keys of a stream of ``total`` hits, each with a count at most
    ``error`` below its true count (see the module)."""

    capacity: int
    total: int = 0
    error: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.capacity.__class__ is not int or self.capacity < 1:
            raise ValueError(
                f"a summary's capacity is an integer of at least 1, not {self.capacity!r}"
            )

    @classmethod
    def of(cls, counts: Mapping[str, int], capacity: int) -> Summary:
        """The summary of exact ``counts`` (kept whole when they fit in ``capacity``)."""
        return cls(capacity).merged((), exact=counts)

    @property
    def bound(self) -> int:
        """The guarantee: ``error`` never exceeds ``total // (capacity + 1)``."""
        return self.total // (self.capacity + 1)

    def merged(self, others: Iterable[Summary], exact: Mapping[str, int] | None = None) -> Summary:
        """This summary, ``others`` and the ``exact`` counts as one summary of ``capacity``."""
        counts = dict(self.counts)
        total, error = self.total, self.error
        for other in others:
            total += other.total
            error += other.error
            for key, count in other.counts.items():
                counts[key] = counts.get(key, 0) + count
        if exact:
            for key, count in exact.items():
                counts[key] = counts.get(key, 0) + count
                total += count
        if len(counts) > self.capacity:
            largest = heapq.nlargest(self.capacity + 1, counts.values())
            cut = largest[-1]  # the (capacity + 1)-th largest: taken off every key
            error += cut
            counts = {key: count - cut for key, count in counts.items() if count > cut}
        return Summary(self.capacity, total, error, counts)

    def top(self, n: int) -> list[tuple[str, int]]:
        """The ``n`` keys of the largest counts, largest first (ties by key)."""
        return heapq.nsmallest(n, self.counts.items(), key=lambda item: (-item[1], item[0]))

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data; ``from_dict`` reads it back."""
        return {
            "capacity": self.capacity,
            "total": self.total,
            "error": self.error,
            "counts": dict(self.counts),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Summary:
        return cls(
            int(data["capacity"]), int(data["total"]), int(data["error"]), dict(data["counts"])
        )
