"""A trace: the hits a simulation replays, as ``(time, key, cost)`` events.

A ``Trace`` holds its events in memory as three columns, in time order; a simulation also
takes any iterable of events (what the loaders yield), read a chunk at a time. A trace may
carry a ``Retry``: how its clients come back after a refusal, which makes the hits a limit sees
depend on its own decisions (a retry storm).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from math import isfinite
from typing import Any

from ratekeeper.core.errors import InvalidInputError, TraceError
from ratekeeper.core.inputs import MAX_COST, check_cost, check_key

#: One hit: seconds since the epoch, the key, and its cost.
Event = tuple[float, str, int]

#: How a retry waits: the refusal's ``retry_after``, or a fixed ``gap`` after the refusal.
RETRY_AFTER = "retry_after"
IMMEDIATELY = "immediately"


@dataclass(frozen=True)
class Retry:
    """How a refused client comes back.

    ``after`` is ``"retry_after"`` (it waits the ``Retry-After`` the refusal gave it, plus
    ``gap``) or ``"immediately"`` (it waits only ``gap`` seconds). A request is tried at most
    ``1 + max_retries`` times (``max_retries`` from 0 to 1,000); a refusal whose
    ``retry_after`` is infinite is never retried.
    """

    after: str = RETRY_AFTER
    gap: float = 0.0
    max_retries: int = 10

    def __post_init__(self) -> None:
        if self.after not in (RETRY_AFTER, IMMEDIATELY):
            raise TraceError(f"retry after must be {RETRY_AFTER!r} or {IMMEDIATELY!r}")
        if isinstance(self.gap, bool) or not isinstance(self.gap, int | float):
            raise TraceError(f"retry gap must be finite seconds >= 0, not {self.gap!r}")
        if not (isfinite(self.gap) and self.gap >= 0):
            raise TraceError(f"retry gap must be finite seconds >= 0, not {self.gap!r}")
        if self.after == IMMEDIATELY and self.gap == 0:
            raise TraceError("an immediate retry needs a gap > 0, or it would never end")
        retries = self.max_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 1_000:
            raise TraceError(f"max_retries must be a whole number from 0 to 1,000, not {retries!r}")


@dataclass(frozen=True, eq=False)
class Trace:
    """Events in memory: ``times`` (non-decreasing seconds since the epoch), ``keys`` and
    ``costs`` (``None``: every cost is 1), aligned; a ``name`` for reports; an optional
    ``retry`` policy; ``marks``, the moments of an attack a generator made, as ``(start, end)``
    times, which the plots shade. Build one from events with ``Trace.from_events``."""

    times: Sequence[float]
    keys: Sequence[str]
    costs: Sequence[int] | None = None
    name: str = "trace"
    retry: Retry | None = None
    marks: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if len(self.times) != len(self.keys) or (
            self.costs is not None and len(self.costs) != len(self.times)
        ):
            raise TraceError("a trace's times, keys and costs must have the same length")

    @classmethod
    def from_events(
        cls, events: Iterable[Event], name: str = "trace", retry: Retry | None = None
    ) -> Trace:
        """A trace of ``events``, sorted by time (events of equal time keep their order)."""
        ordered = sorted(events, key=lambda event: event[0])
        costs = [event[2] for event in ordered]
        return cls(
            [event[0] for event in ordered],
            [event[1] for event in ordered],
            None if all(cost == 1 for cost in costs) else costs,
            name,
            retry,
        )

    def __len__(self) -> int:
        return len(self.times)

    def __iter__(self) -> Iterator[Event]:
        costs = self.costs if self.costs is not None else [1] * len(self.times)
        return zip(self.times, self.keys, costs, strict=True)

    @property
    def duration(self) -> float:
        """Seconds from the first event to the last (0 when empty)."""
        return self.times[-1] - self.times[0] if self.times else 0.0


def chunks(events: Iterable[Event], size: int) -> Iterator[Trace]:
    """``events`` in consecutive in-memory traces of at most ``size`` events each. Raises
    ``TraceError`` for ``events`` that are not an iterable of ``(time, key, cost)``."""
    if isinstance(events, Trace):
        for start in range(0, len(events), size):
            stop = start + size
            costs = events.costs
            yield Trace(
                events.times[start:stop],
                events.keys[start:stop],
                None if costs is None else costs[start:stop],
                events.name,
            )
        return
    given: object = events  # what a caller passed, typed or not
    if isinstance(given, str | bytes):
        raise TraceError(
            f"events must be (time, key, cost) tuples, not a string ({given[:80]!r}); "
            "ratekeeper.simulate.loaders reads trace files"
        )
    try:
        iterator = iter(events)
    except TypeError:
        raise TraceError(
            f"events must be a Trace or an iterable of (time, key, cost), not {events!r}"
        ) from None
    while True:
        part = list(islice(iterator, size))
        if not part:
            return
        try:
            costs = [event[2] for event in part]
            times = [event[0] for event in part]
            keys = [event[1] for event in part]
        except (TypeError, IndexError, KeyError):
            bad = next((event for event in part if not _event_like(event)), part[0])
            raise TraceError(f"an event must be (time, key, cost), not {bad!r}") from None
        yield Trace(times, keys, None if costs.count(1) == len(costs) else costs)


def _event_like(event: Any) -> bool:
    return isinstance(event, tuple | list) and len(event) == 3


def checked(part: Trace, inverse: float, first: int) -> tuple[list[float], dict[str, list[int]]]:
    """Check the events of ``part``, the first numbered ``first`` (from 1): each time times
    ``inverse``, and the positions of each key in ``part``, in order. Raises ``TraceError``
    naming the first time that is not finite seconds (or becomes infinite times ``inverse``),
    cost that is not valid (see ``ratekeeper.core.inputs.check_cost``) or key that is not."""
    times, costs, keys = part.times, part.costs, part.keys
    try:
        scaled = list(map(inverse.__mul__, times))
        fine = isfinite(sum(scaled))  # NaN and infinities carry through a sum
    except (TypeError, OverflowError):  # a time that is not a number, or a huge int
        fine = False
    if not fine:
        for number, when in enumerate(times, first):
            try:
                if isfinite(when * inverse):
                    continue
                finite = isfinite(when)
            except (TypeError, OverflowError):
                finite = False
            if finite:
                raise TraceError(
                    f"event {number}: time {when!r} is too far from 0 for bins of {1 / inverse:g} s"
                )
            raise TraceError(f"event {number}: time {repr(when)[:80]} is not finite seconds")
    if costs is not None and not all(
        cost.__class__ is int and 0 <= cost <= MAX_COST for cost in costs
    ):
        for number, cost in enumerate(costs, first):
            try:
                check_cost(cost)
            except InvalidInputError as error:
                raise TraceError(f"event {number}: {error}") from None
    try:
        groups = _positions(keys)
        for key in groups:
            check_key(key)
    except (TypeError, InvalidInputError):  # an unhashable key, or an invalid one
        for number, key in enumerate(keys, first):
            try:
                check_key(key)
            except InvalidInputError as error:
                raise TraceError(f"event {number}: {error}") from None
        raise
    return scaled, groups


def _positions(keys: Sequence[str]) -> dict[str, list[int]]:
    """The positions of each key in ``keys``, in order."""
    groups: dict[str, list[int]] = {}
    get = groups.get
    for position, key in enumerate(keys):
        found = get(key)
        if found is None:
            groups[key] = [position]
        else:
            found.append(position)
    return groups
